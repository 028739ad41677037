"""Two `servopt optimize` processes on one storage finish one study: no lost or duplicated trials.

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
    ok = numbers == list(range(len(numbers))) and set(states) == {"COMPLETE"} and states["COMPLETE"] >= 100
    print(f"two processes, budget 100: exit codes {codes}; {len(numbers)} trials, numbers 0..{numbers[-1]} with no "
          f"gap or repeat: {numbers == list(range(len(numbers)))}; states {states}; trials per process "
          f"{[c for _, c in per_worker]}; each saw {[r['trials'] for r in reports]} at its end: "
          f"{'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
