"""``servopt predict``: the latency distribution of one deployment under a workload's traffic."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from typing import TYPE_CHECKING

from . import COMMANDS
from .common import add_hardware_args, load_deployment, random_seed, request_count

if TYPE_CHECKING:
    from ...costmodels.serving import CompiledDeployment
    from ...costmodels.serving.traffic import Traffic


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "predict",
        help=COMMANDS["predict"][1],
        description="Predict the latency distribution, throughput and goodput of one deployment serving the "
        "workload's traffic (discrete-event simulation of vLLM's scheduler on the roofline cost model).",
    )
    parser.add_argument("workload", metavar="WORKLOAD.yaml", help="workload file (model, traffic, slo)")
    parser.add_argument("--deployment", required=True, metavar="DEPLOYMENT.yaml", help="deployment file")
    parser.add_argument("--requests", type=request_count, default=None,
                        help="requests to simulate (default: grow until P99 is stable; a trace: its length; "
                             "a benchmark run: concurrency x requests_per_client)")
    parser.add_argument("--seed", type=random_seed, default=0, help="random seed (default 0)")
    parser.add_argument("--analytic", action="store_true",
                        help="queueing-formula estimate instead of the simulation (what the search screens with)")
    add_hardware_args(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def _finite(value):
    """JSON has no inf or NaN: unknown or unbounded values become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def compute_prediction(args: argparse.Namespace) -> dict:
    """Everything ``predict`` reports, as a JSON-ready dict (seconds, requests/s, tokens/s)."""
    # Imported here, not at the top: `servopt predict --help` starts without them.
    from ...calibration.registry import load_profile
    from ...costmodels.architectures import resolve_model
    from ...costmodels.hardware import load_catalog
    from ...costmodels.serving import compile_deployment, estimate_compiled, simulate_compiled
    from ...costmodels.uncertainty import LEVEL, prediction_kind, summary_intervals
    from ..workload import load_workload

    workload = load_workload(args.workload)
    resolved = resolve_model(workload.model)
    given = load_deployment(args.deployment)
    gpu = load_catalog(args.hardware).get(given.gpu)
    profile = load_profile(gpu, args.profile)
    traffic = workload.traffic
    slo = workload.slo if workload.slo.targets() else None
    compiled = compile_deployment(resolved.spec, given, gpu, profile)
    deployment = compiled.deployment  # with the scheme served (the checkpoint's own when the file names none)

    def predict(c: CompiledDeployment):
        if args.analytic:
            return estimate_compiled(c, traffic, slo=slo).summary
        return simulate_compiled(c, traffic, num_requests=args.requests, seed=args.seed, slo=slo).summary

    summary = predict(compiled)
    open_loop = traffic.arrival.kind != "closed_loop"
    kind = prediction_kind(calibrated=profile.calibrated, architecture=gpu.architecture,
                           moe=resolved.spec.moe is not None, engine=compiled.roles[0].cost.engine,
                           queue_share_p99_ttft=summary.queueing_share_p99_ttft, saturated=summary.saturated)
    extra = {"intervals": summary_intervals(summary, kind, open_loop),
             "interval_kind": {"level": LEVEL, **dataclasses.asdict(kind)}}
    if workload.redundancy > 0 or workload.slo.n_minus_1:
        # One replica down: the same traffic on one replica fewer (none left for a single replica).
        fewer = deployment.replicas - 1
        extra["n_minus_1"] = predict(compiled.with_replicas(fewer)).to_dict() if fewer else None
    result = {
        "model": resolved.spec.name,
        "gpu": gpu.name,
        "deployment": deployment.model_dump(exclude_none=True),
        "num_gpus": deployment.num_gpus,
        "profile": profile.source,
        "profile_calibrated": profile.calibrated,
        "serving_coefficients": profile.serving_source,
        "slo": slo.targets() if slo else {},
        "warnings": workload.warnings(),
        **summary.to_dict(),
        **extra,
    }
    return _finite(result)


def _ms(value: float | None) -> str:
    """A latency in a column of 12: milliseconds, or seconds from 100 s (a saturated run's) so it never
    runs into the next column."""
    if value is None:
        return "unbounded"
    return f"{value * 1e3:9.1f} ms" if value < 100 else f"{value:10.1f} s"


def _latency_table(r: dict) -> list[str]:
    """Mean and percentiles of TTFT, TPOT, ITL and end-to-end latency of a summary (or one class's)."""
    lines = [f"{'':12}{'mean':>12}{'p50':>12}{'p90':>12}{'p99':>12}"]
    for key, label in (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("itl_s", "ITL"), ("e2e_s", "end-to-end")):
        stats = r[key]
        lines.append(f"{label:12}" + "".join(f"{_ms(stats[k]):>12}" for k in ("mean", "p50", "p90", "p99")))
    return lines


def _interval(pair) -> str:
    if pair is None or any(v is None for v in pair):
        return "no run measured"
    return f"[{pair[0] * 1e3:.1f}, {pair[1] * 1e3:.1f}] ms"


def _interval_lines(r: dict) -> list[str]:
    """The error bars: each mean and P99 with the interval its kind held on runs left out of the fit."""
    intervals, kind = r.get("intervals"), r.get("interval_kind")
    if not intervals:
        return []
    label = (f"{'calibrated' if kind['calibrated'] else 'UNCALIBRATED'} {kind['gpu_class']} GPU, {kind['family']} model, "
             f"vLLM {kind['engine'].upper()} engine, {'light load' if kind['regime'] == 'light' else 'queueing load'}")
    lines = ["", f"{kind['level']:.0%} intervals from the held-out error of this kind of prediction ({label}):",
             f"{'':12}{'mean':>26}{'p99':>26}"]
    for key, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2e", "end-to-end")):
        lines.append(f"{name:12}{_interval(intervals.get(f'{key}_mean')):>26}{_interval(intervals.get(f'{key}_p99')):>26}")
    return lines


