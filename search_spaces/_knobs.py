"""The knobs: one small class per deployment setting the search can turn.

A knob has a name (its key under ``space:`` and its Optuna parameter name), a default domain
built from the job's context, an optional condition on the knobs before it (``active``), and a
``coerce`` that checks one user-given value. Knobs are visited in :data:`KNOBS` order, so a
condition may read any knob listed earlier.
"""

from __future__ import annotations

from typing import Any, ClassVar, get_args

from ..costmodels.deployment import ROUTER, RouterPolicy
from ..costmodels.quantization import SCHEMES
from ..costmodels.engines import DEFAULT_ENGINE, get_engine
from ._context import SpaceContext
from ._domains import Choices, Domain, FloatRange, IntRange, Value

DISAGGREGATED = "disaggregated"
AGGREGATED = "aggregated"
SPECULATION_OFF = "off"
ROUTERS = get_args(RouterPolicy)


class Knob:
    """Base class of a search-space knob."""

    name: ClassVar[str]
    help: ClassVar[str]

    def default_domain(self, ctx: SpaceContext) -> Domain:
        raise NotImplementedError

    def active(self, values: dict[str, Value]) -> bool:
        """Whether the knob applies, given the values of the knobs before it."""
        return True

    def coerce(self, value: Any) -> Value:
        """Check and convert one value a user wrote (raise ValueError with the reason)."""
        return value


class _IntKnob(Knob):
    def coerce(self, value: Any) -> Value:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        if value < 1:
            raise ValueError(f"must be at least 1, got {value}")
        return value


class _BoolKnob(Knob):
    def coerce(self, value: Any) -> Value:
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return value


class _NameKnob(Knob):
    def coerce(self, value: Any) -> Value:
        if not isinstance(value, str):
            raise ValueError(f"expected a name, got {value!r}")
        return value


class ModelKnob(_NameKnob):
    name = "model"
    help = "the main model or one of the listed alternatives"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices(tuple(ctx.models))


class GPUKnob(_NameKnob):
    name = "gpu"
    help = "GPU type"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices(tuple(ctx.gpus))

    def coerce(self, value: Any) -> Value:
        return super().coerce(value).lower()


class ModeKnob(_NameKnob):
    name = "mode"
    help = "aggregated serving, or prefill/decode disaggregation"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices((AGGREGATED, DISAGGREGATED))


def _tp_sizes(ctx: SpaceContext) -> tuple[int, ...]:
    """Powers of two up to the largest node that divide some candidate model's heads."""
    node = max(ctx.node_size(gpu) for gpu in ctx.gpus)
    sizes = [2**i for i in range(8) if 2**i <= node]
    return tuple(s for s in sizes if any(m.spec.num_attention_heads % s == 0 for m in ctx.models.values()))


class TensorParallelKnob(_IntKnob):
    name = "tp"
    help = "tensor parallel size of an aggregated instance"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices(_tp_sizes(ctx))

    def active(self, values: dict[str, Value]) -> bool:
        return values.get("mode", AGGREGATED) == AGGREGATED


def _has_moe(ctx: SpaceContext) -> bool:
    return any(m.spec.moe is not None for m in ctx.models.values())


class DataParallelKnob(_IntKnob):
    """vLLM's --data-parallel-size: searched for MoE models (attention DP x TP, experts over all ranks);
    a dense model's DP ranks are replicas, which the search derives from the traffic."""

    name = "data_parallel_size"
    help = "data-parallel ranks of an aggregated MoE instance (experts span data_parallel_size x tp GPUs)"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices((1, 2, 4, 8, 16) if _has_moe(ctx) else (1,))

    def active(self, values: dict[str, Value]) -> bool:
        return values.get("mode", AGGREGATED) == AGGREGATED


class ExpertParallelKnob(_BoolKnob):
    name = "enable_expert_parallel"
    help = "whole experts per GPU (vLLM --enable-expert-parallel) instead of tensor-parallel slices (MoE models)"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices((False, True) if _has_moe(ctx) else (False,))

    def active(self, values: dict[str, Value]) -> bool:
        return values.get("mode", AGGREGATED) == AGGREGATED


class _DisaggregatedKnob(_IntKnob):
    def active(self, values: dict[str, Value]) -> bool:
        return values.get("mode", AGGREGATED) == DISAGGREGATED


class PrefillInstancesKnob(_DisaggregatedKnob):
    name = "prefill_instances"
    help = "prefill instances per replica (the P of P:D)"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return IntRange(1, 4)


class DecodeInstancesKnob(_DisaggregatedKnob):
    name = "decode_instances"
    help = "decode instances per replica (the D of P:D)"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return IntRange(1, 4)


class PrefillTensorParallelKnob(_DisaggregatedKnob):
    name = "prefill_tp"
    help = "tensor parallel size of a prefill instance"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices(_tp_sizes(ctx))


class DecodeTensorParallelKnob(_DisaggregatedKnob):
    name = "decode_tp"
    help = "tensor parallel size of a decode instance"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices(_tp_sizes(ctx))


class PipelineParallelKnob(_IntKnob):
    name = "pp"
    help = "pipeline stages, one node each; searched only when a model's weights overflow a node"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        for model in ctx.models.values():
            for gpu in ctx.gpus.values():
                node_bytes = ctx.node_size(gpu.name) * gpu.memory_bytes
                if model.spec.num_params * model.spec.dtype_bytes > 0.9 * node_bytes:
                    return Choices((1, 2, 4))
        return Choices((1,))


