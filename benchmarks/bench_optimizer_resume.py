"""kill -9 a running job, rerun it: every finished trial must still be there and the job complete.

    python benchmarks/bench_optimizer_resume.py
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from bench_optimizer_setup import cli, default_job_file, run



def complete(db: Path) -> dict[int, str]:
    """Finished trials (complete, or pruned with no values) and their values."""
    try:
        with sqlite3.connect(db) as conn:
            return dict(conn.execute(
                "select t.number, group_concat(v.value) from trials t left join trial_values v "
                "on v.trial_id = t.trial_id where t.state in ('COMPLETE', 'PRUNED') group by t.number").fetchall())
    except sqlite3.OperationalError:  # the job has created the file but not yet Optuna's tables
        return {}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = default_job_file(tmp, 80)
        out = Path(tmp) / "out"
        proc = subprocess.Popen(cli(["optimize", str(path), "--out", str(out), "--no-progress"]),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        db = out / "study.db"
        while not (db.exists() and len(complete(db)) >= 20):
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        before = complete(db)
        rerun = run(["optimize", str(path), "--out", str(out), "--no-progress", "--json"])
        after = complete(db)
        kept = sum(after.get(n) == v for n, v in before.items())
        with sqlite3.connect(db) as conn:
            states = dict(conn.execute("select state, count(*) from trials group by state").fetchall())
    print(f"kill -9 after {len(before)} finished trials; rerun exit {rerun.returncode}: {len(after)} finished "
          f"(budget 80), {kept}/{len(before)} earlier trials kept with identical values, states {states}: "
          f"{'PASS' if kept == len(before) and len(after) == 80 and rerun.returncode in (0, 2) else 'FAIL'}")


if __name__ == "__main__":
    main()
