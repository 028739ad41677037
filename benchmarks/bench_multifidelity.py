"""Multi-fidelity simulation: what the short first run costs and what it changes.

The same job runs twice, in this process: with the default rungs (a short simulation of
``search_requests / 4`` first; the search's length only for trials whose P99 interval straddles an
SLO or the simulated front) and with one rung (``first_requests = search_requests``). For each run:
CPU time, how many simulations ran at each length, re-checks, and the re-checked front's
hypervolume (reference 1.1 x the nadir of both fronts). Then every trial the short run settled is
simulated at the full length with the same seed, and the verdicts compared: a trial settled as
infeasible that the full length finds feasible, or one settled as dominated that the full length
puts on the search's front, is a wrong stop.

Jobs: ``aic-70b`` (bench_vs_aiconfigurator's: Llama-3.1-70B on at most 8 x H200, ISL 4000 / OSL
500, Poisson 4 req/s, TTFT 1 s / TPOT 50 ms) and ``default`` (the built-in job).

    python benchmarks/bench_multifidelity.py [--jobs aic-70b default] [--trials 150]
"""

from __future__ import annotations

import argparse
import copy
import os
import tempfile
import time

import numpy as np
import optuna
import yaml
from bench_optimizer_hypervolume import hypervolume_2d
from bench_optimizer_setup import process_cpu_s
from bench_vs_aiconfigurator import WORKLOAD as AIC_WORKLOAD

from servopt.costmodels.deployment import Deployment
from servopt.optimizer.defaults import default_workload_text
from servopt.optimizer.job import Job
from servopt.optimizer.study import RECORD_ATTR, evaluated_trials, final_front, pareto_mask, stored_rechecks
from servopt.optimizer.workload import parse_workload

JOBS = {"aic-70b": AIC_WORKLOAD, "default": None}


def run(data: dict, name: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(parse_workload(data, name), f"{tmp}/{name}", name=name)
        start, wall = process_cpu_s(), time.perf_counter()
        outcome = job.run(progress=False)
        spent, wall = process_cpu_s() - start, time.perf_counter() - wall
        study = job.open_study(create=False)
        trials = evaluated_trials(study)
        rechecks = stored_rechecks(study)
        front = np.array([rechecks[n]["values"] for n in final_front(study)], dtype=float).reshape(-1, 2)
        return {"job": job, "cpu_s": spent, "wall_s": wall, "rechecked": outcome.rechecked, "front": front,
                "records": {t.number: (t.user_attrs[RECORD_ATTR], t.values) for t in trials}}


def compare(name: str, trials: int | None) -> None:
    base = yaml.safe_load(default_workload_text()) if JOBS[name] is None else copy.deepcopy(JOBS[name])
    if trials:
        base["budget"] = {"trials": trials}
    runs = {}
    search = base.get("fidelity", {}).get("search_requests", 1500)
    for label, fidelity in (("rungs", {}), ("one rung", {"first_requests": search})):
        data = {**base, "fidelity": {**base.get("fidelity", {}), **fidelity}}
        runs[label] = run(data, name)
    both = np.vstack([r["front"] for r in runs.values()])
    reference = 1.1 * both.max(axis=0) if len(both) else None
    print(f"\n{name}:")
    for label, r in runs.items():
        lengths: dict[int, int] = {}
        for record, _ in r["records"].values():
            if record["fidelity"] == "simulate":
                lengths[record["simulated_requests"]] = lengths.get(record["simulated_requests"], 0) + 1
        hv = hypervolume_2d(r["front"], reference) if reference is not None else float("nan")
        print(f"  {label:9}: {r['cpu_s']:6.1f} CPU s, {r['wall_s']:6.1f} s wall; trials simulated by length "
              f"{dict(sorted(lengths.items()))}; {r['rechecked']} re-checks; front of {len(r['front'])}, "
              f"hypervolume {hv:.4g}")
    if reference is not None:
        hv = {label: hypervolume_2d(r["front"], reference) for label, r in runs.items()}
        print(f"  rungs' front hypervolume: {hv['rungs'] / hv['one rung']:.1%} of one rung's")
    # Verdicts: every trial the short run settled, simulated at the full length with the same seed.
    r = runs["rungs"]
    job = r["job"]
    w = job.workload
    full = w.fidelity.search_requests
    searched = np.array([v for rec, v in r["records"].values() if rec["feasible"] and v is not None
                         and rec["fidelity"] == "simulate" and rec["simulated_requests"] == full]).reshape(-1, 2)
    settled = [(n, rec) for n, (rec, _) in r["records"].items()
               if rec["fidelity"] == "simulate" and rec["simulated_requests"] < full]
    wrong_infeasible = wrong_dominated = 0
    for _, record in settled:
        compiled = job.problem.ctx.compile(record["model"], Deployment.model_validate(record["deployment"]["spec"]))
        scored = job.evaluator.predict(record["model"], compiled, full, w.seed)
        if not record["feasible"] and scored.feasible:
            wrong_infeasible += 1
        elif record["feasible"] and scored.feasible and scored.values is not None:
            points = np.vstack([searched, scored.values])
            wrong_dominated += bool(pareto_mask(points)[-1])
    print(f"  {len(settled)} trials settled by the short run; at the full length {wrong_infeasible} of them are "
          f"feasible after all and {wrong_dominated} would be on the search's front")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", nargs="*", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--trials", type=int, default=None)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models from servopt's catalog, as the other benches
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for name in args.jobs:
        compare(name, args.trials)


if __name__ == "__main__":
    main()
