"""The physics check: no figure servopt prints or writes may need more than the hardware has.

Every throughput, capacity and latency a command reports describes GPUs it names. Whatever the step
model, the queueing formulas or a fitted profile say, those GPUs cannot

- **compute** more than their dense peak: a request needs at least ``2 x active params`` FLOPs for
  every prompt token the prefix cache does not hold and for every output token after the first
  (seed section 2: prefill ~2N FLOPs per token; a verify step of speculative decoding only adds);
  the peak is that of the math dtype the weight scheme's GEMMs run in
  (:func:`~servopt.costmodels.quantization.math_dtype`);
- **stream** more than their HBM bandwidth: every decode step of an engine reads its weights at
  least once (MoE: at least the weights every token uses; routed experts not counted) plus the KV
  cache of every sequence in the batch, and yields at most ``1 + drafted`` tokens per sequence, so
  an engine's output tokens per second are at most ``B x tau x bandwidth / (weights + B x KV per
  sequence)``, largest at the biggest batch ``B`` its ``max_num_seqs`` and KV pool allow;
- **hold** more than their memory: weights plus the KV pool fit in a GPU, and a KV cache is never
  more than full;
- and no latency distribution has P50 > P90 > P99 out of order, nor a TPOT faster than one weight
  read per step allows.

:class:`Fleet` is what a deployment's GPUs can do (built from a compiled deployment),
:class:`Load` what its requests need (from a traffic); :func:`max_requests_per_s` is the roofline
bound on a request rate, and the ``check_*`` functions return one line per figure that breaks a
bound (empty: every figure passes). A figure that fails is a bug at its source, to fix there, never
to clip. The tests run the check over every figure of the default job, each example, and
``servopt plan`` for every catalog model (``tests/test_physics.py``).

Example (the figure of issue 29: 19.9 requests/s of 3,840-token prompts on 8 L4s):
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.deployment import Deployment
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> from servopt.costmodels.serving.compiled import compile_deployment
    >>> gpu = get_gpu("l4")
    >>> compiled = compile_deployment(get_model("mistral-7b"), Deployment(gpu="l4", tp=8, max_model_len=4096),
    ...                               gpu, PerformanceProfile.spec_default(gpu))
    >>> fleet, load = Fleet.of(compiled), Load(mean_prompt_tokens=3840, mean_output_tokens=256)
    >>> round(max_requests_per_s(fleet, load), 1)
    16.3
    >>> check_rate(fleet, load, 19.9, "l4 bf16 capacity")[0][:80]
    'l4 bf16 capacity: 19.9 requests/s need 122% of the compute of 8 l4 (2 x 7.24 B a'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .architectures import ModelSpec
from .hardware import GPUSpec
from .quantization import math_dtype

# Figures are compared with a relative slack for float rounding and the quantile interpolation of
# summaries; a real breach (a step model faster than the hardware) is far larger.
SLACK = 1e-6
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class EngineGroup:
    """Engines of one kind in a fleet (instances x data-parallel ranks), each on ``gpus`` GPUs."""

    count: int
    gpus: int
    weight_read_bytes: float  # the least a decode step reads of the weights
    max_batch: float  # sequences one decode step can hold: max_num_seqs, and the KV pool
    kv_capacity_tokens: float
    decodes: bool
    weights_bytes_per_gpu: float
    kv_cache_bytes_per_gpu: float
    gpu_memory_bytes: float


@dataclass(frozen=True)
class Fleet:
    """What the GPUs of a deployment can do: ``peak_flops`` and ``bandwidth_bytes_per_s`` per GPU."""

    gpu: str
    num_gpus: int
    math_dtype: str
    peak_flops: float
    bandwidth_bytes_per_s: float
    flops_per_token: float  # 2 x active parameters
    params: float
    kv_bytes_per_token: float  # one engine's whole KV per token of context (every GPU of it)
    tokens_per_step: int  # 1 + drafted tokens per verify step
    groups: tuple[EngineGroup, ...]

    @classmethod
    def of(cls, compiled) -> Fleet:
        """The fleet of a :class:`~servopt.costmodels.serving.compiled.CompiledDeployment`."""
        model, gpu, d = compiled.model, compiled.gpu, compiled.deployment
        groups = []
        for role in compiled.roles:
            plan = role.plan
            gpus = role.tp * d.pp
            engine_weights = plan.weights_bytes_per_gpu * gpus
            seqs = role.limits.max_num_seqs * d.pp  # pipeline stages each hold a micro-batch
            groups.append(EngineGroup(
                count=role.engines, gpus=gpus, weight_read_bytes=engine_weights * _dense_share(model),
                max_batch=seqs, kv_capacity_tokens=float(plan.kv_capacity_tokens), decodes=role.generates,
                weights_bytes_per_gpu=plan.weights_bytes_per_gpu, kv_cache_bytes_per_gpu=plan.kv_cache_bytes_per_gpu,
                gpu_memory_bytes=plan.gpu_memory_bytes))
        return cls(gpu=gpu.name, num_gpus=d.num_gpus, math_dtype=_dtype(compiled.quantization, gpu),
                   peak_flops=gpu.peak_flops(_dtype(compiled.quantization, gpu)),
                   bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
                   flops_per_token=2.0 * model.active_params_per_token, params=float(model.active_params_per_token),
                   kv_bytes_per_token=compiled.roles[0].plan.kv_bytes_per_token if compiled.roles else 0.0,
                   tokens_per_step=1 + compiled.drafts, groups=tuple(groups))

    def output_tokens_per_s_bound(self, shortest_context_tokens: float) -> float:
        """The most output tokens per second the decoding engines stream (module docstring), for
        sequences of at least ``shortest_context_tokens`` tokens of context."""
        total = 0.0
        kv_per_seq = self.kv_bytes_per_token * max(shortest_context_tokens, 1.0)
        for g in self.groups:
            if not g.decodes:
                continue
            batch = min(g.max_batch, max(g.kv_capacity_tokens / max(shortest_context_tokens, 1.0), 1.0))
            bandwidth = self.bandwidth_bytes_per_s * g.gpus
            total += g.count * batch * self.tokens_per_step * bandwidth / (g.weight_read_bytes + batch * kv_per_seq)
        return total

    def tpot_floor_s(self) -> float:
        """The fastest a decode step can read one engine's weights, per token it yields."""
        floors = [g.weight_read_bytes / (self.bandwidth_bytes_per_s * g.gpus) for g in self.groups if g.decodes]
        return min(floors, default=0.0) / self.tokens_per_step


