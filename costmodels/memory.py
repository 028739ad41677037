"""GPU memory: weights, KV cache per token, and the KV capacity vLLM leaves under its budget.

vLLM (V1, checked against 0.19 start-up logs in shared/data/measured/memory) sizes the KV pool as

    kv_cache_bytes = gpu_memory_utilization x total_memory
                     - weights - peak activations - non-torch memory growth during profiling

per GPU, then cuts it into paged blocks of ``block_size`` tokens. CUDA graphs and the CUDA context
live outside that budget (in the 1 - utilization headroom). Models that mix sliding-window and full
attention layers (Gemma 2/3, gpt-oss) are laid out in KV-cache groups of equal layer count: a block
id is shared by one layer of every group, and the capacity vLLM reports is
``blocks x block_size / groups`` tokens.

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.hardware import get_gpu
    >>> plan = plan_memory(get_model("llama-3.1-8b"), get_gpu("h100"), gpu_memory_utilization=0.9)
    >>> plan.kv_bytes_per_token / 1024           # KiB per token (seed section 3.2)
    128.0
    >>> plan.fits
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .architectures import ModelSpec
from .errors import InputError
from .hardware import GIB, GPUSpec
from .quantization import MODEL_DTYPE_BYTES, check_supported, kv_bytes_per_value
from .engines import DEFAULT_ENGINE, get_engine
from .weights import own_scheme

DEFAULT_BLOCK_SIZE = get_engine(DEFAULT_ENGINE).block_size

# vLLM's sampler profiling run materialises fp32 logits for max_num_seqs sequences over the whole
# vocabulary, plus the softmax/top-k/top-p working copies: 3.7 logits-sized buffers, fitted to the
# three Gemma-2 rows of the 0.19 memory profiles (whose 256k vocabulary makes the sampler the peak).
SAMPLER_WORKING_COPIES = 3.7
# Forward-pass activations per token at the profiling batch: gate/up output, activation output and
# a few hidden-size buffers in the model dtype (bytes = 2 x (3 x intermediate + 4 x hidden)).
FORWARD_INTERMEDIATE_COPIES = 3
FORWARD_HIDDEN_COPIES = 4
# Non-torch allocations made during profiling (cuBLAS workspaces, NCCL buffers when TP > 1): 0.25 GiB
# in the single-GPU logs; aiconfigurator reserves 0.34-0.39 GB more for NCCL at TP >= 2.
NON_TORCH_BYTES = 0.25 * GIB
NCCL_EXTRA_BYTES = 0.36e9
# CUDA context created before profiling (0.51 GiB on H100); outside the utilization budget.
CUDA_CONTEXT_BYTES = 0.51 * GIB
# CUDA graph pool: about 0.3 GiB plus 18 MiB per layer in the 0.19 logs (0.67-1.57 GiB).
CUDA_GRAPH_BASE_BYTES = 0.3 * GIB
CUDA_GRAPH_PER_LAYER_BYTES = 0.018 * GIB


@dataclass(frozen=True)
class KVLayout:
    """How vLLM groups layers for the paged KV cache."""

    full_layers: int
    sliding_layers: int
    sliding_window: int | None
    group_size: int
    full_groups: int
    sliding_groups: int

    @property
    def groups(self) -> int:
        return self.full_groups + self.sliding_groups


def kv_layout(model: ModelSpec, num_layers: int | None = None) -> KVLayout:
    """Group layers the way vLLM's hybrid KV-cache manager does (equal-size groups)."""
    layers = num_layers if num_layers is not None else model.num_layers
    sliding = round(model.num_sliding_layers * layers / model.num_layers) if model.sliding_window else 0
    full = layers - sliding
    if sliding == 0 or full == 0:
        return KVLayout(full, sliding, model.sliding_window if sliding else None, layers,
                        1 if full else 0, 1 if sliding else 0)
    size = min(full, sliding)
    return KVLayout(full, sliding, model.sliding_window, size, math.ceil(full / size), math.ceil(sliding / size))


@dataclass(frozen=True)
class WeightBreakdown:
    """Weight bytes of one GPU of the largest pipeline stage, and of the whole deployment."""

    per_gpu_bytes: float
    total_bytes: float
    quantized_params: float
    unquantized_params: float


def kv_heads_per_rank(model: ModelSpec, tp: int) -> float:
    """KV heads each TP rank stores: heads are split, and replicated once TP exceeds them."""
    if model.mla is not None:
        return 1.0  # the latent is not split across ranks
    return max(model.num_kv_heads / tp, 1.0)


