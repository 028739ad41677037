"""The built-in default job's wall time on this machine (goal 30 s, limit 60 s) and its trial count.

    python benchmarks/bench_optimizer_default.py [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

from bench_optimizer_setup import run


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = run(["optimize", "--out", f"{tmp}/default", "--no-progress", "--json", "--jobs", str(args.jobs)])
        wall = time.perf_counter() - start
    if proc.returncode not in (0, 2):
        raise SystemExit(proc.stderr)
    result = json.loads(proc.stdout)
    print(f"default job, --jobs {args.jobs}: {wall:.1f} s wall (process start to exit; {result['elapsed_s']:.1f} s in "
          f"the job), {result['trials']} trials, {result['simulated']} simulated, {result['rechecked']} re-checked, "
          f"front of {len(result['front'])}; limit 60 s: {'PASS' if wall <= 60 else 'FAIL'}, goal 30 s: "
          f"{'met' if wall <= 30 else 'missed'}")


if __name__ == "__main__":
    main()
