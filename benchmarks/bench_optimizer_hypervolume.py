"""Study vs exhaustive search on a space small enough to enumerate.

Every point of a reduced space is scored at full fidelity (simulated), which gives the true front.
The study then runs with a budget of 10% of the points; the front it finds is scored with the same
full-fidelity values, and its hypervolume (in objectives normalized by the exhaustive front's
ranges, reference point 1.1 x the worst feasible values) is compared.

    python benchmarks/bench_optimizer_hypervolume.py [--seeds 3]
"""

from __future__ import annotations

import argparse
import copy
import tempfile

import numpy as np
import optuna
import yaml

from servopt.optimizer._evaluate import Evaluator
from servopt.optimizer._problem import build_problem
from servopt.optimizer.defaults import default_workload_text
from servopt.optimizer.job import Job
from servopt.optimizer.study import RECORD_ATTR, evaluated_trials, pareto_mask
from servopt.optimizer.workload import parse_workload

SPACE = {
    "gpu": ["h100", "a100-80gb", "l40s"], "mode": "aggregated", "tp": [1, 2, 4], "quantization": ["bf16", "fp8"],
    "kv_cache_dtype": ["auto", "fp8"], "max_num_seqs": [32, 64, 128, 256], "max_num_batched_tokens": [2048, 8192],
    "enable_chunked_prefill": True, "speculation": "off", "headroom": [0.0, 0.5, 1.0, 2.0],
}


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


def full_fidelity(evaluator: Evaluator, space, candidate) -> tuple[bool, tuple[float, float]]:
    """Feasibility and objectives with the simulation always run (no screening)."""
    outcome = evaluator.evaluate(candidate, screen=None)
    record = outcome.record
    if record["fidelity"] == "estimate" and record["feasible"]:
        raise AssertionError("unscreened evaluation stopped at the estimate")
    return record["feasible"], outcome.values


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--share", type=float, default=0.10, help="study budget as a share of the points")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    data = yaml.safe_load(default_workload_text())
    data["space"] = SPACE
    # Exhaustive scoring simulates every SLO-passing point: no screening margin stops it early.
    data["fidelity"] = {"search_requests": 1500, "final_requests": 1500, "screen_margin": 1e9}
    workload = parse_workload(data, "hypervolume benchmark")
    problem = build_problem(workload)
    evaluator = Evaluator(problem)
    points = list(problem.space.enumerate())
    truth = {}
    for candidate in points:
        truth[candidate.key] = full_fidelity(evaluator, problem.space, candidate)
    feasible = np.array([v for ok, v in truth.values() if ok])
    front = feasible[pareto_mask(feasible)]
    low, high = front.min(axis=0), feasible.max(axis=0)
    scale = np.where(high > low, high - low, 1.0)

    def normalized(values: np.ndarray) -> np.ndarray:
        return (values - low) / scale

    reference = normalized(high) * 1.1 + 0.01
    best = hypervolume_2d(normalized(front), reference)
    budget = int(args.share * len(points))
    print(f"reduced space: {len(points)} points, {len(feasible)} feasible, exhaustive front of {len(front)}; "
          f"study budget {budget} trials ({args.share:.0%})")
    ratios = []
    for seed in range(args.seeds):
        study_data = copy.deepcopy(data)
        study_data.update(seed=seed, budget={"trials": budget},
                          fidelity={"search_requests": 1500, "final_requests": 1500})
        with tempfile.TemporaryDirectory() as tmp:
            job = Job(parse_workload(study_data, "hv"), tmp, name="hv")
            outcome = job.run(progress=False)
            study = job.open_study(create=False)
            found = []
            unique = set()
            simulated = 0
            for trial in evaluated_trials(study):
                record = trial.user_attrs[RECORD_ATTR]
                key = problem.space.fixed(record["knobs"]).key
                unique.add(key)
                simulated += record["fidelity"] == "simulate"
                ok, values = truth[key]
                if ok:
                    found.append(values)
        found = np.array(found) if found else np.zeros((0, 2))
        hv = hypervolume_2d(normalized(found), reference) if len(found) else 0.0
        ratios.append(hv / best)
        print(f"seed {seed}: {outcome.trials} trials = {outcome.trials / len(points):.1%} of the points "
              f"({len(unique)} distinct, {simulated} simulated = {simulated / len(points):.1%}); hypervolume "
              f"{hv / best:.2%} of exhaustive")
    print(f"hypervolume ratio: min {min(ratios):.2%}, mean {np.mean(ratios):.2%} over {args.seeds} seeds; "
          f"goal >= 98% with <= 10% of evaluations: {'PASS' if min(ratios) >= 0.98 else 'FAIL'}")


if __name__ == "__main__":
    main()
