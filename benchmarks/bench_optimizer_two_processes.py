"""Two `servopt optimize` processes on one storage finish one study: exactly the trial budget, no
lost or duplicated trial numbers, and each process reports the trials it ran. Run on a journal
file (the default storage, shared by processes on one machine) and on SQLite.

    python benchmarks/bench_optimizer_two_processes.py
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections import Counter

import optuna
from bench_optimizer_setup import cli, default_job_file

from servopt.optimizer._storage import journal_url, open_storage


def one(url: str, tmp: str, path) -> None:
    procs = [subprocess.Popen(cli(["optimize", str(path), "--study", "shared", "--storage", url, "--out",
                                   f"{tmp}/out{i}", "--no-progress", "--json"]),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
    outputs = [p.communicate() for p in procs]
    trials = optuna.load_study(study_name="shared", storage=open_storage(url)).trials
    numbers = sorted(t.number for t in trials)
    states = Counter(t.state.name for t in trials)
    per_worker = Counter(t.user_attrs.get("worker") for t in trials)
    codes = [p.returncode for p in procs]
    reports = [json.loads(out) for out, _ in outputs if out.strip()]
    finished = states["COMPLETE"] + states["PRUNED"]
    ran = [r["new_trials"] for r in reports]
    # A trial that lost the race for the last slot is FAIL, never run: at most one per extra worker.
    ok = numbers == list(range(len(numbers))) and finished == 100 and sum(ran) == 100 and states["FAIL"] <= 1
    print(f"{url.split(':')[0]}: two processes, budget 100: exit codes {codes}; {len(numbers)} trials, numbers "
          f"0..{numbers[-1]} with no gap or repeat: {numbers == list(range(len(numbers)))}; states {dict(states)} "
          f"({finished} finished); trials each process reports it ran {ran} (sum {sum(ran)}), by worker attribute "
          f"{sorted(per_worker.values())}; each saw {[r['trials'] for r in reports]} at its end: "
          f"{'PASS' if ok else 'FAIL'}")


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for kind in ("journal", "sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            path = default_job_file(tmp, 100)
            url = journal_url(f"{tmp}/shared.journal") if kind == "journal" else f"sqlite:///{tmp}/shared.db"
            one(url, tmp, path)


if __name__ == "__main__":
    main()
