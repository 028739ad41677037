"""What the knobs and constraints need to know about a job: its models, GPUs, limits and budget.

The optimizer builds one :class:`SpaceContext` from a workload file; the search space reads it and
never parses files itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from ..costmodels.architectures import ModelSpec
from ..costmodels.hardware import GPUSpec
from ..costmodels.deployment import SpeculativeConfig
from ..costmodels.memory import MemoryPlan, plan_memory
from ..costmodels.speculation import DraftMemory, draft_memory
from ..costmodels.quantization import AccuracyTable


@dataclass(frozen=True)
class ModelChoice:
    """One model the search may serve.

    ``serve_id`` is what ``vllm serve`` loads; ``checkpoint_quantization`` is set when that id is a
    pre-quantized checkpoint (it then fixes the weight scheme); ``accuracy_drop_pct`` is its
    quality cost against the main model (0 for the main model).
    """

    key: str
    spec: ModelSpec
    serve_id: str
    checkpoint_quantization: str | None = None
    accuracy_drop_pct: float = 0.0


@dataclass(frozen=True)
class SpeculationChoice:
    """A speculative decoding method the search may use (``draft_model`` for draft-model methods)."""

    label: str
    method: str
    draft_model: str | None = None
    acceptance_rate: float | None = None


@dataclass(frozen=True, eq=False)
class SpaceContext:
    """Everything a knob or constraint reads. Memory plans are cached per configuration."""

    models: dict[str, ModelChoice]
    gpus: dict[str, GPUSpec]
    accuracy: AccuracyTable
    max_drop_pct: float
    max_model_len: dict[str, int]
    speculation: dict[str, SpeculationChoice] = field(default_factory=dict)
    gpus_per_node: int | None = None
    max_gpus: int = 64

    def node_size(self, gpu: str) -> int:
        return self.gpus_per_node or self.gpus[gpu].gpus_per_node

    def accuracy_drop_pct(self, model: str, quantization: str, kv_cache_dtype: str) -> float:
        choice = self.models[model]
        return choice.accuracy_drop_pct + self.accuracy.drop_pct(quantization, choice.spec.num_params, kv_cache_dtype)

    def memory_plan(self, model: str, gpu: str, quantization: str, kv_cache_dtype: str, tp: int, pp: int,
                    max_num_seqs: int, max_num_batched_tokens: int, gpu_memory_utilization: float,
                    speculation: str = "off", dp: int = 1) -> MemoryPlan:
        """The memory plan of one instance (a draft model's weights and KV share its pool; with ``dp``
        data-parallel ranks, one rank's)."""
        return _memory_plan(self, model, gpu, quantization, kv_cache_dtype, tp, pp, max_num_seqs,
                            max_num_batched_tokens, gpu_memory_utilization, speculation, dp)


@lru_cache(maxsize=4096)
def _memory_plan(ctx: SpaceContext, model: str, gpu: str, quantization: str, kv_cache_dtype: str, tp: int,
                 pp: int, max_num_seqs: int, max_num_batched_tokens: int, gpu_memory_utilization: float,
                 speculation: str, dp: int) -> MemoryPlan:
    spec = ctx.models[model].spec
    draft = DraftMemory(0.0, 0.0)
    if speculation != "off":
        choice = ctx.speculation[speculation]
        # The number of drafted tokens does not change what the drafter holds.
        config = SpeculativeConfig(method=choice.method, num_speculative_tokens=1, draft_model=choice.draft_model)
        draft = draft_memory(config, spec, kv_cache_dtype, tp)
    return plan_memory(
        spec, ctx.gpus[gpu], quantization=quantization, kv_cache_dtype=kv_cache_dtype, tp=tp, pp=pp, dp=dp,
        gpu_memory_utilization=gpu_memory_utilization, max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs, max_model_len=ctx.max_model_len[model],
        extra_weights_bytes_per_gpu=draft.weights_bytes_per_gpu,
        extra_kv_bytes_per_token_per_gpu=draft.kv_bytes_per_token_per_gpu,
    )


def example_context(model: str = "llama-3.1-8b", gpus: tuple[str, ...] = ("h100", "a100-80gb")) -> SpaceContext:
    """A small context for examples and tests: one model, catalog GPUs, ngram speculation."""
    from ..costmodels.architectures import resolve_model
    from ..costmodels.hardware import get_gpu
    from ..costmodels.quantization import builtin_accuracy_table

    resolved = resolve_model(model)
    return SpaceContext(
        models={model: ModelChoice(model, resolved.spec, resolved.spec.name, resolved.quantization)},
        gpus={name: get_gpu(name) for name in gpus},
        accuracy=builtin_accuracy_table(),
        max_drop_pct=3.0,
        max_model_len={model: 4096},
        speculation={"ngram": SpeculationChoice("ngram", "ngram")},
    )
