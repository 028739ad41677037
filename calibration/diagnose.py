"""Diagnose a live deployment: simulate the load its ``vllm bench serve`` runs sent and say what limits it.

:func:`diagnose` takes the runs (:mod:`.vllm_bench`), the deployment that served them and, optionally,
a scrape of vLLM's ``/metrics`` (:mod:`.prometheus`), and for each run:

1. rebuilds the load the client sent (its send times, lengths and, for runs given together, the
   prefix cache that earlier runs of the same server left: they are one session, in the order given)
   and simulates it on the deployment (``simulate(..., with_activity=True)``);
2. puts measured and predicted P50/P99 of TTFT, TPOT, ITL and end-to-end side by side;
3. names the bottleneck from the evidence (:mod:`.bottleneck`): measured signals where the run or the
   scrape has them (TTFT growth along the run, P99 ITL over the median, the preemption counter, the
   KV-usage gauge under load, vLLM's queue time), the simulation's physics otherwise and for the
   causes (queue growth, preemptions, KV peak, prefill-carrying steps in the ITL tail, the GPU
   waiting on the host, memory-bound decode steps).

The overall bottleneck is the most loaded run's (the highest request rate; bursts and closed loops
count as the heaviest), and :mod:`.remedies` simulates concrete changes for it. A metrics scrape
speaks for the last run given (take it during or right after that run; two scrapes, before and
after, isolate the run's counters). When the scrape reports vLLM's KV pool (``cache_config_info``)
and the deployment does not fix one, the simulation uses the pool vLLM allocated.

Example:
    >>> from servopt.costmodels.deployment import Deployment
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> runs = [read_bench_result(p) for p in sorted(PUBLIC_RUNS.glob("crusoe_l40s__vllm-1.0qps-Meta-Llama-3.1-8B-Instruct-2*.json"))]
    >>> gpu = get_gpu("l40s")
    >>> d = Deployment(gpu="l40s", vllm_version="0.5.5", enable_chunked_prefill=True, max_model_len=8192)
    >>> result = diagnose(runs, "meta-llama/Llama-3.1-8B-Instruct", d, gpu, PerformanceProfile.spec_default(gpu))
    >>> result.bottleneck
    'none'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..costmodels.architectures import ResolvedModel, resolve_model
from ..costmodels.deployment import Deployment
from ..costmodels.errors import InputError
from ..costmodels.hardware import GIB, GPUSpec
from ..costmodels.profile import PerformanceProfile
from ..costmodels.serving import SLO, SimulationResult, Traffic, compile_deployment, simulate_compiled
from ..costmodels.serving.metrics import LatencyStats
from ..costmodels.engines.vllm import CURRENT_VLLM
from .bench_clients import SessionCache
from .bottleneck import Evidence, Finding, decide
from .prometheus import VllmMetrics
from .remedies import Recommendation, Situation, recommend
from .vllm_bench import METRICS, BenchResult, printable, read_bench_result

PUBLIC_RUNS = Path(__file__).resolve().parent / "measured" / "e2e" / "vllm_bench_runs"
# A median predicted this many times above or below the measured one is no model error (the
# simulation's P50 errors on public runs are tens of percent): the deployment file most likely does
# not describe the server that ran (another GPU, TP, quantization, max_num_seqs or vLLM version).
MISMATCH_FACTOR = 10.0
__all__ = ["diagnose", "Diagnosis", "RunDiagnosis", "read_bench_result", "PUBLIC_RUNS"]


def mismatch_notes(measured: dict[str, LatencyStats], predicted) -> list[str]:
    """A warning when a predicted median is :data:`MISMATCH_FACTOR` times the measured one or more
    (either way): the diagnosis then describes another server than the one that ran.

    >>> from servopt.costmodels.serving.metrics import LatencyStats
    >>> class Predicted:
    ...     ttft_s = tpot_s = e2e_s = LatencyStats(1.9, 1.9, 2.0, 2.1)
    >>> mismatch_notes({"ttft": LatencyStats(0.01, 0.01, 0.02, 0.03)}, Predicted())[0][:60]
    'WARNING: the predicted P50 TTFT (1.9 s) is 190x the measured'
    """
    out = []
    for metric in ("ttft", "tpot", "e2e"):
        meas, pred = measured.get(metric), getattr(predicted, f"{metric}_s", None)
        if meas is None or pred is None or not (math.isfinite(meas.p50) and math.isfinite(pred.p50)):
            continue
        if meas.p50 <= 0 or pred.p50 <= 0:
            continue
        ratio = pred.p50 / meas.p50
        if ratio >= MISMATCH_FACTOR or ratio <= 1 / MISMATCH_FACTOR:
            factor = f"{ratio:.0f}x" if ratio >= 1 else f"1/{1 / ratio:.0f} of"
            out.append(f"WARNING: the predicted P50 {metric.upper()} ({pred.p50:.3g} s) is {factor} the measured "
                       f"({meas.p50:.3g} s): no model is that far off; the deployment file most likely does not describe "
                       "the server that ran (check gpu, tp, quantization, max_num_seqs, vllm_version), and this "
                       "diagnosis is of another server")
            break
    return out


@dataclass(frozen=True)
class RunDiagnosis:
    """One run: measured against predicted, the evidence, and its bottleneck."""

    result: BenchResult
    client: str
    measured: dict[str, LatencyStats]
    simulation: SimulationResult
    traffic: Traffic
    evidence: Evidence
    bottleneck: str
    symptoms: tuple[Finding, ...]
    causes: tuple[Finding, ...]
    notes: tuple[str, ...] = ()

    @property
    def predicted(self) -> dict[str, LatencyStats]:
        s = self.simulation.summary
        return {m: getattr(s, f"{m}_s") for m in METRICS}

    @property
    def load(self) -> tuple[int, float]:
        """For picking the most loaded run: bursts and closed loops first, then the request rate."""
        return (0, self.result.request_rate) if self.client == "open" else (1, float(self.result.num_requests))

    def to_dict(self) -> dict:
        r, s, a = self.result, self.simulation.summary, self.simulation.activity
        return {
            "path": r.path, "client": self.client, "requests": r.num_requests,
            "request_rate": r.request_rate if math.isfinite(r.request_rate) else "inf",
            "max_concurrency": r.max_concurrency, "per_request_data": r.detailed,
            "measured": {f"{m}_s": v.to_dict() for m, v in self.measured.items()},
            "predicted": {f"{m}_s": v.to_dict() for m, v in self.predicted.items()},
            "predicted_saturated": s.saturated, "predicted_preemptions": s.preemptions,
            "predicted_kv_utilization": s.kv_utilization, "predicted_mean_batch_size": s.mean_batch_size,
            "activity": a.to_dict() if a else None,
            "bottleneck": self.bottleneck,
            "symptoms": [f.to_dict() for f in self.symptoms], "causes": [f.to_dict() for f in self.causes],
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Diagnosis:
    """Every run's diagnosis, the overall bottleneck (the most loaded run's) and what to change."""

    model: str  # the catalog's architecture name
    requested: str  # the model as given (what vLLM served)
    deployment: Deployment
    runs: tuple[RunDiagnosis, ...]
    worst: int
    recommendations: tuple[Recommendation, ...]
    metrics: VllmMetrics | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def bottleneck(self) -> str:
        return self.runs[self.worst].bottleneck

    def to_dict(self) -> dict:
        m = self.metrics
        return {
            "model": self.model, "served": self.requested,
            "deployment": self.deployment.model_dump(mode="json", exclude_none=True),
            "bottleneck": self.bottleneck,
            "bottleneck_run": self.runs[self.worst].result.path,
            "recommendations": [r.to_dict() for r in self.recommendations],
            "runs": [r.to_dict() for r in self.runs],
            "metrics": None if m is None else {
                "source": m.source, "running": m.running, "waiting": m.waiting, "kv_cache_usage": m.kv_cache_usage,
                "counters": m.counters, "kv_cache_tokens": m.kv_cache_tokens,
                "ttft_s": {"p50": m.quantile("ttft", 0.5), "p99": m.quantile("ttft", 0.99)},
                "itl_s": {"p50": m.quantile("itl", 0.5), "p99": m.quantile("itl", 0.99)},
            },
            "notes": list(self.notes),
        }


def check_model(result: BenchResult, resolved: ResolvedModel, requested: str) -> None:
    """The run must have measured the model being diagnosed (its ``model_id`` may be a local path or
    a served name: then the last path component has to name the same model)."""
    try:
        theirs = resolve_model(result.model_id).spec.name
        if theirs == resolved.spec.name:
            return
    except InputError:
        theirs = None
    a = result.model_id.rstrip("/").split("/")[-1].lower()
    b = {requested.rstrip("/").split("/")[-1].lower(), resolved.spec.name.split("/")[-1].lower()}
    if theirs is None and any(a in name or name in a for name in b):
        return
    raise InputError(f"vllm bench result '{result.path}' measured model '{printable(result.model_id)}', not "
                     f"'{printable(requested)}': pass --model with the model the server ran (or the run of this model)")


def _pin_kv_pool(compiled, metrics: VllmMetrics | None, profile: PerformanceProfile, notes: list[str]):
    """Use the KV pool vLLM reported (per engine) where the deployment leaves it to servopt's plan."""
    d = compiled.deployment
    if metrics is None or not metrics.kv_cache_tokens or d.kv_cache_memory_gib or d.disaggregation is not None:
        return compiled
    plan = compiled.roles[0].plan
    if plan.layout.groups != 1:
        notes.append("the scrape's KV pool is not used: the model mixes attention kinds (vLLM groups their blocks)")
        return compiled
    planned = plan.kv_cache_blocks * plan.block_size
    gib = metrics.kv_cache_tokens * plan.kv_bytes_per_token_per_gpu / GIB
    pinned = compile_deployment(compiled.model, d.model_copy(update={"kv_cache_memory_gib": gib}), compiled.gpu, profile)
    if pinned.error is not None or not all(role.plan.fits for role in pinned.roles):
        # More KV than the deployment's GPU holds beside the weights: the scrape is of another server.
        notes.append(f"KV pool from the scrape: {metrics.kv_cache_tokens:,.0f} tokens per engine ({gib:.1f} GiB) does "
                     f"not fit a {compiled.gpu.name} beside the weights, so it is not used (a scrape of another "
                     f"deployment?); servopt's plan: {planned:,.0f} tokens")
        return compiled
    notes.append(f"KV pool from the scrape: {metrics.kv_cache_tokens:,.0f} tokens per engine (servopt's plan: "
                 f"{planned:,.0f}, {metrics.kv_cache_tokens / planned - 1:+.0%})")
    return pinned


