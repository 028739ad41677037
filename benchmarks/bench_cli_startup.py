"""CLI start-up: CPU time (user + system) of ``servopt`` commands that do little beyond starting.

Each command runs in a fresh interpreter, five times; the least CPU time is printed (the others
include other processes' interference on a shared machine), next to the interpreter alone and the
interpreter importing numpy and pydantic (what every servopt command needs), so that figures from a
loaded machine can be read against its own floor. Target (issue 19): ``servopt predict --help`` and
``servopt plan ...`` under 0.5 s of CPU.

    python benchmarks/bench_cli_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import numpy, pydantic'": [sys.executable, "-c", "import numpy, pydantic"],
    "servopt --help": [sys.executable, "-m", "servopt.optimizer", "--help"],
    "servopt predict --help": [sys.executable, "-m", "servopt.optimizer", "predict", "--help"],
    "servopt plan --model llama-3.1-8b --gpu h100": [sys.executable, "-m", "servopt.optimizer", "plan", "--model",
                                                     "llama-3.1-8b", "--gpu", "h100"],
}
TARGETS_S = {"servopt predict --help": 0.5, "servopt plan --model llama-3.1-8b --gpu h100": 0.5}


def cpu_s(argv: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {done.stderr.strip()[-300:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'command':48} {'CPU s (least of ' + str(args.repeats) + ')':>22}  target")
    ok = True
    for name, argv in COMMANDS.items():
        best = min(cpu_s(argv) for _ in range(args.repeats))
        target = TARGETS_S.get(name)
        verdict = "" if target is None else f"<= {target} s: {'PASS' if best <= target else 'FAIL'}"
        ok &= target is None or best <= target
        print(f"{name:48} {best:22.3f}  {verdict}")
    print("all targets met" if ok else "a target was missed")


if __name__ == "__main__":
    main()
