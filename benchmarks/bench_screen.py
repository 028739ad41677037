"""The default budget's front against a 1,200-trial run's, per job, with what the screen covered.

For the 70B job of ``bench_vs_aiconfigurator.py`` (Llama-3.1-70B, at most 8 x H200, ISL 4000 / OSL
500, Poisson 4 req/s), the same job with ``space: {mode: aggregated}``, and each ``examples/*.yaml``,
runs ``servopt optimize`` with ``sampler: screen`` twice, at the file's budget and with ``budget:
{trials: 1200}``, and prints per job: each run's CPU seconds (user + system of the child), the cheapest point of each
final front, each front's hypervolume as a share of the union of the fronts (re-checked cost and
P99 latency objective; reference 1.1 x the union's nadir), and the report's "Screen:" line of the
default run (what was screened and simulated, or why it fell back). With ``--nsga2`` the job also
runs with ``sampler: nsga2`` at its budget, in the union too.

    python benchmarks/bench_screen.py [--jobs 70b chat ...] [--trials 1200] [--nsga2]

Each job costs minutes of CPU (a 1,200-trial run most of it); name a subset with ``--jobs``.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from bench_optimizer_hypervolume import hypervolume_2d
from bench_optimizer_setup import ROOT, cli
from bench_vs_aiconfigurator import WORKLOAD, cpu_s

from servopt.optimizer.study import pareto_mask

# The 70B job's grid (both serving modes) is too large to screen; with the serving mode pinned to
# aggregated it is screened whole.
JOBS = {"70b": {**WORKLOAD, "budget": {"trials": 150}},
        "70b-aggregated": {**WORKLOAD, "budget": {"trials": 150}, "space": {"mode": "aggregated"}},
        **{path.stem: yaml.safe_load(path.read_text()) for path in sorted((ROOT / "examples").glob("*.yaml"))}}


def objective_columns(data: dict) -> tuple[str, str]:
    objective = {"cost": "usd_per_hour", "latency": "e2e", **(data.get("objective") or {})}
    return f"cost_{objective['cost']}", f"p99_{objective['latency']}_s"


def run(tmp: Path, name: str, data: dict) -> tuple[float, np.ndarray, pd.DataFrame, str]:
    """One optimize run: its CPU seconds, front points (cost, latency), pareto.csv and the report's screen line."""
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    out = tmp / f"out-{name}"
    seconds, code, _ = cpu_s(cli(["optimize", str(path), "--out", str(out), "--no-progress", "--json"]), str(tmp))
    front = pd.read_csv(out / "pareto.csv") if code in (0, 2) and (out / "pareto.csv").exists() else pd.DataFrame()
    points = front[list(objective_columns(data))].to_numpy(dtype=float) if len(front) else np.zeros((0, 2))
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    screen = next((line[len("- Screen: "):] for line in report.splitlines() if line.startswith("- Screen: ")),
                  f"(no screen line; exit {code})")
    return seconds, points, front, screen


def cheapest(front: pd.DataFrame, data: dict) -> str:
    if not len(front):
        return "no front"
    cost, latency = objective_columns(data)
    row = front.sort_values([cost, latency]).iloc[0]
    shape = row["pd_split"] if pd.isna(row["tp"]) else f"TP{int(row['tp'])}"
    return (f"{row['num_gpus']} x {row['gpu']} ({row['replicas']} x {shape}, {row['quantization']}, KV "
            f"{row['kv_cache_dtype']}) at {row[cost]:.4g} {cost}, P99 {row[latency]:.3g} s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", nargs="*", default=list(JOBS), choices=list(JOBS))
    parser.add_argument("--trials", type=int, default=1200)
    parser.add_argument("--nsga2", action="store_true",
                        help="also run the job with sampler: nsga2 at its budget, in the union too")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.jobs:
            data = {**JOBS[name], "sampler": "screen"}
            runs = {"default budget": run(Path(tmp), name, data),
                    f"{args.trials} trials": run(Path(tmp), f"{name}-{args.trials}", {**data, "budget": {"trials": args.trials}})}
            if args.nsga2:
                runs["NSGA-II, default budget"] = run(Path(tmp), f"{name}-nsga2", {**data, "sampler": "nsga2"})
            every = np.vstack([points for _, points, _, _ in runs.values()])
            reference = 1.1 * every.max(axis=0) if len(every) else None
            union = hypervolume_2d(every[pareto_mask(every)], reference) if len(every) else 0.0
            print(f"{name}: hypervolume as a share of the union of the fronts below, and CPU s")
            for label, (seconds, points, front, _) in runs.items():
                share = hypervolume_2d(points, reference) / union if union else np.nan
                print(f"  {label}: {share:.1%}, {seconds:.1f} CPU s; cheapest {cheapest(front, data)}")
            print(f"  screen: {runs['default budget'][3]}")


if __name__ == "__main__":
    main()
