"""Every front point of the built-in job and of every example, exported and parsed by vLLM.

Runs ``servopt optimize`` (a reduced trial budget, same search) for the default job and each file in
examples/, then ``servopt export --check`` for every point of each front, with no environment
variable set, and prints one line per point: the scheme, the checkpoint it serves, and whether vLLM's
own ``vllm serve`` parser accepts all of its commands. Needs vLLM in a separate environment
(``.vllm-venv``, see README).

    python benchmarks/bench_export_check.py [--trials 60] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from servopt.optimizer.cli import main as servopt
from servopt.results import FrontPoint

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = servopt(args)
    return code, out.getvalue() + err.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="servopt-export-check-"))
    env_before = {k for k in os.environ if k.startswith("SERVOPT_")}
    jobs = [("default", None)] + [(p.stem, p) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    failures = checked = 0
    for name, path in jobs:
        start = time.perf_counter()
        folder = out / name
        code, text = run(["optimize", *([str(path)] if path else []), "--out", str(folder), "--trials",
                          str(args.trials), "--no-progress"])
        if code != 0:
            print(f"{name}: optimize exited {code}: {text.strip().splitlines()[-1]}")
            failures += 1
            continue
        points = json.loads((folder / "front.json").read_text())["points"]
        for point in points:
            code, text = run(["export", str(folder), "--pick", str(point["trial"]), "--check",
                              "--out", str(folder / f"export-{point['trial']}")])
            verdict = [line for line in text.splitlines() if "--check" in line or "error" in line]
            record = FrontPoint.model_validate(point).deployment
            checked += 1
            failures += code != 0
            print(f"{name:<22} trial {point['trial']:>4} {record.quantization:<6} "
                  f"{record.weights.serve_id if record.weights else point['serve_id']:<58} "
                  f"{'ok' if code == 0 else 'REJECTED'}: {verdict[-1] if verdict else text.strip()[-200:]}")
        print(f"{name}: {len(points)} front points in {time.perf_counter() - start:.0f} s")
    leaked = {k for k in os.environ if k.startswith("SERVOPT_")} - env_before
    print(f"{checked} exports checked, {failures} failed; environment variables set: {sorted(leaked) or 'none'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