def weight_bytes(model: ModelSpec, quantization: str, tp: int = 1, pp: int = 1, dp: int = 1) -> WeightBreakdown:
    """Weight bytes per GPU and in total (one copy of the model) for a quantization scheme and TP, PP, DP degree.

    The scheme applies to the linear layers the checkpoint quantizes (the rest, such as the attention
    of NVIDIA's NVFP4 releases or everything but gpt-oss's mxfp4 experts, stays in the model dtype:
    :meth:`~servopt.costmodels.architectures.ModelSpec.unquantized_layers`); embeddings, LM head and
    norms stay in the model dtype. K/V projections are replicated on ranks
    when TP exceeds the KV heads. Embeddings sit on the first stage and the LM head on the last.
    With ``dp`` data-parallel ranks every rank holds the attention, dense and shared-expert weights
    of its TP shard, and the routed experts are split over all ``dp x tp`` GPUs (vLLM's MoE group:
    tensor-parallel slices of every expert, or whole experts with expert parallelism; same bytes).
    """
    _check_parallel(model, tp, pp)
    if dp < 1:
        raise InputError(f"data_parallel_size must be at least 1 (got {dp})")
    scheme = model.weight_scheme(quantization)  # a checkpoint's own group size and zero points
    dense_bytes = MODEL_DTYPE_BYTES[model.dtype]
    h = model.hidden_size
    attention = model.attention_params_per_layer
    if model.mla is None:
        replicated_kv = 2 * h * model.head_dim * (kv_heads_per_rank(model, tp) * tp - model.num_kv_heads)
        attention += replicated_kv
    mlp_layers = model.num_dense_mlp_layers * model.dense_mlp_params
    experts = 0
    if model.moe is not None:
        experts = model.num_moe_layers * model.moe.num_experts * model.expert_params
        mlp_layers += model.num_moe_layers * model.moe_layer_params - experts
    linear = model.num_layers * attention + mlp_layers
    # Layers the checkpoint leaves in the model dtype (ModelSpec.unquantized_layers). mxfp4 quantizes
    # no linear layer at all (vLLM has no mxfp4 linear method): every weight but the experts' is 16-bit.
    if quantization == "mxfp4":
        unquantized_linear = linear
    else:
        unquantized_linear = min(_unquantized_linear_params(model, quantization, tp), linear)
    quantized = linear + experts - unquantized_linear
    embed = model.embedding_params
    head = model.lm_head_params
    unquantized = unquantized_linear + embed + head + model.norm_params + model.extra_params
    total = quantized * scheme.weight_bytes_per_param + unquantized * dense_bytes
    # Per GPU: the layers of one stage split over TP (routed experts over the MoE group of dp x tp GPUs),
    # plus the vocabulary-parallel embedding or head.
    expert_bytes = experts * scheme.weight_bytes_per_param
    layer_bytes = ((quantized * scheme.weight_bytes_per_param - expert_bytes + unquantized_linear * dense_bytes) / (tp * pp)
                   + expert_bytes / (dp * tp * pp))
    ends = max(embed + (0 if pp > 1 else head), head if pp > 1 else 0) * dense_bytes / tp
    rest = (model.norm_params / pp + model.extra_params / tp) * dense_bytes
    # Precomputed RoPE tables (large for Gemma 3's scaled RoPE) are replicated on every GPU.
    rope = model.rope_cache_bytes
    return WeightBreakdown(layer_bytes + ends + rest + rope, total + rope * tp * pp, float(quantized), float(unquantized))


def _unquantized_linear_params(model: ModelSpec, quantization: str, tp: int) -> float:
    """Parameters of the linear layers served in the model dtype, by family (the roofline's names)."""
    kept = model.unquantized_layers(quantization)
    if not kept:
        return 0.0
    h = model.hidden_size
    up = 2 if model.gated_mlp else 1
    shared = model.moe.num_shared_experts * model.moe.shared_expert_intermediate_size if model.moe else 0
    per_layer = {"o_proj": model.attn_out_dim * h, "gate_up_proj": up * h * model.intermediate_size,
                 "down_proj": h * model.intermediate_size, "shared_gate_up": up * h * shared, "shared_down": h * shared}
    if model.mla is not None:
        mla, heads = model.mla, model.num_attention_heads
        q_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        per_layer |= {"q_a_proj": h * (mla.q_lora_rank or 0), "q_b_proj": (mla.q_lora_rank or 0) * heads * q_head,
                      "q_proj": h * heads * q_head, "kv_a_proj": h * (mla.kv_lora_rank + mla.qk_rope_head_dim),
                      "k_up_absorb": mla.kv_lora_rank * heads * mla.qk_nope_head_dim,
                      "v_up_absorb": mla.kv_lora_rank * heads * mla.v_head_dim}
    else:
        # K/V replicated on ranks when TP exceeds the KV heads, as weight_bytes counts them.
        per_layer["qkv_proj"] = h * (model.q_dim + 2 * model.head_dim * kv_heads_per_rank(model, tp) * tp)
    return float(sum(layers * per_layer[name] for name, layers in kept.items()))


