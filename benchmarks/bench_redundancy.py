"""What one replica down costs: the built-in job without redundancy, with ``redundancy: 0.3``, and with the SLO held at N-1.

For each variant it runs the built-in job (optimizer/data/default_workload.yaml, 150 trials, seed 0)
and prints the CPU time, the front, and for its cheapest point the fleet, the cost and the re-checked
P99 TTFT and end-to-end at N and at N-1 (the same traffic on one replica fewer). The first variant
predicts no N-1; the second reports it; the third constrains on it (``slo.n_minus_1``).

    python benchmarks/bench_redundancy.py
"""

from __future__ import annotations

import tempfile
import time
from importlib import resources
from pathlib import Path

import optuna
import yaml

from servopt.optimizer.job import Job
from servopt.optimizer.workload import parse_workload


def _p99(summary: dict | None, metric: str) -> str:
    if not summary:
        return "-"
    if summary.get("saturated"):
        return "saturated"
    return f"{summary[f'{metric}_s']['p99']:.3g} s"


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base = yaml.safe_load(resources.files("servopt.optimizer").joinpath("data/default_workload.yaml").read_text())
    variants = {
        "no redundancy": base,
        "redundancy 0.3": {**base, "redundancy": 0.3},
        "redundancy 0.3, slo.n_minus_1": {**base, "redundancy": 0.3, "slo": {**base["slo"], "n_minus_1": True}},
    }
    for name, data in variants.items():
        with tempfile.TemporaryDirectory() as tmp:
            job = Job(parse_workload(data, name), Path(tmp) / "out", name="redundancy")
            start = time.process_time()
            outcome = job.run(progress=False)
            cpu = time.process_time() - start
            collected = job.collect()
        records = {t.number: t.record for t in collected["trials"]}
        front = sorted(outcome.front, key=lambda n: collected["rechecks"][n].cost_usd_per_hour)
        print(f"{name}: {cpu:.1f} s CPU, {len(collected['trials'])} trials, front of {len(front)}")
        if not front:
            continue
        number = front[0]
        check, record = collected["rechecks"][number], records[number]
        d = record.deployment.spec
        print(f"  cheapest: trial {number}, {record.replicas} x {d.gpu} TP{d.tp} ({record.num_gpus} GPUs), "
              f"${check.cost_usd_per_hour:.2f}/hour; P99 TTFT {_p99(check.simulation, 'ttft')}, e2e "
              f"{_p99(check.simulation, 'e2e')}; one replica down: TTFT {_p99(check.n_minus_1, 'ttft')}, e2e "
              f"{_p99(check.n_minus_1, 'e2e')}")


if __name__ == "__main__":
    main()
