"""kill -9 a running job, rerun it: every finished trial must still be there and the job complete.

    python benchmarks/bench_optimizer_resume.py
"""

from __future__ import annotations

import signal
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import optuna
from bench_optimizer_setup import cli, default_job_file, run

from servopt.optimizer._storage import journal_url, open_storage
from servopt.optimizer.study import FINISHED


def trials(journal: Path) -> tuple[dict[int, tuple | None], Counter]:
    """Finished trials (complete, or pruned with no values) and their values; every trial's state."""
    if not journal.exists():
        return {}, Counter()
    storage = open_storage(journal_url(journal))
    found = [t for s in optuna.get_all_study_summaries(storage)
             for t in optuna.load_study(study_name=s.study_name, storage=storage).trials]
    return ({t.number: t.values and tuple(t.values) for t in found if t.state in FINISHED},
            Counter(t.state.name for t in found))


def main() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        path = default_job_file(tmp, 80)
        out = Path(tmp) / "out"
        proc = subprocess.Popen(cli(["optimize", str(path), "--out", str(out), "--no-progress"]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        journal = out / "study.journal"
        while len(trials(journal)[0]) < 20:
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before, _ = trials(journal)
        rerun = run(["optimize", str(path), "--out", str(out), "--no-progress", "--json"])
        after, states = trials(journal)
        kept = sum(after.get(n) == v for n, v in before.items())
    print(f"kill -9 after {len(before)} finished trials; rerun exit {rerun.returncode}: {len(after)} finished "
          f"(budget 80), {kept}/{len(before)} earlier trials kept with identical values, states {dict(states)}: "
          f"{'PASS' if kept == len(before) and len(after) == 80 and rerun.returncode in (0, 2) else 'FAIL'}")


if __name__ == "__main__":
    main()
