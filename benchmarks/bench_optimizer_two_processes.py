"""Two `servopt optimize` processes on one storage finish one study: exactly the trial budget, no
lost or duplicated trial numbers, and each process reports the trials it ran.

    python benchmarks/bench_optimizer_two_processes.py
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import tempfile

from bench_optimizer_setup import cli, default_job_file



def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = default_job_file(tmp, 100)
        url = f"sqlite:///{tmp}/shared.db"
        procs = [subprocess.Popen(cli(["optimize", str(path), "--study", "shared", "--storage", url, "--out",
                                       f"{tmp}/out{i}", "--no-progress", "--json"]),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(2)]
        outputs = [p.communicate() for p in procs]
        with sqlite3.connect(f"{tmp}/shared.db") as conn:
            numbers = [n for (n,) in conn.execute("select number from trials order by number")]
            states = dict(conn.execute("select state, count(*) from trials group by state").fetchall())
            per_worker = conn.execute("select value_json, count(*) from trial_user_attributes where key = 'worker' "
                                      "group by value_json").fetchall()
    codes = [p.returncode for p in procs]
    reports = [json.loads(out) for out, _ in outputs if out.strip()]
    finished = states.get("COMPLETE", 0) + states.get("PRUNED", 0)
    ran = [r["new_trials"] for r in reports]
    # A trial that lost the race for the last slot is FAIL, never run: at most one per extra worker.
    ok = (numbers == list(range(len(numbers))) and finished == 100 and sum(ran) == 100
          and states.get("FAIL", 0) <= 1)
    print(f"two processes, budget 100: exit codes {codes}; {len(numbers)} trials, numbers 0..{numbers[-1]} with no "
          f"gap or repeat: {numbers == list(range(len(numbers)))}; states {states} ({finished} finished); trials "
          f"each process reports it ran {ran} (sum {sum(ran)}), by worker attribute {[c for _, c in per_worker]}; "
          f"each saw {[r['trials'] for r in reports]} at its end: {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
