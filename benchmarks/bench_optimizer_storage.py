"""CPU time of the default job on each storage (same seed and trials, so the same trials run), and
the share of it spent in the storage layer (Optuna's storages, SQLAlchemy, sqlite3), by cProfile.

    python benchmarks/bench_optimizer_storage.py [--trials 150]
"""

from __future__ import annotations

import argparse
import pstats
import resource
import subprocess
import tempfile

from bench_optimizer_setup import cli, default_job_file

from servopt.optimizer._storage import journal_url

STORAGE_MODULES = ("optuna/storages", "sqlalchemy", "sqlite3", "psycopg")


def cpu_s(argv: list[str]) -> float:
    """User + system CPU seconds of a child process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def storage_share(profile: str) -> tuple[float, float]:
    """(seconds in the storage layer, total seconds) of a cProfile dump, by self time."""
    stats = pstats.Stats(profile).stats
    total = sum(row[2] for row in stats.values())
    storage = sum(row[2] for (path, _, _), row in stats.items() if any(m in path for m in STORAGE_MODULES))
    return storage, total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=150)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        job = default_job_file(tmp, args.trials)
        for kind in ("journal", "sqlite"):
            url = journal_url(f"{tmp}/{kind}.journal") if kind == "journal" else f"sqlite:///{tmp}/{kind}.db"
            base = ["optimize", str(job), "--storage", url, "--no-progress", "--json"]
            seconds = cpu_s(cli([*base, "--study", "plain", "--out", f"{tmp}/{kind}-plain"]))
            profiled = cli([*base, "--study", "profiled", "--out", f"{tmp}/{kind}-profiled"])
            profiled[1:1] = ["-m", "cProfile", "-o", f"{tmp}/{kind}.prof"]
            subprocess.run(profiled, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            storage, total = storage_share(f"{tmp}/{kind}.prof")
            print(f"{kind:8s} {args.trials} trials: {seconds:.1f} CPU s; storage layer {storage / total:.0%} of "
                  f"profiled self time ({storage:.1f} of {total:.1f} s under cProfile)")


if __name__ == "__main__":
    main()
