"""Study vs exhaustive search on spaces small enough to enumerate, easy and hard.

Every point of each space is scored at full fidelity (simulated at the search's length, no
screening), which gives the true front. A point whose simulated P99 interval straddles an SLO
target has its verdict settled by servopt's re-check (``final_requests``, 6,000 by default, the seed
after the search's), as a job settles its front's: one short run's noise would otherwise decide it
(on ``8b-both-modes`` a one-L40S-prefill P/D point ran a P99 TTFT of 0.905 s, interval 0.80-1.01 s,
under the 1 s SLO, with the workload's seed, and 1.3-2.3 s with other seeds or 6,000-20,000
requests). The study then runs with a budget of 10% of the points (3 seeds); the feasible points it
finds are scored with the same values, and the hypervolume they dominate is compared with the
exhaustive front's, with the reference point at 1.1 x the exhaustive front's nadir (its worst cost
and worst P99 latency). The study ranks several proposals per trial by the analytic
estimate (``optimizer/_sampler.py``); how many deployments it estimated to do so is printed too.

Spaces:
- ``default-8b``: the default job (Llama-3.1-8B chat at 20 req/s) over H100/A100/L40S, TP 1-4,
  bf16/fp8, KV dtype, 4 batch sizes, 2 token budgets, 4 headroom values.
- ``8b-both-modes``: the default job on H100 and L40S, aggregated (TP 1-4) or prefill/decode
  disaggregated (1-2 instances of each role, TP 1-2 each), bf16/fp8, 4 batch sizes, 3 headroom
  values: each mode has knobs the other lacks.
- ``70b-h100-h200``: Llama-3.1-70B, ISL 4000 / OSL 500 at 5 req/s, TTFT 1 s, TPOT 50 ms on H100 and
  H200, TP 1-8, bf16/fp8, KV dtype, 3 batch sizes, 3 headroom values (TP 1 and 2 mostly do not fit).
- ``70b-h100-bf16``: the same model pinned to bf16 on H100, TP 1-8, with chunked prefill on or off and
  token budgets below max_model_len (many drawn points break vLLM's rules before repair).

    python benchmarks/bench_optimizer_hypervolume.py [--seeds 3] [--share 0.1] [--spaces NAME ...]
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time

import numpy as np
import optuna
import yaml

from servopt.optimizer._evaluate import SLO_CONSTRAINTS, Evaluator
from servopt.optimizer._problem import build_problem
from servopt.optimizer.defaults import default_workload_text
from servopt.optimizer.job import Job
from servopt.optimizer.study import RECORD_ATTR, evaluated_trials, pareto_mask, recheck, within_interval
from servopt.optimizer.workload import parse_workload

LLAMA_70B_JOB = {
    "model": "meta-llama/Llama-3.1-70B-Instruct",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                "input_tokens": {"kind": "fixed", "value": 4000}, "output_tokens": {"kind": "fixed", "value": 500}},
    "slo": {"p99_ttft_s": 1.0, "p99_tpot_s": 0.05},
    "objective": {"latency": "e2e", "cost": "usd_per_hour"},
    "limits": {"max_gpus": 64},
    "sampler": "nsga2",
}
SPACES = {
    "default-8b": (None, {
        "gpu": ["h100", "a100-80gb", "l40s"], "mode": "aggregated", "tp": [1, 2, 4], "quantization": ["bf16", "fp8"],
        "kv_cache_dtype": ["auto", "fp8"], "max_num_seqs": [32, 64, 128, 256], "max_num_batched_tokens": [2048, 8192],
        "enable_chunked_prefill": True, "speculation": "off", "headroom": [0.0, 0.5, 1.0, 2.0]}),
    "8b-both-modes": (None, {
        "gpu": ["h100", "l40s"], "mode": ["aggregated", "disaggregated"], "tp": [1, 2, 4],
        "prefill_instances": [1, 2], "decode_instances": [1, 2], "prefill_tp": [1, 2], "decode_tp": [1, 2],
        "quantization": ["bf16", "fp8"], "kv_cache_dtype": "auto", "max_num_seqs": [32, 64, 128, 256],
        "max_num_batched_tokens": 8192, "enable_chunked_prefill": True, "speculation": "off",
        "headroom": [0.0, 0.5, 1.0]}),
    "70b-h100-h200": ({**LLAMA_70B_JOB, "gpus": ["h100", "h200"]}, {
        "mode": "aggregated", "tp": [1, 2, 4, 8], "quantization": ["bf16", "fp8"], "kv_cache_dtype": ["auto", "fp8"],
        "max_num_seqs": [32, 128, 256], "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
        "speculation": "off", "headroom": [0.0, 0.5, 1.0]}),
    "70b-h100-bf16": ({**LLAMA_70B_JOB, "gpus": ["h100"]}, {
        "mode": "aggregated", "tp": [1, 2, 4, 8], "quantization": "bf16", "kv_cache_dtype": ["auto", "fp8"],
        "max_num_seqs": [16, 64, 256], "max_num_batched_tokens": [2048, 4096, 8192],
        "enable_chunked_prefill": [True, False], "speculation": "off", "headroom": [0.0, 0.5, 1.0]}),
}
# The study's fidelity (a short simulation first, the search's 1,500 requests for what it does not
# settle); the exhaustive truth simulates every point at the full 1,500 (no short run), and settles
# the verdicts that straddle an SLO at the workload's default final_requests, as a job's re-check does.
FIDELITY = {"search_requests": 1500, "final_requests": 1500}
TRUTH_FIDELITY = {"search_requests": 1500, "first_requests": 1500}


def hypervolume_2d(points: np.ndarray, reference: np.ndarray) -> float:
    """Area dominated by minimized 2-D points up to ``reference``."""
    points = points[np.all(points < reference, axis=1)]
    if not len(points):
        return 0.0
    points = points[pareto_mask(points)]
    points = points[np.argsort(points[:, 0])]
    area, previous_y = 0.0, reference[1]
    for x, y in points:
        area += (reference[0] - x) * (previous_y - y)
        previous_y = y
    return area


def settled(problem, evaluator: Evaluator, scored: dict) -> tuple[dict, int, int]:
    """Each point's (feasible, values) from ``scored`` (point key -> (record, values) at search
    fidelity), with the verdict of every simulated point whose P99 interval straddles an SLO target
    (feasible below it, or missing only such SLOs: :func:`~servopt.optimizer.study.within_interval`)
    given by servopt's re-check (:func:`~servopt.optimizer.study.recheck`: ``final_requests``, the
    next seed). The values stay the search's, so every point is compared at one fidelity. Also
    returns how many points were re-checked and how many of them changed verdict."""
    slo = problem.workload.slo

    def straddles(record: dict) -> bool:
        if record["feasible"]:
            return any(getattr(slo, attr) is not None and record["simulation"]["p99_ci_s"].get(metric, [0, 0])[1]
                       >= getattr(slo, attr) for attr, metric in SLO_CONSTRAINTS.values())
        return within_interval(record, slo)

    truth, rechecked, changed = {}, 0, 0
    for key, (record, values) in scored.items():
        feasible = record["feasible"]
        if record["fidelity"] == "simulate" and values is not None and straddles(record):
            feasible = recheck(problem, record, evaluator)["feasible"]
            rechecked += 1
            changed += feasible != record["feasible"]
        truth[key] = (feasible, values)
    return truth, rechecked, changed


def workload_data(name: str) -> dict:
    base, space = SPACES[name]
    data = yaml.safe_load(default_workload_text()) if base is None else copy.deepcopy(base)
    data["space"] = space
    # Exhaustive scoring simulates every point but those estimated over 100x beyond an SLO or a
    # simulated point (the largest margin a workload accepts): in effect, no screening.
    data["fidelity"] = {**TRUTH_FIDELITY, "screen_margin": 100}
    return data


def run_space(name: str, seeds: int, share: float) -> list[float]:
    data = workload_data(name)
    problem = build_problem(parse_workload(data, name))
    evaluator = Evaluator(problem)
    points = list(problem.space.enumerate())
    start = time.process_time()
    scored = {}
    for candidate in points:
        outcome = evaluator.evaluate(candidate, screen=None)
        scored[candidate.key] = (outcome.record.model_dump(), outcome.values)
    truth, rechecked, changed = settled(problem, evaluator, scored)
    exhaustive_s = time.process_time() - start
    feasible = np.array([v for ok, v in truth.values() if ok])
    if not len(feasible):
        print(f"{name}: no feasible point in {len(points)}; nothing to compare")
        return []
    front = feasible[pareto_mask(feasible)]
    reference = 1.1 * front.max(axis=0)
    best = hypervolume_2d(front, reference)
    budget = max(int(share * len(points)), 1)
    print(f"{name}: {len(points)} points, {len(feasible)} feasible, exhaustive front of {len(front)} "
          f"({exhaustive_s:.0f} CPU s to score them all; {rechecked} whose P99 interval straddles an SLO re-checked "
          f"with {problem.workload.fidelity.final_requests} requests, {changed} changed verdict); study budget "
          f"{budget} trials ({share:.0%})")
    ratios = []
    for seed in range(seeds):
        study_data = copy.deepcopy(data)
        study_data.update(seed=seed, budget={"trials": budget}, fidelity=FIDELITY)
        with tempfile.TemporaryDirectory() as tmp:
            job = Job(parse_workload(study_data, name), tmp, name="hv")
            outcome = job.run(progress=False)
            records = [t.user_attrs[RECORD_ATTR] for t in evaluated_trials(job.open_study(create=False))]
            estimated = job.evaluator.summaries("estimate")
        keys = [problem.space.fixed(r["knobs"]).key for r in records]
        deployments = {(r["model"], str(r["deployment"])) for r in records}
        found = np.array([truth[k][1] for k in keys if truth[k][0]]).reshape(-1, 2)
        rejected = sum(r["fidelity"] == "precheck" for r in records)
        simulated = sum(r["fidelity"] == "simulate" for r in records)
        hv = hypervolume_2d(found, reference)
        ratios.append(hv / best)
        print(f"  seed {seed}: {outcome.trials} trials ({len(deployments)} distinct deployments, {simulated} simulated, "
              f"{rejected} rejected by rules = {rejected / max(outcome.trials, 1):.0%}; {estimated} deployments "
              f"estimated to choose them); hypervolume {hv / best:.2%} of exhaustive")
    print(f"  {name}: min {min(ratios):.2%}, mean {np.mean(ratios):.2%} over {seeds} seeds at {share:.0%} of the "
          f"evaluations: {'PASS' if min(ratios) >= 0.98 else 'FAIL'} (goal >= 98%)")
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.10, help="study budget as a share of the points")
    parser.add_argument("--spaces", nargs="*", default=list(SPACES), choices=list(SPACES))
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results = {name: run_space(name, args.seeds, args.share) for name in args.spaces}
    worst = min((min(r) for r in results.values() if r), default=float("nan"))
    print(f"every space, every seed: worst {worst:.2%} of the exhaustive hypervolume at {args.share:.0%} of the "
          f"evaluations: {'PASS' if worst >= 0.98 else 'FAIL'}")


if __name__ == "__main__":
    main()
