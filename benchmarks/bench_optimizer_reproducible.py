"""Same seed, same trials, on an idle and on a loaded machine: pareto.csv must be identical.

Runs the built-in job (150 trials, seed 0) once with nothing else running here, then again while
CPU burners (one busy process per core) load the machine, and compares the two pareto.csv files
byte for byte. A budget in trials (the default) is what makes this hold; a time ceiling would not.

    python benchmarks/bench_optimizer_reproducible.py
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import time
from pathlib import Path

from bench_optimizer_setup import run


def burn(stop_at: float) -> None:
    while time.time() < stop_at:
        sum(i * i for i in range(10_000))


def optimize(out: str) -> tuple[float, str]:
    start = time.perf_counter()
    done = run(["optimize", "--out", out, "--no-progress", "--json"])
    if done.returncode not in (0, 2):
        raise SystemExit(done.stderr)
    return time.perf_counter() - start, (Path(out) / "pareto.csv").read_text()


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        idle_s, idle = optimize(f"{tmp}/idle")
        burners = [multiprocessing.Process(target=burn, args=(time.time() + 3600,)) for _ in range(os.cpu_count() or 2)]
        for process in burners:
            process.start()
        try:
            loaded_s, loaded = optimize(f"{tmp}/loaded")
        finally:
            for process in burners:
                process.terminate()
                process.join()
    same = idle == loaded
    print(f"idle: {idle_s:.1f} s wall; loaded by {len(burners)} CPU burners: {loaded_s:.1f} s wall; pareto.csv "
          f"{len(idle.splitlines()) - 1} rows: {'identical' if same else 'DIFFERENT'}: {'PASS' if same else 'FAIL'}")


if __name__ == "__main__":
    main()
