"""Concrete changes for a diagnosed bottleneck, each judged by simulating the same load again.

:func:`recommend` proposes, per bottleneck, the changes that act on its physics, as a vLLM user
writes them (flags, or the replica count behind the router), simulates each on the traffic the live
run sent, and keeps the prediction, the GPUs it takes and its effect on the metric the bottleneck
hurts (P99 TTFT for a queue, P99 ITL for prefill interference, P99 TPOT for memory-bound decode):

| bottleneck | changes tried |
| --- | --- |
| ``saturated`` | replicas from one replica's estimated saturation rate (``costmodels/capacity.py``) at the offered rate, or to serve what was offered; ``max_num_seqs`` x2, and up to what the KV cache holds, when it caps the batch; fp8 KV cache when the cache is 90% full |
| ``kv_pressure`` | fp8 KV cache (half the bytes per token); ``gpu_memory_utilization`` 0.95; TP x2 (the KV cache spreads over twice the GPUs); ``max_num_seqs`` down to what the cache holds; one more replica |
| ``under_batching`` | ``max_num_seqs`` x2, and up to what the KV cache holds; async scheduling (vLLM 0.14+) when the host shows; one more replica |
| ``prefill_interference`` | ``max_num_batched_tokens`` halved, then quartered (smaller prefill chunks per step); chunked prefill when off; one prefill and one decode instance (P/D disaggregation) |
| ``memory_bound_decode`` | fp8 weights; fp8 KV cache; TP x2 |

A change improves things when the hurt metric's P99 drops by at least :data:`MIN_GAIN` (10%, more
than the re-simulation's noise on these runs) or a saturated run stops saturating, without
saturating a run that was not; changes vLLM would not start (memory, batch limits, TP over a node
or not dividing the heads) are listed with the reason. Effects compare prediction with prediction,
so a model error common to both cancels.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ..costmodels.architectures import ModelSpec
from ..costmodels.capacity import replica_capacity
from ..costmodels.deployment import DisaggregationConfig, Deployment
from ..costmodels.errors import InputError
from ..costmodels.hardware import GPUSpec
from ..costmodels.quantization import builtin_accuracy_table, support_problem
from ..costmodels.serving import SimulationResult, Traffic
from ..costmodels.serving.activity import EngineActivity
from ..costmodels.serving.compiled import CompiledDeployment
from ..costmodels.engines.vllm import CURRENT_VLLM, async_scheduling, parse_vllm_version

MIN_GAIN = 0.10
# The metric each bottleneck hurts (what a change must improve).
TARGET = {"saturated": "ttft", "kv_pressure": "ttft", "under_batching": "ttft", "prefill_interference": "itl",
          "memory_bound_decode": "tpot"}


@dataclass(frozen=True)
class Change:
    """A proposed change: how a user writes it, the deployment fields it sets, and why."""

    text: str
    updates: dict
    why: str


@dataclass(frozen=True)
class Recommendation:
    """A change with its simulated outcome (``predicted`` is None when it could not be simulated)."""

    change: str
    why: str
    deployment: Deployment
    num_gpus: int
    predicted: SimulationResult | None
    improves: bool
    effect: str

    def to_dict(self) -> dict:
        s = self.predicted.summary if self.predicted else None
        return {
            "change": self.change, "why": self.why, "improves": self.improves, "effect": self.effect,
            "num_gpus": self.num_gpus, "deployment": self.deployment.model_dump(mode="json", exclude_none=True),
            "predicted": None if s is None else {
                **{f"{m}_s": getattr(s, f"{m}_s").to_dict() for m in ("ttft", "tpot", "itl", "e2e")},
                "saturated": s.saturated, "preemptions": s.preemptions, "requests_per_s": s.requests_per_s},
        }


@dataclass(frozen=True)
class Situation:
    """What the candidates are built from: the live deployment compiled, the run's load and what the
    engines did in its simulation."""

    model: ModelSpec
    gpu: GPUSpec
    compiled: CompiledDeployment
    activity: EngineActivity
    offered_rate: float | None  # requests/s of an open-loop run (None: bursts and closed loops)
    served_rate: float
    saturated: bool
    mean_input_tokens: float
    mean_output_tokens: float


def _tp_problem(model: ModelSpec, gpu: GPUSpec, tp: int) -> str | None:
    if tp > gpu.gpus_per_node:
        return f"TP {tp} exceeds a node of {gpu.gpus_per_node} {gpu.name}"
    kv = model.num_kv_heads
    # vLLM splits the query heads over the TP ranks and the KV heads too, or replicates them when fewer.
    if model.num_attention_heads % tp or (kv % tp if kv >= tp else tp % kv):
        return f"TP {tp} does not divide {model.name}'s attention heads"
    return None


def _replica_changes(s: Situation) -> list[Change]:
    d = s.compiled.deployment
    wanted = d.replicas + 1
    why = "one more replica"
    if s.offered_rate:
        # One replica's saturation rate on requests of the run's mean lengths, by the engine model
        # the simulation shares (costmodels/capacity.py).
        mix = Traffic.model_validate({
            "arrival": {"kind": "poisson", "rate_per_s": s.offered_rate},
            "input_tokens": {"kind": "fixed", "value": max(round(s.mean_input_tokens), 1)},
            "output_tokens": {"kind": "fixed", "value": max(round(s.mean_output_tokens), 1)}})
        try:
            formula = replica_capacity(s.compiled, mix).replicas_for(s.offered_rate)
        except InputError:
            formula = 0
        served = math.ceil(d.replicas * s.offered_rate / s.served_rate) if s.saturated and s.served_rate > 0 else 0
        if max(formula, served) > d.replicas:
            wanted = max(formula, served)
            why = (f"one replica's estimated capacity needs {formula} replica(s) at {s.offered_rate:g} req/s"
                   + (f"; serving what was offered needs {served}" if served else ""))
    return [Change(f"replicas {wanted} (behind the router)", {"replicas": wanted}, why)]


def _seq_changes(s: Situation, factor: float, why: str) -> list[Change]:
    role = s.compiled.roles[0]
    seqs = max(int(role.limits.max_num_seqs * factor), 1)
    updates = {"max_num_seqs": seqs}
    text = f"--max-num-seqs {seqs}"
    if role.limits.max_num_batched_tokens < seqs:
        updates["max_num_batched_tokens"] = seqs
        text += f" --max-num-batched-tokens {seqs}"
    return [Change(text, updates, why)]


def _kv_fit(s: Situation) -> int:
    """Requests of the run's mean lengths that the KV cache of one engine holds."""
    plan = s.compiled.roles[0].plan
    return int(plan.kv_capacity_tokens / max(s.mean_input_tokens + s.mean_output_tokens, 1))