def _ttft_growth(result: BenchResult, seed: int, version: str | None) -> float:
    """Measured: slope of TTFT against send time over an open-loop run (NaN when not measurable)."""
    if not result.detailed or result.client() != "open":
        return math.nan
    send = np.asarray(result.send_times_s(seed, version))
    ok = result.succeeded
    if ok.sum() < 3 or np.ptp(send[ok]) <= 0:
        return math.nan
    return float(np.polyfit(send[ok], result.ttfts_s[ok], 1)[0])


def _evidence(result: BenchResult, measured: dict[str, LatencyStats], sim: SimulationResult, slo: SLO | None,
              metrics: VllmMetrics | None, seed: int, version: str | None) -> Evidence:
    s, a = sim.summary, sim.activity
    growth = _ttft_growth(result, seed, version)
    stall = measured["itl"].p99 / measured["itl"].p50 if measured["itl"].p50 > 0 else math.nan
    stall_measured = math.isfinite(stall)
    if not stall_measured:
        stall = s.itl_s.p99 / s.itl_s.p50 if s.itl_s.p50 > 0 else math.nan
    wait_share, wait_measured = a.admission_wait_share, False
    preempted, preempt_measured = s.preemptions / max(s.num_measured, 1), False
    kv, kv_measured = a.kv_peak, False
    if metrics is not None:
        queue, e2e = metrics.histograms.get("queue"), metrics.histograms.get("e2e")
        if queue and e2e and e2e.sum > 0:
            wait_share, wait_measured = queue.sum / e2e.sum, True
        if metrics.preemptions is not None:
            preempted, preempt_measured = metrics.preemptions, True
        if metrics.under_load and metrics.kv_cache_usage is not None:
            kv, kv_measured = metrics.kv_cache_usage, True
    misses = {}
    for metric, target in (slo.targets() if slo else {}).items():
        if measured[metric].p99 > target:
            misses[metric] = (measured[metric].p99, target)
    return Evidence(
        queue_growth=growth if math.isfinite(growth) else a.queue_growth_s_per_s,
        queue_growth_measured=math.isfinite(growth), saturated=s.saturated,
        wait_share=wait_share, wait_share_measured=wait_measured,
        preempted=preempted, preemption_measured=preempt_measured,
        stall=stall, stall_measured=stall_measured, kv_full=kv, kv_measured=kv_measured,
        seq_cap_share=a.seq_cap_share, gpu_wait_share=a.gpu_wait_share, memory_bound_share=a.memory_bound_decode_share,
        prefill_tail_share=a.itl_tail_prefill_share, slo_misses=misses,
    )