def kv_bytes_per_token_per_layer_per_gpu(model: ModelSpec, kv_cache_dtype: str, tp: int = 1) -> float:
    """Bytes one token adds to one layer's KV cache on one TP rank ('auto' as vLLM resolves it
    for this checkpoint: fp8 when it carries FP8 KV scales)."""
    value_bytes = kv_bytes_per_value(model.kv_cache_dtype(kv_cache_dtype), model.dtype)
    if model.mla is not None:
        return model.mla.cache_dim * value_bytes
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim * value_bytes


def kv_bytes_per_token(model: ModelSpec, kv_cache_dtype: str = "auto", tp: int = 1) -> float:
    """KV bytes per token of context for the whole model, summed over TP ranks.

    2 x layers x kv_heads x head_dim x bytes (seed section 3.1); MLA: layers x (d_c + d_R) x bytes,
    stored on every rank.
    """
    return model.num_layers * tp * kv_bytes_per_token_per_layer_per_gpu(model, kv_cache_dtype, tp)


def activation_peak_bytes(model: ModelSpec, max_num_batched_tokens: int, max_num_seqs: int, tp: int = 1) -> float:
    """Peak activation memory of vLLM's profiling run on one GPU: forward pass or sampler."""
    dtype_bytes = MODEL_DTYPE_BYTES[model.dtype]
    intermediate = model.intermediate_size
    if model.moe is not None:
        intermediate = max(
            model.intermediate_size if model.num_dense_mlp_layers else 0,
            model.moe.experts_per_token * model.moe.expert_intermediate_size,
        )
    per_token = dtype_bytes * (FORWARD_INTERMEDIATE_COPIES * intermediate / tp + FORWARD_HIDDEN_COPIES * model.hidden_size)
    forward = max_num_batched_tokens * per_token
    sampler = SAMPLER_WORKING_COPIES * max_num_seqs * model.vocab_size * 4
    return max(forward, sampler)