def _dtype(scheme: str, gpu: GPUSpec) -> str:
    dtype = math_dtype(scheme, gpu)
    return dtype if gpu.has_dtype(dtype) else max(gpu.peak_tflops, key=gpu.peak_tflops.get)


def _dense_share(model: ModelSpec) -> float:
    """Share of the parameters every token uses (MoE: all but the routed experts). Routed experts
    are quantized at least as much as the rest, so this share of the bytes is a floor."""
    if model.moe is None:
        return 1.0
    routed = model.num_moe_layers * model.moe.num_experts * model.expert_params
    return max(model.num_params - routed, 0) / model.num_params


@dataclass(frozen=True)
class Load:
    """What requests need: mean lengths, the share of prompt tokens that must be computed (the
    prefix cache holds the rest) and the shortest context a decoding sequence has."""

    mean_prompt_tokens: float
    mean_output_tokens: float
    computed_prompt_share: float = 1.0
    shortest_context_tokens: float = 1.0

    @classmethod
    def of(cls, traffic, mean_prompt_tokens: float, mean_output_tokens: float, prefix_caching: bool | None) -> Load:
        """The load of a :class:`~servopt.costmodels.serving.traffic.Traffic` with these mean lengths.
        With prefix caching (on unless ``False``), shared prefixes are not computed; repeated prompts and
        sessions' histories may be cached whole, so none of their prompt is counted."""
        share = 1.0
        if prefix_caching is not False:
            cached_whole = traffic.prompt_cache is not None or traffic.arrival.kind == "sessions"
            share = 0.0 if cached_whole else 1.0 - traffic.shared_prefix_fraction
        shortest = min(shortest_length(i) for i, _ in traffic.class_lengths()) if traffic.input_tokens or traffic.classes \
            else 1
        return cls(mean_prompt_tokens, mean_output_tokens, share, float(shortest))

    def flops_per_request(self, fleet: Fleet) -> float:
        return fleet.flops_per_token * (self.mean_prompt_tokens * self.computed_prompt_share
                                        + max(self.mean_output_tokens - 1, 0.0))