def diagnose(results: list[BenchResult], model: str, deployment: Deployment, gpu: GPUSpec,
             profile: PerformanceProfile, *, metrics: VllmMetrics | None = None, slo: SLO | None = None,
             seed: int = 0) -> Diagnosis:
    """Diagnose the runs (one session of one server, in order); see the module docstring.

    ``seed``: the benchmark's ``--seed`` (not saved in its result file; default 0, as the tool's).
    """
    if not results:
        raise InputError("give at least one vllm bench result")
    resolved = resolve_model(model)
    for result in results:
        check_model(result, resolved, model)
    for name in metrics.model_names if metrics else ():
        try:
            served = resolve_model(name).spec.name
        except InputError:
            continue  # a --served-model-name alias: nothing to check it against
        if served != resolved.spec.name:
            raise InputError(f"metrics '{metrics.source}' come from a server of model_name '{printable(name)}', not "
                             f"'{printable(model)}': scrape the server that ran the benchmark")
    version = deployment.vllm_version or CURRENT_VLLM
    notes: list[str] = []
    compiled = compile_deployment(resolved.spec, deployment, gpu, profile).require()
    compiled = _pin_kv_pool(compiled, metrics, profile, notes).require()
    deployment = compiled.deployment
    cache = SessionCache(compiled.kv_pool_tokens()) if deployment.enable_prefix_caching else None
    engines = sum(r.engines for r in compiled.roles if r.generates)
    runs = []
    for index, result in enumerate(results):
        traffic = Traffic.model_validate(result.traffic_spec(seed=seed, vllm_version=version, cache=cache,
                                                             engines=engines))
        sim = simulate_compiled(compiled, traffic, seed=seed, slo=slo, with_activity=True)
        scrape = metrics if index == len(results) - 1 else None
        measured = result.measured()
        evidence = _evidence(result, measured, sim, slo, scrape, seed, version)
        verdict = decide(evidence)
        run_notes = [n for n in (verdict.note,) if n]
        if not result.detailed:
            run_notes.append("no per-request data (saved without --save-detailed): every request at the run's mean "
                             f"lengths ({result.mean_input_tokens:.0f} in, {result.mean_output_tokens:.0f} out)")
        if result.failed:
            run_notes.append(f"{result.failed} request(s) failed in the run; the simulation serves all")
        run_notes += mismatch_notes(measured, sim.summary)
        runs.append(RunDiagnosis(result, result.client(), measured, sim, traffic, evidence, verdict.bottleneck,
                                 verdict.symptoms, verdict.causes, tuple(run_notes)))
    worst = max(range(len(runs)), key=lambda i: (runs[i].load, i))
    run = runs[worst]
    summary, activity = run.simulation.summary, run.simulation.activity
    situation = Situation(
        model=resolved.spec, gpu=gpu, compiled=compiled, activity=activity,
        offered_rate=run.result.request_rate if run.client == "open" else None,
        served_rate=summary.requests_per_s, saturated=summary.saturated,
        mean_input_tokens=run.result.mean_input_tokens, mean_output_tokens=run.result.mean_output_tokens,
    )

    def resimulate(changed: Deployment) -> SimulationResult:
        compiled_change = compile_deployment(resolved.spec, changed, gpu, profile)
        return simulate_compiled(compiled_change, run.traffic, seed=seed, slo=slo)

    recommendations = recommend(run.bottleneck, situation, run.simulation, resimulate)
    return Diagnosis(resolved.spec.name, model, deployment, tuple(runs), worst, tuple(recommendations), metrics,
                     tuple(notes))
