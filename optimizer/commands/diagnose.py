"""``servopt diagnose``: what limits a live deployment, from its ``vllm bench serve`` runs (and /metrics)."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from ...calibration.diagnose import Diagnosis, RunDiagnosis, diagnose
from ...calibration.prometheus import read_vllm_metrics
from ...calibration.registry import load_profile
from ...calibration.vllm_bench import length_histogram, printable, read_bench_result
from ...costmodels.errors import InputError, validate_spec
from ...costmodels.hardware import load_catalog
from ...costmodels.escaping import dump_yaml
from ...costmodels.outfiles import check_own_file, output_folder, write_text
from ...costmodels.serving import SLO
from ..workload import parse_workload
from . import COMMANDS
from .common import add_hardware_args, given, random_seed
from .predict import _finite, load_deployment

SLO_KEYS = ("p99_ttft_s", "p99_tpot_s", "p99_e2e_s")
# Length histograms of a seeded workload keep at most this many bins (equal-count bins beyond).
SEED_HISTOGRAM_BINS = 100


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help=COMMANDS["diagnose"][1],
        description="Simulate the load that `vllm bench serve` sent a live deployment, print measured against "
        "predicted P50/P99 of TTFT, TPOT, ITL and end-to-end, name the bottleneck (none, saturated, kv_pressure, "
        "prefill_interference, under_batching, memory_bound_decode) from the evidence, and simulate concrete "
        "changes. Results given together are one session of one server, in order.",
    )
    parser.add_argument("results", nargs="+", metavar="RESULT.json",
                        help="`vllm bench serve --save-result` files (--save-detailed adds per-request data)")
    parser.add_argument("--deployment", required=True, metavar="DEPLOYMENT.yaml",
                        help="the live deployment: gpu, tp, vllm_version, max_num_seqs, ... (as servopt predict reads)")
    parser.add_argument("--model", default=None, help="the model served (default: the results' model_id)")
    parser.add_argument("--metrics", nargs="+", default=None, metavar="METRICS.txt",
                        help="a scrape of vLLM's /metrics during or after the last run; or two, before and after it")
    parser.add_argument("--slo", action="append", default=[], metavar="KEY=SECONDS",
                        help="a P99 target the measurements must meet, e.g. --slo p99_tpot_s=0.05 (repeatable; "
                             "keys p99_ttft_s, p99_tpot_s, p99_e2e_s)")
    parser.add_argument("--bench-seed", type=random_seed, default=0,
                        help="the --seed the benchmark ran with (not saved in its results; default 0, the tool's)")
    parser.add_argument("--seed-job", type=given, default=None, metavar="DIR",
                        help="write DIR/workload.yaml (this traffic, model and GPU) and DIR/deployment.yaml (the live "
                             "deployment) to start `servopt optimize` from")
    add_hardware_args(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def parse_slo(pairs: list[str]) -> SLO | None:
    """``--slo KEY=SECONDS`` pairs as an SLO (None when none are given)."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise InputError(f"--slo {printable(pair, 40)!r}: write KEY=SECONDS, e.g. p99_tpot_s=0.05")
        if key.strip() not in SLO_KEYS:
            raise InputError(f"--slo {printable(key, 30)!r}: unknown target; use {', '.join(SLO_KEYS)}")
        try:
            values[key.strip()] = float(value)
        except ValueError:
            raise InputError(f"--slo {printable(key, 30)}: {printable(value, 30)!r} is not a number of seconds") from None
    return validate_spec(SLO, values, "--slo") if values else None


def compute(args: argparse.Namespace) -> tuple[Diagnosis, dict]:
    results = [read_bench_result(path) for path in args.results]
    deployment = load_deployment(args.deployment)
    gpu = load_catalog(args.hardware).get(deployment.gpu)
    metrics = read_vllm_metrics(args.metrics) if args.metrics else None
    slo = parse_slo(args.slo)
    model = args.model or results[0].model_id
    profile = load_profile(gpu, args.profile)
    result = diagnose(results, model, deployment, gpu, profile, metrics=metrics, slo=slo, seed=args.bench_seed)
    doc = result.to_dict()
    doc["profile"] = profile.source
    doc["slo"] = slo.targets() if slo else {}
    return result, _finite(doc)