def shortest_length(dist) -> int:
    """The fewest tokens a length distribution draws (1 when it does not say)."""
    for attr in ("value", "low", "min"):
        value = getattr(dist, attr, None)
        if isinstance(value, int | float):
            return max(int(value), 1)
    values = getattr(dist, "values", None)
    if values is not None:
        return max(int(min(values)), 1)
    tokens = getattr(dist, "tokens", None)
    return max(int(min(tokens)), 1) if tokens is not None and len(tokens) else 1


def max_requests_per_s(fleet: Fleet, load: Load) -> float:
    """The roofline bound on the requests per second ``fleet`` serves of ``load``: the smaller of
    its dense peak over the FLOPs a request needs and its decode streams over the output tokens."""
    compute = fleet.num_gpus * fleet.peak_flops / max(load.flops_per_request(fleet), 1e-30)
    if load.mean_output_tokens <= 1:
        return compute
    decode = fleet.output_tokens_per_s_bound(load.shortest_context_tokens) / load.mean_output_tokens
    return min(compute, decode)


def check_rate(fleet: Fleet, load: Load, requests_per_s: float, what: str) -> list[str]:
    """A request rate claimed for ``fleet`` (a capacity, a throughput): one line per bound it breaks."""
    if not (isinstance(requests_per_s, int | float) and math.isfinite(requests_per_s)) or requests_per_s <= 0:
        return [] if requests_per_s == 0 else [f"{what}: a request rate of {requests_per_s!r} is not a finite figure"]
    out = []
    compute_share = requests_per_s * load.flops_per_request(fleet) / (fleet.num_gpus * fleet.peak_flops)
    if compute_share > 1 + SLACK:
        out.append(f"{what}: {requests_per_s:.3g} requests/s need {compute_share:.0%} of the compute of "
                   f"{fleet.num_gpus} {fleet.gpu} (2 x {fleet.params / 1e9:.3g} B active params x "
                   f"{load.mean_prompt_tokens * load.computed_prompt_share + max(load.mean_output_tokens - 1, 0):.0f} "
                   f"computed tokens a request at the {fleet.math_dtype} peak)")
    if load.mean_output_tokens > 1:
        stream = fleet.output_tokens_per_s_bound(load.shortest_context_tokens)
        needed = requests_per_s * load.mean_output_tokens
        if needed > stream * (1 + SLACK):
            out.append(f"{what}: {needed:.4g} output tokens/s exceed the {stream:.4g} that the HBM bandwidth of "
                       f"{fleet.num_gpus} {fleet.gpu} streams (weights + KV read every decode step)")
    return out


def check_latencies(figures: Mapping[str, Any], what: str, fleet: Fleet | None = None) -> list[str]:
    """P50 <= P90 <= P99 for every latency in a summary (``ttft_s``: {mean, p50, p90, p99}, ...), all
    non-negative, and, with ``fleet``, no TPOT below one weight read per step."""
    out = []
    for metric in LATENCY_METRICS:
        stats = figures.get(f"{metric}_s")
        if not stats:
            continue
        quantiles = [stats.get(q) for q in ("p50", "p90", "p99")]
        if any(q is None or (isinstance(q, float) and math.isnan(q)) for q in quantiles):
            continue
        if any(q < 0 for q in quantiles):
            out.append(f"{what}: negative {metric.upper()} quantile {quantiles}")
        if not quantiles[0] <= quantiles[1] * (1 + SLACK) or not quantiles[1] <= quantiles[2] * (1 + SLACK):
            out.append(f"{what}: {metric.upper()} P50 {quantiles[0]:.4g} s, P90 {quantiles[1]:.4g} s, "
                       f"P99 {quantiles[2]:.4g} s are out of order")
        if metric == "tpot" and fleet is not None and quantiles[0] > 0 and math.isfinite(quantiles[0]):
            floor = fleet.tpot_floor_s()
            if quantiles[0] < floor * (1 - SLACK):
                out.append(f"{what}: P50 TPOT {quantiles[0] * 1e3:.3g} ms is faster than reading the weights once "
                           f"per step allows on {fleet.gpu} ({floor * 1e3:.3g} ms)")
    return out


