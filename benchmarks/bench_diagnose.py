"""``servopt diagnose`` on every measured ``vllm bench serve`` run servopt can simulate: the verdicts and their errors.

Runs: the ``vllm bench serve`` tables of ../shared/data/measured/e2e and the repository's public ones
(calibration/measured/e2e), read by calibration/corpus.py (the deployment each row states, with the
defaults of its vLLM version). A run with a per-request JSON is diagnosed from it; a row without one
from the summary its printed result block gives (:func:`~servopt.calibration.vllm_bench.result_from_table_row`,
what ``vllm bench serve`` saves without ``--save-detailed``). Runs of one session (one server, the
benchmarks in the order its scripts ran them; calibration/corpus.py's ``SESSIONS``) are diagnosed
together, as ``servopt diagnose a.json b.json ...`` would be.

Labels, fixed before looking at any verdict and read from the measurements alone. A *group* is the
runs of one deployment and one request shape (model, deployment, dataset, mean input length to two
significant digits) at different loads; only groups of two or more runs are labelled:

- **light**: the least loaded run of its group (lowest request rate, or the smallest burst);
  **light and healthy**: also no measured stall and no queue: P99 ITL under twice the median ITL
  (the stall rule of the diagnosis itself, so this count tests that the simulation finds no queue,
  preemption or cache pressure there) and median TTFT under one second;
- **saturated**: the median TTFT is at least ten times its group's light run's, and the mean TTFT is
  at least a quarter of the mean end-to-end time (mean TTFT + mean TPOT x (mean output - 1)):
  requests spent a quarter of their life waiting for a first token, ten times longer than on a
  lightly loaded server.

It prints each run (load, measured and predicted P99 TTFT, the verdict, the label) and the counts:
light healthy runs called ``none`` (and every light run, healthy or not), saturated runs called
anything else, per source (../shared, and the public runs of calibration/measured).

    python benchmarks/bench_diagnose.py [--shared PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd

from servopt.calibration.corpus import BENCH_TABLES, REPO_E2E, SHARED_E2E, bench_runs
from servopt.calibration.diagnose import diagnose
from servopt.calibration.registry import load_profile
from servopt.calibration.vllm_bench import read_bench_result, result_from_table_row
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu


def _result_paths(runs, folders: list[Path], scratch: Path) -> dict[str, Path]:
    """The result file of each run: its per-request JSON, else a summary written from its table row."""
    rows = {}
    for folder in folders:
        for name in BENCH_TABLES:
            if (folder / name).exists():
                for i, row in enumerate(pd.read_csv(folder / name).to_dict("records")):
                    rows[f"{name}:{i}"] = row
    paths = {}
    for run in runs:
        if run.extra.get("json_path"):
            paths[run.run_id] = Path(run.extra["json_path"])
            continue
        try:
            summary = result_from_table_row(rows[run.run_id])
        except InputError:
            continue
        path = scratch / f"{run.run_id.replace(':', '_')}.json"
        path.write_text(json.dumps(summary))
        paths[run.run_id] = path
    return paths


def first_line(deployment) -> str:
    """A deployment as a key (its settings, replicas included)."""
    return json.dumps(deployment.model_dump(mode="json"), sort_keys=True)


def _load(run) -> float:
    rate = run.extra["rate"]
    return rate if math.isfinite(rate) else 1e9 + len(run.extra["inputs"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=SHARED_E2E)
    args = parser.parse_args()
    folders = [p for p in (args.shared, REPO_E2E) if p.exists()]
    runs = [r for r in bench_runs(folders) if not r.skip and r.deployment is not None]
    scratch = Path(tempfile.mkdtemp(prefix="servopt-diagnose-"))
    paths = _result_paths(runs, folders, scratch)
    sessions: dict = defaultdict(list)
    for run in runs:
        if run.run_id in paths:
            key = run.extra.get("session") or (run.run_id,)
            sessions[key].append(run)
    verdicts = []
    start = time.perf_counter()
    for members in sessions.values():
        members = sorted(members, key=lambda r: r.extra.get("order", 0) if r.extra.get("session") else 0)
        first = members[0]
        gpu = get_gpu(first.deployment.gpu)
        try:
            result = diagnose([read_bench_result(paths[r.run_id]) for r in members], first.model, first.deployment, gpu,
                              load_profile(gpu))
        except InputError as err:
            print(f"{first.run_id:44} not diagnosed: {err}")
            continue
        verdicts += list(zip(members, result.runs))
    groups: dict = defaultdict(list)
    for run, diag in verdicts:
        r = diag.result
        key = (run.model, first_line(run.deployment), run.extra["dataset"], float(f"{r.mean_input_tokens:.2g}"))
        groups[key].append((run, diag))
    counts: dict = defaultdict(lambda: [0, 0, 0, 0, 0, 0])  # light healthy none/all, light none/all, saturated flagged/all
    print(f"{'run':40} {'load':>9} {'P99 TTFT meas/pred s':>22}  {'verdict':22} label")
    for members in groups.values():
        light_run, light = min(members, key=lambda m: _load(m[0]))
        light_ttft = light.measured["ttft"].p50
        for run, diag in members:
            m, p = diag.measured, diag.predicted
            is_light = diag is light and len(members) > 1
            healthy = is_light and m["itl"].p99 < 2 * m["itl"].p50 and m["ttft"].p50 < 1.0
            e2e = m["ttft"].mean + m["tpot"].mean * max(diag.result.mean_output_tokens - 1, 0)
            saturated = m["ttft"].p50 >= 10 * light_ttft and m["ttft"].mean >= 0.25 * e2e
            where = "public" if run.run_id.startswith("vllm_bench_public.csv") else "shared"
            c = counts[where]
            called_none = diag.bottleneck == "none"
            c[0] += healthy and called_none
            c[1] += healthy
            c[2] += is_light and called_none
            c[3] += is_light
            c[4] += saturated and not called_none
            c[5] += saturated
            label = "light healthy" if healthy else ("light" if is_light else ("saturated" if saturated else ""))
            load = "burst" if not math.isfinite(run.extra["rate"]) else f"{run.extra['rate']:g}/s"
            print(f"{run.run_id[:40]:40} {load:>9} {m['ttft'].p99:10.2f} /{p['ttft'].p99:9.2f}  {diag.bottleneck:22} {label}"
                  f"  [{where}, {diag.result.num_requests} req, {run.model.split('/')[-1][:24]}]")
    print(f"\n{len(verdicts)} runs in {len(sessions)} sessions diagnosed in {time.perf_counter() - start:.1f} s")
    for where, (none, healthy, light_none, light, flagged, saturated) in sorted(counts.items()):
        print(f"{where}: light healthy runs called none: {none} of {healthy} (light runs, healthy or not: {light_none} "
              f"of {light}); saturated runs called a bottleneck: {flagged} of {saturated}")


if __name__ == "__main__":
    main()