# --- the seeded optimize job ----------------------------------------------------------------------
def seed_workload(result: Diagnosis, run: RunDiagnosis, slo: SLO | None) -> tuple[dict[str, Any], list[str]]:
    """A workload for ``servopt optimize``: the live run's traffic, model and GPU; its SLO from
    ``--slo``, else the live run's measured P99 TTFT and TPOT when it was healthy (find deployments
    at least as fast, for less). Returns the mapping and comment lines."""
    r = run.result
    inputs, outputs = r.lengths()
    comments = [f"{SEED_MARK[2:]} from {printable(Path(r.path).name)}: the traffic the live deployment served."]
    if run.client == "open":
        arrival: dict[str, Any] = {"kind": "poisson", "rate_per_s": r.request_rate}
        if r.burstiness != 1:
            arrival = {"kind": "gamma", "rate_per_s": r.request_rate, "cv": round(1 / math.sqrt(r.burstiness), 4)}
    elif run.client == "closed":
        arrival = {"kind": "closed_loop", "concurrency": int(r.max_concurrency)}
    else:
        arrival = {"kind": "closed_loop", "concurrency": r.num_requests}
        comments.append(f"The run sent all {r.num_requests} requests at once: here as that many closed-loop clients.")
    targets = slo.targets() if slo else {}
    if not targets and run.bottleneck == "none" and run.client != "burst":
        targets = {m: float(f"{run.measured[m].p99:.3g}") for m in ("ttft", "tpot") if math.isfinite(run.measured[m].p99)}
        comments.append("SLO: the live run's measured P99 TTFT and TPOT (deployments at least as fast); edit to taste.")
    elif not targets:
        comments.append(f"No SLO: the live run was {run.bottleneck}, its latencies are no target; add slo: to taste.")
    d = result.deployment
    workload = {
        "model": result.requested,
        "traffic": {"arrival": arrival, "input_tokens": length_histogram(inputs, SEED_HISTOGRAM_BINS),
                    "output_tokens": length_histogram(outputs, SEED_HISTOGRAM_BINS)},
        "slo": {f"p99_{m}_s": v for m, v in targets.items()},
        "gpus": [d.gpu],
        "limits": {"max_gpus": max(64, 4 * d.num_gpus)},
    }
    if d.max_model_len:
        workload["max_model_len"] = d.max_model_len
    comments.append("Add GPUs under gpus: to compare; deployment.yaml beside this file is the live deployment "
                    "(servopt predict workload.yaml --deployment deployment.yaml gives its prediction).")
    return workload, comments


def seed_run(result: Diagnosis) -> RunDiagnosis:
    """The run a seeded job reproduces: the most loaded one that sent a steady load (open loop, or a
    concurrency cap), else the most loaded (an all-at-once burst)."""
    steady = [r for r in result.runs if r.client != "burst"]
    return max(steady, key=lambda r: r.load) if steady else result.runs[result.worst]


SEED_JOB_FILES = ("workload.yaml", "deployment.yaml")
# The first line of each file a seeded job holds: a file of that name without it is someone else's.
SEED_MARK = "# Written by servopt diagnose"


def write_seed_job(folder: str, result: Diagnosis, slo: SLO | None) -> tuple[Path, Path]:
    run = seed_run(result)
    workload, comments = seed_workload(result, run, slo)
    parse_workload(workload, "the seeded workload")  # what optimize will read
    out = output_folder(folder, "--seed-job", SEED_JOB_FILES)  # not the root, nor a folder of other files
    for name in SEED_JOB_FILES:  # a hand-written workload.yaml there is kept, and the command refused
        check_own_file(out / name, SEED_MARK, "--seed-job")
    header = "".join(f"# {printable(line, 500)}\n" for line in comments)
    work = write_text(out / "workload.yaml", header + dump_yaml(workload, default_flow_style=None, width=120))
    dep = write_text(out / "deployment.yaml", f"{SEED_MARK}: the live deployment (servopt predict reads it)\n"
                     + dump_yaml(result.deployment.model_dump(mode="json", exclude_none=True)))
    return work, dep