def check_summary(fleet: Fleet, load: Load, summary: Mapping[str, Any], what: str) -> list[str]:
    """Every figure of a prediction's summary (estimate or simulation, as ``to_dict`` writes it):
    its throughput and token rates, KV utilization, latency quantiles, and each class's."""
    out = []
    rate = summary.get("requests_per_s")
    if rate:
        computed_prompt = (summary.get("input_tokens_per_s") or 0.0) / rate * load.computed_prompt_share
        output = (summary.get("output_tokens_per_s") or 0.0) / rate
        measured = Load(computed_prompt, output, 1.0, load.shortest_context_tokens)
        out += check_rate(fleet, measured, rate, what)
        if (summary.get("goodput_requests_per_s") or 0.0) > rate * (1 + SLACK):
            out.append(f"{what}: goodput {summary['goodput_requests_per_s']:.4g} exceeds the {rate:.4g} requests/s served")
    kv = summary.get("kv_utilization")
    if kv is not None and not (-SLACK <= kv <= 1 + SLACK):
        out.append(f"{what}: KV utilization {kv:.3g} is outside [0, 1]")
    out += check_latencies(summary, what, fleet)
    classes = summary.get("classes") or {}
    for name, figures in classes.items():
        out += check_latencies(figures, f"{what}, class {name}")
    if classes and rate:
        total = sum(c.get("requests_per_s") or 0.0 for c in classes.values())
        if total > rate * (1 + 1e-3):
            out.append(f"{what}: the classes' {total:.4g} requests/s exceed the {rate:.4g} served")
    return out


def check_memory(fleet: Fleet, what: str) -> list[str]:
    """Weights and the KV pool of every engine within its GPUs' memory."""
    out = []
    for g in fleet.groups:
        used = g.weights_bytes_per_gpu + max(g.kv_cache_bytes_per_gpu, 0.0)
        if used > g.gpu_memory_bytes * (1 + SLACK):
            out.append(f"{what}: weights {g.weights_bytes_per_gpu / 2**30:.2f} GiB + KV pool "
                       f"{g.kv_cache_bytes_per_gpu / 2**30:.2f} GiB exceed the {g.gpu_memory_bytes / 2**30:.2f} GiB "
                       f"of a {fleet.gpu}")
    return out


def check_steps(fleet: Fleet, prefill_tokens: int, prefill_s: float, decode_step_s: float, what: str) -> list[str]:
    """Step times of one engine: a prefill of ``prefill_tokens`` no faster than its FLOPs at the peak
    of the engine's GPUs, a decode step no faster than one read of its weights."""
    out = []
    gpus = fleet.groups[0].gpus if fleet.groups else fleet.num_gpus
    floor = fleet.flops_per_token * prefill_tokens / (fleet.peak_flops * gpus)
    if prefill_s < floor * (1 - SLACK):
        out.append(f"{what}: a prefill of {prefill_tokens} tokens in {prefill_s * 1e3:.3g} ms beats the "
                   f"{floor * 1e3:.3g} ms its FLOPs take at the {fleet.math_dtype} peak of {gpus} {fleet.gpu}")
    step_floor = fleet.tpot_floor_s() * fleet.tokens_per_step
    if decode_step_s < step_floor * (1 - SLACK):
        out.append(f"{what}: a decode step of {decode_step_s * 1e3:.3g} ms beats one read of the weights "
                   f"({step_floor * 1e3:.3g} ms) on {fleet.gpu}")
    return out
