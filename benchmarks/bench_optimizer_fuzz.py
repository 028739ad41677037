"""Malformed workload files: each must exit with code 2 and a one-line message naming the key.

    python benchmarks/bench_optimizer_fuzz.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import yaml
from bench_optimizer_setup import ROOT, run

sys.path.insert(0, str(ROOT / "tests"))
from test_workload import FUZZ, with_changes  # noqa: E402  (the same cases the tests check)

IMPOSSIBLE = ("impossible SLO", with_changes(slo={"p99_ttft_s": 1e-6}), "slo.p99_ttft_s")


def main() -> None:
    passed = 0
    cases = [*FUZZ, IMPOSSIBLE]
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, content, key) in enumerate(cases):
            path = Path(tmp) / f"w{i}.yaml"
            path.write_text(content if isinstance(content, str) else yaml.safe_dump(content))
            proc = run(["optimize", str(path), "--out", f"{tmp}/out{i}", "--no-progress"])
            text = (proc.stderr.strip().splitlines() or [""])[-1] if proc.returncode == 2 and proc.stderr.strip() \
                else proc.stdout
            ok = proc.returncode == 2 and key in (proc.stderr + proc.stdout) and "Traceback" not in proc.stderr
            passed += ok
            message = text.strip().splitlines()[0] if text.strip() else ""
            print(f"{'ok  ' if ok else 'FAIL'} {name:32s} exit {proc.returncode}  {message[:150]}")
    print(f"{passed}/{len(cases)} malformed workloads gave exit code 2 and a message naming the key")


if __name__ == "__main__":
    main()