# --- text output ----------------------------------------------------------------------------------
def _ms(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    return f"{seconds:.2f} s" if seconds >= 10 else f"{seconds * 1e3:.1f} ms"


def _error(pred: float | None, meas: float | None) -> str:
    """Predicted against measured in a column of 8: a percentage, or a factor beyond 10x either way
    (a "+72590%" ran into the next column)."""
    if pred is None or meas is None or not (math.isfinite(pred) and math.isfinite(meas)) or meas <= 0:
        return ""
    ratio = pred / meas
    if ratio >= 10:
        return f"{ratio:.0f}x" if ratio < 1e6 else ">1e6x"
    if 0 < ratio <= 0.1:
        return f"1/{1 / ratio:.0f}" if ratio > 1e-6 else "<1e-6x"
    error = ratio - 1
    return f"{error:+.0%}" if abs(error) >= 0.005 else "0%"


def _run_lines(i: int, run: dict) -> list[str]:
    rate = run["request_rate"]
    how = {"open": f"sent at {rate} req/s", "burst": "sent all at once",
           "closed": f"at most {run['max_concurrency']} in flight"}[run["client"]]
    detail = "per-request data" if run["per_request_data"] else "statistics only"
    lines = [f"run {i}: {printable(Path(run['path']).name)}: {run['requests']} requests {how} ({detail})",
             f"  {'':6}{'measured P50':>14}{'predicted P50':>15}{'':>8}{'measured P99':>14}{'predicted P99':>15}"]
    for metric in ("ttft", "tpot", "itl", "e2e"):
        m, p = run["measured"][f"{metric}_s"], run["predicted"][f"{metric}_s"]
        lines.append(f"  {metric.upper():6}{_ms(m['p50']):>14}{_ms(p['p50']):>15} {_error(p['p50'], m['p50']):>7}"
                     f"{_ms(m['p99']):>14}{_ms(p['p99']):>15} {_error(p['p99'], m['p99']):>7}")
    lines.append(f"  bottleneck: {run['bottleneck']}")
    for finding in run["symptoms"] + run["causes"]:
        if finding["holds"]:
            lines.append(f"    {finding['name']}: {finding['evidence']}")
    lines += [f"  note: {printable(n, 400)}" for n in run["notes"]]
    return lines


def render(doc: dict) -> str:
    d = doc["deployment"]
    lines = [f"diagnose: {printable(doc['model'])} on {d['gpu']} (tp={d.get('tp', 1)}, pp={d.get('pp', 1)}, "
             f"replicas={d.get('replicas', 1)}, vLLM {d.get('vllm_version') or 'default'})"]
    if doc["slo"]:
        lines.append("targets: " + ", ".join(f"P99 {k.upper()} <= {_ms(v)}" for k, v in doc["slo"].items()))
    m = doc["metrics"]
    if m:
        c = m["counters"]
        lines.append(f"metrics ({printable(m['source'], 200)}): running {m['running']}, waiting {m['waiting']}, KV use "
                     f"{m['kv_cache_usage']}, preemptions {c.get('preemptions')}; server P50/P99 TTFT "
                     f"{_ms(m['ttft_s']['p50'])}/{_ms(m['ttft_s']['p99'])}, ITL {_ms(m['itl_s']['p50'])}/{_ms(m['itl_s']['p99'])}")
    lines += [f"note: {printable(n, 400)}" for n in doc["notes"]]
    for i, run in enumerate(doc["runs"], start=1):
        lines += [""] + _run_lines(i, run)
    worst = next(i for i, r in enumerate(doc["runs"], start=1) if r["path"] == doc["bottleneck_run"])
    lines += ["", f"bottleneck: {doc['bottleneck']}" + (f" (run {worst}, the most loaded)" if len(doc["runs"]) > 1 else "")]
    recs = doc["recommendations"]
    if recs:
        lines.append(f"changes, each simulated on run {worst}'s load:")
        for rec in recs:
            mark = "+" if rec["improves"] else "-"
            lines.append(f"  {mark} {printable(rec['change'], 200)}: {rec['effect']}")
            lines.append(f"      why: {rec['why']}")
        lines.append("  (+ improves the metric the bottleneck hurts by 10% or more, or ends the saturation)")
    lines += ["", f"Profile: {doc['profile']}"]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    result, doc = compute(args)
    if args.seed_job:
        work, dep = write_seed_job(args.seed_job, result, parse_slo(args.slo))
        doc["seed_job"] = {"workload": str(work), "deployment": str(dep)}
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render(doc))
        if args.seed_job:
            from ...results import servopt_command  # only here: the reports' imports cost diagnose's start-up

            print(f"\nseed job: {printable(work, 300)} and {printable(dep, 300)}; start the search with "
                  f"{servopt_command('optimize', work)}")
    return 0