def _batch_changes(s: Situation, why: str) -> list[Change]:
    """``max_num_seqs`` doubled, and raised to what the KV cache holds when that is more."""
    current = s.compiled.roles[0].limits.max_num_seqs
    out = _seq_changes(s, 2, why)
    fit = _kv_fit(s)
    if fit > 2 * current:
        out += _seq_changes(s, fit / current, f"{why}; the KV cache holds about {fit} requests of this mix")
    return out


def _kv_fp8(s: Situation, why: str) -> list[Change]:
    if s.compiled.deployment.kv_cache_dtype == "fp8":
        return []
    return [Change("--kv-cache-dtype fp8", {"kv_cache_dtype": "fp8"}, why)]


def _tp_double(s: Situation, why: str) -> list[Change]:
    d = s.compiled.deployment
    if d.disaggregation is not None:
        return []
    return [Change(f"--tensor-parallel-size {d.tp * 2}", {"tp": d.tp * 2}, why)]


def candidates(bottleneck: str, s: Situation) -> list[Change]:
    """The changes :data:`recommend` tries for a bottleneck (see the module docstring)."""
    d, a = s.compiled.deployment, s.activity
    role = s.compiled.roles[0]
    out: list[Change] = []
    if bottleneck == "saturated":
        out += _replica_changes(s)
        if a.seq_cap_share >= 0.5:
            out += _batch_changes(s, f"max_num_seqs ({role.limits.max_num_seqs}) caps the batch "
                                     f"{a.seq_cap_share:.0%} of the step time")
        if a.kv_peak >= 0.9:
            out += _kv_fp8(s, f"the KV cache peaks at {a.kv_peak:.0%}: fp8 halves its bytes per token")
    elif bottleneck == "kv_pressure":
        out += _kv_fp8(s, "fp8 KV halves the bytes per token: twice the tokens in the same memory")
        if d.gpu_memory_utilization < 0.95 and d.kv_cache_memory_gib is None:
            out.append(Change("--gpu-memory-utilization 0.95", {"gpu_memory_utilization": 0.95},
                              f"{0.95 - d.gpu_memory_utilization:.0%} more of each GPU for the KV cache"))
        out += _tp_double(s, "twice the GPUs: the weights take half of each, the KV cache spreads over both")
        fit = _kv_fit(s)
        if 1 <= fit < role.limits.max_num_seqs:
            out += _seq_changes(s, fit / role.limits.max_num_seqs,
                                f"the KV cache holds about {fit} requests of this mix: admitting no more stops "
                                "the preemption churn (recompute)")
        out.append(Change(f"replicas {d.replicas + 1} (behind the router)", {"replicas": d.replicas + 1},
                          "one more replica: each holds fewer requests"))
    elif bottleneck == "under_batching":
        if a.seq_cap_share >= 0.5:
            out += _batch_changes(s, f"max_num_seqs ({role.limits.max_num_seqs}) caps the batch while the KV "
                                     f"cache peaks at {a.kv_peak:.0%}")
        version = parse_vllm_version(d.vllm_version)
        if a.gpu_wait_share >= 0.25 and not async_scheduling(version, d.pp):
            out.append(Change(f"vLLM {CURRENT_VLLM} (async scheduling: the next step is scheduled while the GPU runs)",
                              {"vllm_version": CURRENT_VLLM},
                              f"the GPU waits on the engine's CPU {a.gpu_wait_share:.0%} of the step time"))
        out.append(Change(f"replicas {d.replicas + 1} (behind the router)", {"replicas": d.replicas + 1},
                          "one more replica"))
    elif bottleneck == "prefill_interference":
        tokens = role.limits.max_num_batched_tokens
        if d.enable_chunked_prefill:
            for factor in (2, 4):
                smaller = max(tokens // factor, role.limits.max_num_seqs, 256)
                if smaller < tokens:
                    out.append(Change(f"--max-num-batched-tokens {smaller}", {"max_num_batched_tokens": smaller},
                                      "smaller prefill chunks per step: each decode step carries less prefill"))
        else:
            out.append(Change("--enable-chunked-prefill", {"enable_chunked_prefill": True},
                              "prefills split into chunks instead of one long step"))
        if d.disaggregation is None and d.pp == 1 and d.data_parallel_size == 1:
            out.append(Change(f"P/D disaggregation: 1 prefill + 1 decode instance (TP {d.tp} each)",
                              {"disaggregation": DisaggregationConfig(prefill_instances=1, prefill_tp=d.tp,
                                                                      decode_instances=1, decode_tp=d.tp)},
                              "decodes never share a step with a prefill"))
    elif bottleneck == "memory_bound_decode":
        if d.quantization in (None, "bf16", "fp16") and not support_problem("fp8", s.gpu):
            drop = builtin_accuracy_table().drop_pct("fp8", s.model.num_params)
            out.append(Change("--quantization fp8", {"quantization": "fp8"},
                              f"half the weight bytes each decode step reads (expected quality drop {drop:.1f}%)"))
        out += _kv_fp8(s, "half the KV bytes each decode step reads")
        out += _tp_double(s, "twice the memory bandwidth per replica")
    return out


def _p99(result: SimulationResult, metric: str) -> float:
    return getattr(result.summary, f"{metric}_s").p99


def _fmt(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "n/a"
    return f"{seconds:.2f} s" if seconds >= 1 else f"{seconds * 1e3:.0f} ms"


def recommend(bottleneck: str, situation: Situation, baseline: SimulationResult,
              simulate: Callable[[Deployment], SimulationResult]) -> list[Recommendation]:
    """Each candidate change simulated; those that improve the hurt metric first, the larger gain first."""
    if bottleneck not in TARGET:
        return []
    metric = TARGET[bottleneck]
    d = situation.compiled.deployment
    before = _p99(baseline, metric)
    out = []
    for change in candidates(bottleneck, situation):
        problem = _tp_problem(situation.model, situation.gpu, change.updates["tp"]) if "tp" in change.updates else None
        try:
            changed = Deployment.model_validate({**d.model_dump(exclude_none=True), **change.updates})
        except ValueError as err:
            problem = str(err).splitlines()[-1].strip()
            changed = d
        result = None
        if problem is None:
            try:
                result = simulate(changed)
            except InputError as err:
                problem = str(err)
        if result is None:
            out.append(Recommendation(change.text, change.why, changed, changed.num_gpus, None, False,
                                      f"not simulated: {problem}"))
            continue
        after = _p99(result, metric)
        fixed = baseline.summary.saturated and not result.summary.saturated
        worse = result.summary.saturated and not baseline.summary.saturated
        gain = 1 - after / before if before > 0 and math.isfinite(after) else 0.0
        improves = (fixed or gain >= MIN_GAIN) and not worse
        parts = [f"P99 {metric.upper()} {_fmt(before)} -> {_fmt(after)}"]
        parts += [f"P99 {m.upper()} {_fmt(_p99(baseline, m))} -> {_fmt(_p99(result, m))}" for m in ("ttft", "itl", "e2e")
                  if m != metric]
        if baseline.summary.saturated != result.summary.saturated:
            parts.append("saturated -> not saturated" if fixed else "now saturated")
        if changed.num_gpus != d.num_gpus:
            parts.append(f"GPUs {d.num_gpus} -> {changed.num_gpus}")
        out.append(Recommendation(change.text, change.why, changed, changed.num_gpus, result, improves, "; ".join(parts)))

    def rank(r: Recommendation) -> tuple:
        if r.predicted is None:
            return (2, 0.0)
        fixed = not r.predicted.summary.saturated
        return (0 if r.improves else 1, not fixed, _p99(r.predicted, metric) * r.num_gpus / max(d.num_gpus, 1))

    return sorted(out, key=rank)
