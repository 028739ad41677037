"""Is the reported cheapest point the cheapest one that a full-length prediction confirms?

For each job, ``servopt optimize`` runs (in this process, its CPU time measured); then every trial
that the search scored (estimated or simulated: all but those a rule rejected before any
prediction) and that costs less than the front's cheapest point is predicted again the way
``servopt predict --requests FINAL`` predicts it: the simulation of ``fidelity.final_requests``
requests (the compiled deployment the trial scored, the workload's traffic and SLOs), with the
re-check's seed and two more seeds. A trial that meets every target on the re-check's seed is a
cheaper confirmed point the front missed. The job passes when there is none, and the cheapest
point itself is confirmed.

Jobs:
- ``issue-70b``: issue 19's job: Llama-3.1-70B-Instruct, Poisson 20 req/s, prompts ~1,500 tokens
  (lognormal, sigma 0.3), outputs ~300 (lognormal, sigma 0.3), P99 TTFT 1 s / TPOT 60 ms, H100,
  H200 and A100 (default search space and budget).
- ``8b-tight-tpot``: Llama-3.1-8B-Instruct at 30 req/s, 2,000-token prompts, 250-token outputs,
  P99 TTFT 0.5 s / TPOT 25 ms on L40S and H200 (both priced per GPU, so fleets of every size
  compete): many fleets sit just at the TPOT target.
- ``qwen-32b-bursty``: Qwen2.5-32B-Instruct, gamma arrivals (CV 2) at 6 req/s, ShareGPT-like
  lengths, P99 TTFT 2 s / TPOT 50 ms on H100 and L40S: bursts make short runs look better than
  long ones.
Each job prints whether the search's cheapest point failed its re-check (what the re-check must
survive), how many re-checks ran, and the verdicts.

    python benchmarks/bench_front_confirmed.py [--jobs NAME ...] [--trials N]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import optuna

from bench_optimizer_setup import process_cpu_s

from servopt.costmodels.deployment import Deployment
from servopt.optimizer.job import Job
from servopt.optimizer.study import RECORD_ATTR, evaluated_trials, stored_rechecks
from servopt.optimizer.workload import parse_workload

JOBS = {
    "issue-70b": {
        "model": "meta-llama/Llama-3.1-70B-Instruct",
        "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 20},
                    "input_tokens": {"kind": "lognormal", "mean": 1500, "sigma": 0.3},
                    "output_tokens": {"kind": "lognormal", "mean": 300, "sigma": 0.3}},
        "slo": {"p99_ttft_s": 1.0, "p99_tpot_s": 0.06},
        "gpus": ["h100", "h200", "a100-80gb"],
    },
    "8b-tight-tpot": {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 30},
                    "input_tokens": {"kind": "fixed", "value": 2000}, "output_tokens": {"kind": "fixed", "value": 250}},
        "slo": {"p99_ttft_s": 0.5, "p99_tpot_s": 0.025},
        "gpus": ["l40s", "h200"],
    },
    "qwen-32b-bursty": {
        "model": "Qwen/Qwen2.5-32B-Instruct",
        "traffic": {"arrival": {"kind": "gamma", "rate_per_s": 6, "cv": 2},
                    "input_tokens": {"kind": "lognormal", "mean": 600, "sigma": 1.0},
                    "output_tokens": {"kind": "lognormal", "mean": 250, "sigma": 1.0}},
        "slo": {"p99_ttft_s": 2.0, "p99_tpot_s": 0.05},
        "gpus": ["h100", "l40s"],
    },
}
EXTRA_SEEDS = (2, 3)


def confirm(job: Job, record: dict, seed: int) -> tuple[bool, tuple[float, float] | None]:
    """Whether the trial's deployment meets every target in a simulation of ``final_requests``."""
    problem, evaluator = job.problem, job.evaluator
    compiled = problem.ctx.compile(record["model"], Deployment.model_validate(record["deployment"]["spec"]))
    scored = evaluator.predict(record["model"], compiled, job.workload.fidelity.final_requests, seed)
    return scored.feasible, scored.values


def run_job(name: str, trials: int | None) -> bool:
    data = dict(JOBS[name])
    if trials:
        data["budget"] = {"trials": trials}
    workload = parse_workload(data, name)
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(workload, f"{tmp}/{name}", name=name)
        start_cpu, start = process_cpu_s(), time.perf_counter()
        outcome = job.run(progress=False)
        spent, wall = process_cpu_s() - start_cpu, time.perf_counter() - start
        study = job.open_study(create=False)
        rechecks = stored_rechecks(study)
        records = {t.number: t.user_attrs[RECORD_ATTR] for t in evaluated_trials(study)}
        values = {t.number: t.values for t in evaluated_trials(study)}
        cost_key = f"cost_{workload.objective.cost}"
        front = sorted(outcome.front, key=lambda n: rechecks[n]["values"][0])
        search_cheapest = min((n for n, r in records.items() if r["feasible"] and r["fidelity"] == "simulate"),
                              key=lambda n: values[n][0], default=None)
        print(f"\n{name}: {outcome.trials} trials, {outcome.simulations} simulated, {outcome.rechecked} re-checked "
              f"at {workload.fidelity.final_requests} requests; {spent:.1f} CPU s, {wall:.1f} s wall")
        if search_cheapest is not None:
            check = rechecks.get(search_cheapest)
            verdict = "not re-checked (a re-checked point as cheap and faster passed)" if check is None else (
                "passed" if check["feasible"] else f"FAILED ({check['reason']})")
            print(f"  search's cheapest feasible: trial {search_cheapest} at {values[search_cheapest][0]:.4g}: "
                  f"its re-check {verdict}")
        if not front:
            print("  front empty")
            return False
        cheapest = front[0]
        cost = rechecks[cheapest]["values"][0]
        print(f"  reported cheapest: trial {cheapest} at {cost:.4g} ({records[cheapest]['deployment']['spec']['gpu']}, "
              f"{records[cheapest]['num_gpus']} GPUs, P99 {rechecks[cheapest]['values'][1]:.3g} s)")
        # Distinct deployments scored by the search, cheaper than the reported cheapest.
        cheaper: dict[str, int] = {}
        for number, record in sorted(records.items()):
            if record["fidelity"] == "precheck" or record[cost_key] is None or record[cost_key] >= cost - 1e-9:
                continue
            cheaper.setdefault(f"{record['model']}|{sorted(record['deployment']['spec'].items())}", number)
        seed = workload.seed + 1
        missed = []
        for number in cheaper.values():
            passes, predicted = confirm(job, records[number], seed)
            if passes:
                missed.append((number, predicted))
        ok = not missed and confirm(job, records[cheapest], seed)[0]
        others = [confirm(job, records[cheapest], s)[0] for s in EXTRA_SEEDS]
        print(f"  {len(cheaper)} cheaper deployments predicted with {workload.fidelity.final_requests} requests "
              f"(seed {seed}): {len(missed)} meet every target"
              + "".join(f"; trial {n} at {v[0]:.4g}, P99 {v[1]:.3g} s" for n, v in missed if v))
        print(f"  the reported cheapest meets every target on seeds {[seed, *EXTRA_SEEDS]}: "
              f"{[confirm(job, records[cheapest], seed)[0], *others]}")
        print(f"  {name}: {'PASS' if ok else 'FAIL'}")
        return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", nargs="*", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--trials", type=int, default=None, help="override each job's trial budget")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models from servopt's catalog
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results = {name: run_job(name, args.trials) for name in args.jobs}
    print(f"\n{sum(results.values())} of {len(results)} jobs: the reported cheapest is the cheapest confirmed")
    if not all(results.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
