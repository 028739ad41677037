"""optimize's CPU time as the traffic grows: the default job at 10 and at 1,000 requests/s, same trials.

The fleet limit is raised (limits.max_gpus 4096) so that 1,000 req/s can be served; everything else is
the built-in job. A fleet is simulated through a few replicas fed their share of the arrivals, so
the cost should not grow with the fleet (goal: <= 1.5x from 10 to 1,000 req/s).

    python benchmarks/bench_optimizer_traffic.py [--trials 150]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import tempfile
from pathlib import Path

import yaml
from bench_optimizer_setup import cli

from servopt.costmodels.deployment import MAX_ENGINES
from servopt.optimizer.defaults import default_workload_text
from servopt.results import FrontPoint


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=150)
    args = parser.parse_args()
    seconds, exits = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for rate in (10, 1000):
            data = yaml.safe_load(default_workload_text())
            data["traffic"]["arrival"]["rate_per_s"] = rate
            # The most GPUs a workload may name: room for the replicas 1,000 req/s needs.
            data.update(budget={"trials": args.trials}, limits={"max_gpus": MAX_ENGINES})
            path = Path(tmp) / f"rate{rate}.yaml"
            path.write_text(yaml.safe_dump(data))
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run(cli(["optimize", str(path), "--out", f"{tmp}/out{rate}", "--no-progress", "--json"]),
                                  capture_output=True, text=True)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            seconds[rate] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            exits[rate] = done.returncode
            if done.returncode:
                print(f"{rate:5d} req/s: optimize failed: {done.stderr.strip()}")
            result = json.loads(done.stdout) if done.stdout.strip() else {}
            front = json.loads((Path(tmp) / f"out{rate}" / "front.json").read_text())["points"] if result else []
            replicas = sorted({FrontPoint.model_validate(p).deployment.spec.replicas for p in front})
            print(f"{rate:5d} req/s: {seconds[rate]:.1f} CPU s, exit {done.returncode}, {result.get('trials')} trials, "
                  f"{result.get('simulated')} simulated, front of {len(front)} (replicas {replicas})")
    ratio = seconds[1000] / seconds[10]
    verdict = "FAIL (a job did not finish)" if any(exits.values()) else "PASS" if ratio <= 1.5 else "FAIL"
    print(f"CPU time 1,000 / 10 req/s: {ratio:.2f}x; goal <= 1.5x: {verdict}")


if __name__ == "__main__":
    main()