class QuantizationKnob(_NameKnob):
    name = "quantization"
    help = ("weight quantization: the schemes some candidate model can be served in (16-bit, fp8 quantized "
            "by vLLM at start-up, and pre-quantized checkpoints: int8, w8a16, awq, gptq, nvfp4, mxfp4)")
    ORDER: ClassVar[tuple[str, ...]] = ("bf16", "fp16", "fp8", "int8", "w8a16", "awq", "gptq", "nvfp4", "mxfp4")

    def default_domain(self, ctx: SpaceContext) -> Domain:
        servable = {scheme for m in ctx.models.values() for scheme in m.weights}
        return Choices(tuple(s for s in self.ORDER if s in servable))

    def coerce(self, value: Any) -> Value:
        value = super().coerce(value).lower()
        if value not in SCHEMES:
            raise ValueError(f"unknown quantization '{value}'; known: {', '.join(self.ORDER)}")
        return value


class KVCacheDTypeKnob(_NameKnob):
    name = "kv_cache_dtype"
    help = "KV cache dtype: auto (the model's) or fp8"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices(("auto", "fp8"))


class MaxNumSeqsKnob(_IntKnob):
    name = "max_num_seqs"
    help = "most sequences in a batch (vLLM --max-num-seqs)"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return IntRange(8, 1024, log=True)


class MaxNumBatchedTokensKnob(_IntKnob):
    name = "max_num_batched_tokens"
    help = "token budget of a step, the prefill chunk size (vLLM --max-num-batched-tokens)"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return IntRange(256, 32768, log=True)


class ChunkedPrefillKnob(_BoolKnob):
    name = "enable_chunked_prefill"
    help = "chunked prefill on or off"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices((True, False))


class SchedulingPolicyKnob(_NameKnob):
    """vLLM's --scheduling-policy: searched when the traffic's classes have different priorities
    (without them ``priority`` schedules as ``fcfs`` does)."""

    name = "scheduling_policy"
    help = "vLLM --scheduling-policy: fcfs, or priority (searched when the traffic's classes have different priorities)"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        # The search deploys the default engine; its first policy is what it runs unless told.
        policies = get_engine(DEFAULT_ENGINE).scheduling_policies
        return Choices(policies if ctx.priority_classes else policies[:1])

    def coerce(self, value: Any) -> Value:
        value = super().coerce(value)
        policies = get_engine(DEFAULT_ENGINE).scheduling_policies
        if value not in policies:
            raise ValueError(f"expected one of {', '.join(policies)}, got {value!r}")
        return value


class RouterKnob(_NameKnob):
    """How requests are spread over the replicas: the vLLM Router's ``round_robin`` unless the workload
    lists others (``power_of_two``); the export starts the router policy that was simulated."""

    name = "router"
    help = "router policy over the replicas: round_robin (default) or power_of_two, as vllm-router --policy"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices((ROUTER,))

    def coerce(self, value: Any) -> Value:
        value = super().coerce(value)
        if value not in ROUTERS:
            raise ValueError(f"expected one of {', '.join(ROUTERS)}, got {value!r}")
        return value


class SpeculationKnob(_NameKnob):
    name = "speculation"
    help = "speculative decoding: off, or one of the workload's speculation methods"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return Choices((SPECULATION_OFF, *ctx.speculation))


class SpeculativeTokensKnob(_IntKnob):
    name = "num_speculative_tokens"
    help = "tokens drafted per step (g) when speculation is on"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return IntRange(1, 6)

    def active(self, values: dict[str, Value]) -> bool:
        return values.get("speculation", SPECULATION_OFF) != SPECULATION_OFF


class ReplicasKnob(_IntKnob):
    """Replicas are derived from the traffic unless a user pins or narrows them."""

    name = "replicas"
    help = "replicas; derived from the traffic (capacity, then estimate) unless set here"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return IntRange(1, ctx.max_gpus)


class HeadroomKnob(Knob):
    name = "headroom"
    help = "replicas beyond what the traffic needs, as a share (0.5 = 50% more): buys latency with cost"

    def default_domain(self, ctx: SpaceContext) -> Domain:
        return FloatRange(0.0, 2.0, 0.25)

    def coerce(self, value: Any) -> Value:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)


KNOBS: tuple[Knob, ...] = (
    ModelKnob(), GPUKnob(), ModeKnob(), TensorParallelKnob(), DataParallelKnob(), ExpertParallelKnob(),
    PrefillInstancesKnob(), DecodeInstancesKnob(),
    PrefillTensorParallelKnob(), DecodeTensorParallelKnob(), PipelineParallelKnob(), QuantizationKnob(),
    KVCacheDTypeKnob(), MaxNumSeqsKnob(), MaxNumBatchedTokensKnob(), ChunkedPrefillKnob(), SchedulingPolicyKnob(),
    RouterKnob(), SpeculationKnob(),
    SpeculativeTokensKnob(), HeadroomKnob(),
)
"""The knobs searched by default, in the order they are suggested. ``replicas`` is searched only
when the workload sets it (:class:`ReplicasKnob`); otherwise ``headroom`` scales the derived count."""