def cuda_graph_bytes(model: ModelSpec, pp: int = 1) -> float:
    """Memory of the captured CUDA graphs on one GPU (outside the utilization budget)."""
    return CUDA_GRAPH_BASE_BYTES + CUDA_GRAPH_PER_LAYER_BYTES * model.num_layers / pp


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory breakdown of one replica and the KV capacity it leaves (with data parallelism:
    the KV capacity of each of its ``dp`` ranks, which keep their own caches)."""

    model: str
    gpu: str
    tp: int
    pp: int
    quantization: str
    kv_cache_dtype: str
    gpu_memory_utilization: float
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    gpu_memory_bytes: float
    weights_bytes: float
    weights_bytes_per_gpu: float
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    activation_peak_bytes_per_gpu: float
    non_torch_bytes_per_gpu: float
    cuda_graph_bytes_per_gpu: float
    extra_weights_bytes_per_gpu: float
    budget_bytes_per_gpu: float
    kv_cache_bytes_per_gpu: float
    kv_cache_blocks: int
    kv_capacity_tokens: int
    layout: KVLayout
    dp: int = 1
    problems: tuple[str, ...] = field(default_factory=tuple)
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fits(self) -> bool:
        return not self.problems

    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def headroom_bytes_per_gpu(self) -> float:
        """Memory left on a GPU after the budget, CUDA graphs and the CUDA context."""
        return self.gpu_memory_bytes - self.budget_bytes_per_gpu - self.cuda_graph_bytes_per_gpu - CUDA_CONTEXT_BYTES

    def blocks_needed(self, context_tokens: np.ndarray | int, in_flight_tokens: int = 0) -> np.ndarray:
        """Paged blocks one request of ``context_tokens`` occupies.

        Sliding-window groups keep only the blocks that the window (plus ``in_flight_tokens``
        being computed in the current step) still covers; vLLM frees the rest.
        """
        tokens = np.asarray(context_tokens)
        full = -(-tokens // self.block_size)
        blocks = self.layout.full_groups * full
        if self.layout.sliding_groups:
            window = self.layout.sliding_window - 1 + in_flight_tokens
            window_blocks = -(-window // self.block_size) + 1
            blocks = blocks + self.layout.sliding_groups * np.minimum(full, window_blocks)
        return blocks

    def kv_tokens_needed(self, context_tokens: np.ndarray | int) -> np.ndarray:
        """Capacity, in the tokens vLLM reports, that a request of this context occupies."""
        return self.blocks_needed(context_tokens) * self.block_size / self.layout.groups

    def kv_bytes_per_request(self, context_tokens: int) -> float:
        """KV bytes of one request at this context, whole model (sliding windows applied)."""
        return float(self.kv_tokens_needed(context_tokens)) * self.kv_bytes_per_token

    def max_concurrency(self, context_tokens: int) -> float:
        """Requests of this context that fit in the KV cache at once, as vLLM reports it: a
        sliding-window group is charged its window plus a full step of batched tokens."""
        blocks = float(self.blocks_needed(context_tokens, in_flight_tokens=self.max_num_batched_tokens))
        return self.kv_cache_blocks / blocks if blocks else float("inf")


def _check_parallel(model: ModelSpec, tp: int, pp: int) -> None:
    if tp < 1 or pp < 1:
        raise InputError(f"tp and pp must be at least 1 (got tp={tp}, pp={pp})")
    if model.num_attention_heads % tp:
        raise InputError(
            f"tp={tp} does not divide the {model.num_attention_heads} attention heads of {model.name}; "
            f"choose a divisor such as {', '.join(str(d) for d in _divisors(model.num_attention_heads) if d <= 16)}"
        )
    if model.num_layers < pp:
        raise InputError(f"pp={pp} exceeds the {model.num_layers} layers of {model.name}")


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def kv_capacity(model: ModelSpec, kv_cache_bytes_per_gpu: float, kv_cache_dtype: str = "auto", tp: int = 1,
                pp: int = 1, block_size: int = DEFAULT_BLOCK_SIZE,
                extra_kv_bytes_per_token_per_gpu: float = 0.0) -> tuple[int, int, KVLayout]:
    """Paged blocks and the token capacity vLLM reports for a KV pool of this size per GPU.

    A block id covers ``block_size`` tokens in one layer of every KV-cache group; the capacity
    vLLM logs is ``blocks x block_size / groups``.
    """
    layers_per_stage = math.ceil(model.num_layers / pp)
    layout = kv_layout(model, layers_per_stage)
    per_layer = kv_bytes_per_token_per_layer_per_gpu(model, kv_cache_dtype, tp)
    block_bytes = block_size * (per_layer * layout.group_size + extra_kv_bytes_per_token_per_gpu)
    blocks = max(int(kv_cache_bytes_per_gpu // block_bytes), 0)
    return blocks, blocks * block_size // layout.groups, layout


def plan_memory(
    model: ModelSpec,
    gpu: GPUSpec,
    *,
    quantization: str | None = None,
    kv_cache_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    gpu_memory_utilization: float | None = None,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_model_len: int | None = None,
    extra_weights_bytes_per_gpu: float = 0.0,
    extra_kv_bytes_per_token_per_gpu: float = 0.0,
    kv_cache_memory_bytes: float | None = None,
    framework: str = DEFAULT_ENGINE,
) -> MemoryPlan:
    """Memory of one replica (tp x pp x dp GPUs) as vLLM lays it out (:func:`weight_bytes` for ``dp``).

    ``quantization`` defaults to the checkpoint's own format (16-bit weights for an unquantized one);
    the limits and ``gpu_memory_utilization`` to the ``framework`` engine's defaults for the GPU
    (:meth:`~servopt.costmodels.engines.EngineRules.batch_limits`), which also sizes the KV pool.
    ``extra_*`` carry a speculative draft model's weights and KV, which share the pool.
    ``max_model_len`` (default: the model's context) must fit in the KV cache, as vLLM checks.
    ``kv_cache_memory_bytes`` (vLLM's ``--kv-cache-memory``, per GPU) sizes the KV cache directly
    instead of what ``gpu_memory_utilization`` leaves.
    """
    engine = get_engine(framework)
    if gpu_memory_utilization is None:
        gpu_memory_utilization = engine.memory_fraction()
    if not 0 < gpu_memory_utilization <= 1:
        raise InputError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    default_tokens, default_seqs = engine.batch_limits(gpu)
    max_num_batched_tokens = max_num_batched_tokens or default_tokens
    max_num_seqs = max_num_seqs or default_seqs
    if block_size < 1 or max_num_batched_tokens < 1 or max_num_seqs < 1:
        raise InputError("block_size, max_num_batched_tokens and max_num_seqs must be positive")
    # A pre-quantized checkpoint is served in its own format unless another scheme is asked for.
    quantization = quantization or own_scheme(model)
    check_supported(quantization, gpu)
    weights = weight_bytes(model, quantization, tp, pp, dp)
    layers_per_stage = math.ceil(model.num_layers / pp)
    per_layer = kv_bytes_per_token_per_layer_per_gpu(model, kv_cache_dtype, tp)
    activations = activation_peak_bytes(model, max_num_batched_tokens, max_num_seqs, tp)
    non_torch = NON_TORCH_BYTES + (NCCL_EXTRA_BYTES if tp * pp * dp > 1 else 0.0)
    budget = gpu_memory_utilization * gpu.memory_bytes
    kv_cache = engine.kv_pool_bytes(gpu.memory_bytes, gpu_memory_utilization, weights.per_gpu_bytes,
                                    extra_weights_bytes_per_gpu, activations, non_torch)
    if kv_cache_memory_bytes is not None:
        kv_cache = kv_cache_memory_bytes
    blocks, capacity, layout = kv_capacity(model, kv_cache, kv_cache_dtype, tp, pp, block_size,
                                           extra_kv_bytes_per_token_per_gpu)
    problems = []
    if kv_cache_memory_bytes is not None:
        # vLLM sizes the pool as told and ignores gpu_memory_utilization; weights, activations and the
        # pool must still fit the GPU (70B bf16 weights with a 4 GiB pool do not fit one L40S).
        needed = weights.per_gpu_bytes + extra_weights_bytes_per_gpu + activations + non_torch + kv_cache
        if needed > gpu.memory_bytes:
            problems.append(
                f"weights ({weights.per_gpu_bytes / GIB:.1f} GiB/GPU), activations ({activations / GIB:.1f} GiB) and "
                f"the KV cache kv_cache_memory_gib asks for ({kv_cache / GIB:.1f} GiB) need {needed / GIB:.1f} GiB, more "
                f"than the {gpu.memory_gib:.0f} GiB of {gpu.name}")
    elif kv_cache <= 0:
        problems.append(
            f"weights ({weights.per_gpu_bytes / GIB:.1f} GiB/GPU) and activations ({activations / GIB:.1f} GiB) "
            f"exceed the {gpu_memory_utilization:.2f} x {gpu.memory_gib:.0f} GiB budget of {gpu.name}"
        )
    context = max_model_len or model.max_context
    plan = MemoryPlan(
        model=model.name, gpu=gpu.name, tp=tp, pp=pp, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
        gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs,
        gpu_memory_bytes=gpu.memory_bytes, weights_bytes=weights.total_bytes,
        weights_bytes_per_gpu=weights.per_gpu_bytes,
        kv_bytes_per_token=kv_bytes_per_token(model, kv_cache_dtype, tp),
        kv_bytes_per_token_per_gpu=per_layer * layers_per_stage + extra_kv_bytes_per_token_per_gpu,
        activation_peak_bytes_per_gpu=activations, non_torch_bytes_per_gpu=non_torch,
        cuda_graph_bytes_per_gpu=cuda_graph_bytes(model, pp), extra_weights_bytes_per_gpu=extra_weights_bytes_per_gpu,
        budget_bytes_per_gpu=budget, kv_cache_bytes_per_gpu=max(kv_cache, 0.0), kv_cache_blocks=blocks,
        kv_capacity_tokens=capacity, layout=layout, dp=dp,
    )
    if not problems and plan.max_concurrency(context) < 1:
        problems.append(
            f"one request of max_model_len {context} tokens does not fit in the KV cache ({capacity} tokens); "
            "lower max_model_len, quantize weights or KV, or raise tp"
        )
    warnings = []
    if plan.headroom_bytes_per_gpu < 0:
        # vLLM starts (the budget is below free memory) but CUDA-graph capture may then run out.
        warnings.append(
            f"gpu_memory_utilization {gpu_memory_utilization} leaves {plan.headroom_bytes_per_gpu / GIB:+.2f} GiB for "
            f"CUDA graphs and the CUDA context (about {(plan.cuda_graph_bytes_per_gpu + CUDA_CONTEXT_BYTES) / GIB:.1f} "
            "GiB); lower it if graph capture runs out of memory"
        )
    return replace(plan, problems=tuple(problems), warnings=tuple(warnings))