def _n_minus_1_lines(r: dict) -> list[str]:
    """The one-replica-down block (workloads with redundancy or slo.n_minus_1)."""
    n1 = r["n_minus_1"]
    if n1 is None:
        return ["one down        a single replica: losing it stops the service"]
    head = f"one down        with {r['deployment'].get('replicas', 1) - 1} replica(s) left: P99 " + ", ".join(
        f"{m.upper()} {_ms(n1[f'{m}_s']['p99']).strip()}" for m in ("ttft", "tpot", "itl", "e2e"))
    lines = [head]
    if n1["saturated"]:
        lines.append("                SATURATED with one replica down: " + n1["saturation_reason"])
    if r["slo"]:
        lines.append(f"                SLO {'met' if n1['slo_met'] else 'MISSED'} with one replica down")
    return lines


def render(r: dict) -> str:
    d = r["deployment"]
    layout = f"tp={d.get('tp', 1)}, pp={d.get('pp', 1)}, replicas={d.get('replicas', 1)}"
    if d.get("data_parallel_size", 1) > 1 or d.get("enable_expert_parallel"):
        layout += (f", data_parallel_size={d.get('data_parallel_size', 1)}"
                   + (", expert parallel" if d.get("enable_expert_parallel") else ""))
    if "disaggregation" in d:
        p = d["disaggregation"]
        layout = (f"P/D: {p['prefill_instances']} prefill (tp={p.get('prefill_tp', 1)}) + "
                  f"{p['decode_instances']} decode (tp={p.get('decode_tp', 1)}), replicas={d.get('replicas', 1)}")
    how = "analytic estimate" if r["method"] == "analytic" else (
        f"simulated {r['num_requests']} requests, {r['num_measured']} measured ({r['warmup_excluded']} warm-up/cool-down excluded)")
    lines = [f"{r['model']} on {r['num_gpus']} x {r['gpu']} ({layout}); {how}", ""]
    if r["saturated"]:
        lines += ["SATURATED: " + r["saturation_reason"],
                  "The latencies below grow with the length of the run; they are not a steady state.", ""]
    lines += _latency_table(r)
    ci = r.get("p99_ci_s") or {}
    bounds = [f"{m.upper()} [{lo * 1e3:.1f}, {hi * 1e3:.1f}] ms" for m, (lo, hi) in ci.items()
              if lo is not None and hi is not None]
    if bounds:
        lines.append("P99 95% intervals (batch means): " + ", ".join(bounds))
    lines += _interval_lines(r)
    throughput = r.get("intervals", {}).get("requests_per_s")
    spread = ("" if not throughput or None in throughput or throughput[0] == throughput[1]
              else f" (80% interval {throughput[0]:.3g}-{throughput[1]:.3g})")
    lines += [
        "",
        f"throughput      {r['requests_per_s']:.3g} req/s{spread}, {r['output_tokens_per_s']:.4g} output tokens/s, "
        f"{r['input_tokens_per_s']:.4g} input tokens/s",
    ]
    if r["slo"]:
        targets = ", ".join(f"P99 {m.upper()} <= {v * 1e3:.0f} ms" for m, v in r["slo"].items())
        verdict = "met" if r["slo_met"] else "MISSED"
        lines.append(f"SLO             {targets}: {verdict}; goodput {r['goodput_requests_per_s']:.3g} req/s "
                     f"({(r['slo_attainment'] or 0) * 100:.1f}% of requests within every target)")
    lines += [
        f"batch           {r['mean_batch_size']:.1f} sequences per step on average; KV cache {r['kv_utilization'] * 100:.0f}% used; "
        f"{r['compute_bound_share'] * 100:.0f}% of steps compute-bound",
    ]
    if r["queueing_share_p99_ttft"] is not None:
        lines.append(f"why             {r['queueing_share_p99_ttft'] * 100:.0f}% of the slowest requests' TTFT is queueing "
                     "for admission or prefill capacity")
    if r["preemptions"]:
        lines.append(f"preemptions     {r['preemptions']} (KV cache ran out; the newest requests were recomputed)")
    if "n_minus_1" in r:
        lines += _n_minus_1_lines(r)
    for name, c in (r.get("classes") or {}).items():
        lines += ["", f"class {name}: priority {c['priority']}, {c['share'] * 100:.0f}% of arrivals, "
                      f"{c['requests_per_s']:.3g} req/s" + (f", {c['preemptions']} preemptions" if c["preemptions"] else "")]
        lines += _latency_table(c)
        if c["slo"]:
            targets = ", ".join(f"P99 {m.upper()} <= {v * 1e3:.0f} ms" for m, v in c["slo"].items())
            lines.append(f"SLO             {targets}: {'met' if c['slo_met'] else 'MISSED'}; goodput "
                         f"{c['goodput_requests_per_s']:.3g} req/s ({(c['slo_attainment'] or 0) * 100:.1f}% within)")
    lines += ([""] if r.get("classes") and r["notes"] else []) + [f"note            {n}" for n in r["notes"]]
    lines += ["", f"Profile: {r['profile']}" + ("" if r["profile_calibrated"] else "  [UNCALIBRATED]")]
    if r.get("serving_coefficients"):
        lines.append(f"Serving coefficients: {r['serving_coefficients']}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    result = compute_prediction(args)
    for line in result["warnings"]:
        print(f"servopt predict: warning: {line}", file=sys.stderr)
    print(json.dumps(result, indent=2) if args.json else render(result))
    return 0
