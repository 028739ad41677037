"""Roofline step time: how long one engine step takes for a given batch composition.

A step runs every layer once over the batch's tokens: the linear operators (QKV, O, gate/up, down,
MoE experts, LM head) see all T tokens of the step; attention sees each sequence's own context;
tensor parallelism adds two all-reduces per layer and pipeline parallelism a send per stage; with
data-parallel ranks (:mod:`.moe`) each rank's step is padded to the largest rank's token count, the
MoE layers compute the routed experts over every rank's tokens and add the dispatch and combine
collectives.
Each operator's time is ``max(FLOPs / (peak x eff), bytes / (bandwidth x eff)) + overhead`` (the profile may
round the corner of a GEMM's max) with efficiencies fitted to kernel microbenchmarks
(:class:`~servopt.costmodels.profile.PerformanceProfile`). These kernel sums are the basis functions
of a trained-physics step model (BLIS's shape, on measured kernels rather than datasheet peaks): the
profile's learned coefficients (:data:`~servopt.costmodels.profile.SERVING_COEFFICIENTS`) scale the
compute, memory and communication sides as a served engine runs them and add the costs no kernel
table measures (per step, layer, MoE layer and sequence on the GPU; the engine's CPU time, which
async scheduling hides behind the GPU).

There is one step formula, :meth:`StepCostModel._parts`: the event loop calls it on Python numbers
(:meth:`StepCostModel.step_s`), statistics over recorded steps and capacity sizing on numpy arrays
(:meth:`StepCostModel.step_time_s`), and a fixed decode batch's step time is that formula as a line
in the summed context (:meth:`StepCostModel.decode_line`). The token-count operators are tabulated
by T and attention reduces to a few coefficients, so the formula is plain arithmetic.

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> gpu = get_gpu("h100")
    >>> cost = StepCostModel(get_model("llama-3.1-8b"), gpu, PerformanceProfile.spec_default(gpu))
    >>> step = cost.step(Batch(decode_context=[2048] * 32))
    >>> step.bound, 0.005 < step.time_s < 0.05
    ('memory', True)
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from .architectures import ModelSpec
from .errors import InputError
from .hardware import GPUSpec
from .memory import kv_bytes_per_token_per_layer_per_gpu, kv_heads_per_rank, weight_bytes
from .moe import ExpertLayout, moe_kernel
from .profile import PerformanceProfile, cpu_wait_s, smooth_max
from .quantization import MODEL_DTYPE_BYTES, check_supported, math_dtype, runs_weight_only
from .engines import DEFAULT_ENGINE, get_engine
from .weights import own_scheme


def scalar_max(a, b):
    """``max(a, b)`` of two Python numbers, exactly as the built-in returns it (``a`` unless ``b`` is
    larger), at a third of its cost per call: the event loop's step formula takes several per step.

    >>> scalar_max(1, 2.5), scalar_max(3, 3.0), scalar_max(-0.0, 0.0)
    (2.5, 3, -0.0)
    """
    return b if b > a else a


def served_efficiency(efficiency: float, scale: float) -> float:
    """A microbenchmarked efficiency (a share of the datasheet peak) as served: over the fitted
    served-to-table ``scale``, never beyond the peak itself.

    >>> served_efficiency(0.9, 0.8), served_efficiency(0.6, 1.2)
    (1.0, 0.5)
    """
    return min(efficiency / scale, 1.0)


# Memory-bound kernels per layer outside the GEMMs and attention: two fused add+RMSNorm, RoPE,
# the gated activation and the KV-cache write (vLLM fuses each into one kernel).
ELEMENTWISE_KERNELS_PER_LAYER = 5
# Values a fused residual add + RMSNorm moves per hidden element: it reads the input and the
# residual and writes the new residual and the normalized output.
ADD_NORM_VALUES = 4


def activation_quant_bytes(m: np.ndarray | float, k: float, dynamic_per_tensor: bool) -> np.ndarray:
    """Bytes that quantizing an [m, k] bf16 activation to 8 bits moves on its own.

    vLLM's fp8 linear layer (``scaled_fp8_quant``) reads the bf16 input and writes 8-bit values; a
    dynamic per-tensor scale first needs the absolute maximum of the whole tensor, one more read.
    """
    passes = 2 if dynamic_per_tensor else 1
    return np.asarray(m, dtype=float) * k * (2.0 * passes + 1.0)


@dataclass(frozen=True)
class Batch:
    """The composition of one engine step.

    ``prefill_tokens[i]`` prompt tokens are computed for a sequence that already has
    ``prefill_offsets[i]`` tokens cached (a later chunk of a chunked prefill, or a prefix-cache hit).
    ``decode_context[j]`` is the cached context of a decoding sequence, which computes
    ``1 + num_speculative_tokens`` query tokens (the verify step of speculative decoding).
    """

    prefill_tokens: Sequence[int] = ()
    prefill_offsets: Sequence[int] = ()
    decode_context: Sequence[int] = ()
    num_speculative_tokens: int = 0

    def __post_init__(self) -> None:
        if len(self.prefill_offsets) not in (0, len(self.prefill_tokens)):
            raise InputError("prefill_offsets must be empty or match prefill_tokens in length")
        if any(t <= 0 for t in self.prefill_tokens) or any(c < 0 for c in self.decode_context):
            raise InputError("prefill chunks need positive token counts and decode contexts cannot be negative")
        if self.num_speculative_tokens < 0:
            raise InputError("num_speculative_tokens cannot be negative")


@dataclass(frozen=True)
class StepAggregates:
    """The sums of a batch that the step time depends on (arrays: one entry per step)."""

    num_tokens: np.ndarray
    num_sampled: np.ndarray
    decode_query_tokens: np.ndarray
    decode_context: np.ndarray
    decode_context_windowed: np.ndarray
    prefill_pairs: np.ndarray
    prefill_pairs_windowed: np.ndarray
    prefill_kv_tokens: np.ndarray
    prefill_kv_tokens_windowed: np.ndarray
    prefill_chunks: np.ndarray
    num_decode_seqs: np.ndarray


# The aggregates the step formula (StepCostModel._parts) reads, in its argument order.
_FORMULA_FIELDS = ("num_tokens", "num_sampled", "decode_query_tokens", "num_decode_seqs", "decode_context",
                   "decode_context_windowed", "prefill_pairs", "prefill_pairs_windowed", "prefill_kv_tokens",
                   "prefill_kv_tokens_windowed", "prefill_chunks")


@dataclass(frozen=True)
class StepTime:
    """One step's time with a per-operator breakdown (seconds, summed over layers)."""

    time_s: float
    operators_s: dict[str, float]
    compute_bound_s: float
    memory_bound_s: float
    flops: float
    bytes_moved: float
    num_tokens: int

    @property
    def bound(self) -> str:
        """'compute' when compute-limited operators take most of the GPU time, else 'memory'."""
        return "compute" if self.compute_bound_s > self.memory_bound_s else "memory"

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes_moved if self.bytes_moved else 0.0


@dataclass(frozen=True)
class _Linear:
    """One GEMM family of a layer: [T, k] x [k, n], ``count`` times per step."""

    name: str
    n: float
    k: float
    count: float
    quantized: bool = True


@dataclass(frozen=True)
class AttentionRoofline:
    """One attention phase of one layer as roofline coefficients, in seconds: compute per query-key
    pair, memory traffic per cached token read and per query token (read Q, write O), the launch
    overhead of a step and the work each sequence adds; prefill's compute efficiency ramps with the
    mean chunk (``half_efficiency_query`` tokens give half of it, 0: flat). The step formula
    (:meth:`StepCostModel._parts`) reads these."""

    compute_per_pair_s: float
    memory_per_kv_token_s: float
    memory_per_query_token_s: float
    overhead_s: float
    overhead_per_seq_s: float
    half_efficiency_query: float = 0.0


@dataclass
class _OpCost:
    time_s: np.ndarray
    compute_s: np.ndarray
    memory_s: np.ndarray
    flops: np.ndarray
    bytes_moved: np.ndarray

    def __add__(self, other: _OpCost) -> _OpCost:
        return _OpCost(self.time_s + other.time_s, self.compute_s + other.compute_s, self.memory_s + other.memory_s,
                       self.flops + other.flops, self.bytes_moved + other.bytes_moved)


def _pairs(chunk: np.ndarray, offset: np.ndarray, window: int | None) -> np.ndarray:
    """Query-key pairs of a causal chunk (chunk tokens after ``offset`` cached ones)."""
    full = chunk * offset + chunk * (chunk + 1) / 2
    if window is None:
        return full
    # With a window each query sees at most ``window`` keys.
    return np.minimum(full, chunk * float(window))


@dataclass
class _TokenTables:
    """Per-token-count times (index: the step's token count) of every token-count operator but the
    TP/PP/DP communication, and their compute-bound part: the same for every CUDA-graph size, so
    the step models of one configuration that differ only in it share them
    (:meth:`StepCostModel.with_graph_max_tokens`). Extended, never recomputed, as steps grow."""

    time_s: np.ndarray
    compute_s: np.ndarray
    lm_head_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass
class StepCostModel:
    """The precompiled step-time model of one deployment (one TP x PP replica, or one of ``dp``
    data-parallel ranks of TP GPUs stepping together).

    Build one per (model, GPU, profile, quantization, KV dtype, TP, PP, DP, EP) and reuse it.
    ``internode_bytes_per_s`` is the link used for pipeline sends when the replica spans nodes (and
    for TP all-reduces when one TP group does, and for the MoE dispatch when the DP x TP GPUs do).
    ``framework`` names the serving engine and ``vllm_version`` its release, whose rules change step
    times (:class:`~servopt.costmodels.engines.EngineRules`: which all-reduce runs, async
    scheduling, the MoE dispatch backend unless ``all2all_backend`` names one); None is the version
    servopt's exports target. With ``dp > 1`` a step's token count
    is that of every rank after padding (:meth:`StepCostModel.step_s` takes the largest rank's as ``padded_tokens``).
    """

    model: ModelSpec
    gpu: GPUSpec
    profile: PerformanceProfile
    quantization: str | None = None
    kv_cache_dtype: str = "auto"
    tp: int = 1
    pp: int = 1
    internode_bytes_per_s: float = 50e9
    vllm_version: str | None = None
    dp: int = 1
    expert_parallel: bool = False
    all2all_backend: str | None = None
    graph_max_tokens: int = get_engine(DEFAULT_ENGINE).graph_max_tokens
    engine: str | None = None
    num_scheduler_steps: int = 1
    framework: str = DEFAULT_ENGINE
    _table_s: np.ndarray = field(init=False, repr=False)
    _table_compute_s: np.ndarray = field(init=False, repr=False)
    _shared: _TokenTables = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.quantization = self.quantization or own_scheme(self.model)
        check_supported(self.quantization, self.gpu)
        weight_bytes(self.model, self.quantization, self.tp, self.pp, self.dp)  # validates tp/pp/dp
        m, tp = self.model, self.tp
        # A pre-quantized checkpoint's own format (group size, zero points) sets its bytes per weight.
        self._scheme = m.weight_scheme(self.quantization)
        self._dense_dtype = "fp16" if m.dtype == "float16" else "bf16"
        self._math = math_dtype(self.quantization, self.gpu)
        # fp8 or nvfp4 without native math (Ampere; nvfp4 before Blackwell) run as weight-only kernels.
        self._weight_only = runs_weight_only(self.quantization, self.gpu)
        self._act_bytes = float(MODEL_DTYPE_BYTES[m.dtype])
        self._heads = m.num_attention_heads / tp
        self._kv_layer_bytes = kv_bytes_per_token_per_layer_per_gpu(m, self.kv_cache_dtype, tp)
        self._linears = self._layer_linears()
        self.window = m.sliding_window
        self.sliding_layers = m.num_sliding_layers if m.sliding_window else 0
        self.full_layers = m.num_layers - self.sliding_layers
        self._spans_nodes = tp * self.pp * self.dp > self.gpu.nvlink_gpus
        self._engine = get_engine(self.framework)
        self._version = self._engine.version(self.vllm_version)
        rule = self._engine.step_rule(self._version, self.pp)
        self._layout = None if m.moe is None else ExpertLayout(
            m.moe.num_experts, m.moe.experts_per_token, self.dp, tp, self.expert_parallel)
        # vLLM's expert-parallel size: the whole DP x TP group with --enable-expert-parallel, else 1.
        ep_size = self._layout.group if self._layout is not None and self.expert_parallel else 1
        self._moe_kernel = moe_kernel(self._scheme, self.quantization, m.checkpoint, self.gpu, ep_size, self._version)
        self.all2all_backend = self.all2all_backend or rule.all2all_backend
        collectives = self._engine.all2all_collectives
        if self.all2all_backend not in collectives:
            raise InputError(f"all2all_backend '{self.all2all_backend}' is not one of {', '.join(collectives)}")
        if collectives[self.all2all_backend][0] == "all_to_all" and self.dp > 1 and tp > 1:
            raise InputError(f"all2all_backend {self.all2all_backend} runs with tp 1 (one GPU per data-parallel "
                             "rank); use allgather_reducescatter with tp > 1")
        self.engine = self.engine or rule.generation
        self.async_scheduling = self.engine == rule.generation and rule.async_scheduling
        # Weight-and-activation 8-bit GEMMs quantize their input first (weight-only kernels do not).
        self._quantizes_activations = self._scheme.activation_dtype in ("fp8", "int8") and not self._weight_only
        self._compute_scale, self._memory_scale = self.profile.compute_scale, self.profile.memory_scale
        self._precompute_attention()
        self._precompute_formula()
        self._shared = _TokenTables(np.zeros(0), np.zeros(0))
        self._table_s = np.zeros(0)
        self._table_compute_s = np.zeros(0)
        # Tabulated up to the largest step vLLM runs by default on this GPU (grown on demand).
        self._grow_table(self._engine.batch_limits(self.gpu, self._version)[0])

    def with_graph_max_tokens(self, graph_max_tokens: int) -> StepCostModel:
        """This model with another CUDA-graph size (the largest step vLLM captures), sharing its
        token-count tables but the communication (the graph size decides only which all-reduce runs:
        :meth:`_allreduce_s`); itself when the size is its own or when no TP all-reduce runs."""
        if graph_max_tokens == self.graph_max_tokens or self.tp == 1:
            return self
        other = copy.copy(self)
        other.graph_max_tokens = graph_max_tokens
        other._table_s = other._table_compute_s = np.zeros(0)
        other._tokens_list, other._lines = [], {}  # the formula's lookups include the communication
        other._grow_table(len(self._table_s) - 1)
        return other

    # --- model structure ------------------------------------------------------------------------
    def _layer_linears(self) -> list[_Linear]:
        m, tp = self.model, self.tp
        h, layers = m.hidden_size, m.num_layers
        ops: list[_Linear] = []
        if m.mla is not None:
            mla = m.mla
            q_head = mla.qk_nope_head_dim + mla.qk_rope_head_dim
            if mla.q_lora_rank:
                ops += [_Linear("q_a_proj", mla.q_lora_rank, h, layers),
                        _Linear("q_b_proj", self._heads * q_head, mla.q_lora_rank, layers)]
            else:
                ops.append(_Linear("q_proj", self._heads * q_head, h, layers))
            ops += [
                _Linear("kv_a_proj", mla.kv_lora_rank + mla.qk_rope_head_dim, h, layers),
                # Decode absorbs W_UK into the query and W_UV into the output (per head).
                _Linear("k_up_absorb", self._heads * mla.kv_lora_rank, mla.qk_nope_head_dim, layers),
                _Linear("v_up_absorb", self._heads * mla.v_head_dim, mla.kv_lora_rank, layers),
                _Linear("o_proj", h, self._heads * mla.v_head_dim, layers),
            ]
        else:
            kv_heads = kv_heads_per_rank(m, tp)
            ops += [_Linear("qkv_proj", (m.num_attention_heads / tp + 2 * kv_heads) * m.head_dim, h, layers),
                    _Linear("o_proj", h, m.attn_out_dim / tp, layers)]
        up = 2 if m.gated_mlp else 1
        if m.num_dense_mlp_layers:
            ops += [_Linear("gate_up_proj", up * m.intermediate_size / tp, h, m.num_dense_mlp_layers),
                    _Linear("down_proj", h, m.intermediate_size / tp, m.num_dense_mlp_layers)]
        if m.moe is not None and m.moe.num_shared_experts:
            shared = m.moe.num_shared_experts * m.moe.shared_expert_intermediate_size / tp
            ops += [_Linear("shared_gate_up", up * shared, h, m.num_moe_layers),
                    _Linear("shared_down", h, shared, m.num_moe_layers)]
        if m.moe is not None:
            ops.append(_Linear("router", m.moe.num_experts, h, m.num_moe_layers, quantized=False))
        # The layers the checkpoint leaves in the model dtype run 16-bit GEMMs (ModelSpec.unquantized_layers).
        kept = m.unquantized_layers(self.quantization)
        split = []
        for op in ops:
            layers = kept.get(op.name, 0) if op.quantized else 0
            if layers < op.count:
                split.append(replace(op, count=op.count - layers))
            if layers:
                split.append(replace(op, count=layers, quantized=False))
        return split

    def _weight_dtype_bytes(self, quantized: bool) -> float:
        return self._scheme.weight_bytes_per_param if quantized else self._act_bytes

    def _gemm(self, op: _Linear, tokens: np.ndarray) -> _OpCost:
        quantized = op.quantized
        dtype = self._math if quantized else self._dense_dtype
        wbytes = self._weight_dtype_bytes(op.quantized)
        weight_only = quantized and self._weight_only
        compute_s, memory_s = self.profile.gemm_parts_s(
            self.gpu, dtype, tokens, op.n, op.k, wbytes, self._act_bytes, weight_only, op.count
        )
        flops = 2.0 * tokens * op.n * op.k * op.count
        bytes_moved = op.count * (op.n * op.k * wbytes + tokens * (op.n + op.k) * self._act_bytes)
        compute_s, memory_s = self._served(compute_s, memory_s, flops, bytes_moved, dtype, self._compute_scale)
        eff = self.profile.gemm_efficiency(dtype)
        time_s = smooth_max(compute_s, memory_s, eff.smoothness) + eff.overhead_s * op.count
        return _OpCost(time_s, compute_s, memory_s, flops, bytes_moved)

    def _experts(self, tokens: np.ndarray) -> _OpCost | None:
        """Routed experts on one GPU: the profile's fused-MoE kernel (:meth:`PerformanceProfile.moe_time_s`)
        for the weight format vLLM runs them in (:func:`~servopt.costmodels.moe.moe_kernel`), over the
        routed pairs and touched experts of the busiest GPU.

        With data-parallel ranks the experts see every rank's (padded) tokens; with expert
        parallelism the busiest GPU sets the time (:class:`~servopt.costmodels.moe.ExpertLayout`).
        The kernel's time covers the permute, both grouped GEMMs, the activation and the weighted
        sum back into the tokens (and, for mxfp4, the top-k: :meth:`_routing`).
        """
        m, layout = self.model, self._layout
        if layout is None:
            return None
        layers = m.num_moe_layers
        gathered = tokens * self.dp
        pairs = layout.busiest_pairs_per_gpu(gathered)
        touched = layout.touched_experts_per_gpu(gathered)
        inter = m.moe.expert_intermediate_size * layout.width_share
        wbytes = self._scheme.weight_bytes_per_param
        eff = self.profile.moe_efficiency(self._moe_kernel, self._math)
        args = (self.gpu, eff, pairs, touched, m.hidden_size, inter, wbytes, self._act_bytes, layers)
        compute_s, memory_s = self.profile.moe_parts_s(*args)
        # Served routing is skewed where microbenchmarks route uniformly: the busiest expert sets the
        # grouped GEMMs' time (a compute-side loss), while skew reads fewer experts' weights, not more.
        flops = 6.0 * pairs * m.hidden_size * inter * layers
        bytes_moved = layers * (touched * 3.0 * m.hidden_size * inter * wbytes
                                + pairs * (3.0 * m.hidden_size + 6.0 * inter) * self._act_bytes)
        compute_s, memory_s = self._served(compute_s, memory_s, flops, bytes_moved, self._math,
                                           self._compute_scale * self.profile.moe_scale)
        time_s = smooth_max(compute_s, memory_s, eff.smoothness) + eff.overhead_s * layers
        return _OpCost(time_s, compute_s, memory_s, flops, bytes_moved)

    def _served(self, compute_s: np.ndarray, memory_s: np.ndarray, flops: np.ndarray, bytes_moved: np.ndarray,
                dtype: str, compute_scale: float) -> tuple[np.ndarray, np.ndarray]:
        """Microbenchmarked (compute, memory) times as served: times the fitted served-to-table
        scales, but never faster than the GPU's dense peak FLOPs or its memory bandwidth (a scale
        below 1 says the kernel tables were pessimistic on this GPU, never that it beats its datasheet)."""
        return (np.maximum(compute_s * compute_scale, flops / self.gpu.peak_flops(dtype)),
                np.maximum(memory_s * self._memory_scale, bytes_moved / self.gpu.memory_bandwidth_bytes_per_s))

    def _routing(self, tokens: np.ndarray) -> _OpCost | None:
        """The top-k over the router logits (vLLM's ``topk_softmax`` / grouped top-k kernel), one per
        MoE layer: it reads the fp32 logits of every gathered token and writes k ids and weights.
        The mxfp4 kernel's measured time already includes it (vLLM routes inside the mxfp4 layer)."""
        m = self.model
        if m.moe is None or self._moe_kernel == "mxfp4":
            return None
        gathered = tokens * self.dp
        bytes_moved = m.num_moe_layers * gathered * (4.0 * m.moe.num_experts + 8.0 * m.moe.experts_per_token)
        return self._memory_bound(bytes_moved, m.num_moe_layers)

    def _memory_bound(self, bytes_moved: np.ndarray, kernels: float) -> _OpCost:
        """``kernels`` memory-bound launches moving ``bytes_moved`` (the profile's elementwise roofline,
        its memory side scaled as served)."""
        memory_s = bytes_moved / (self.gpu.memory_bandwidth_bytes_per_s
                                  * served_efficiency(self.profile.elementwise_memory_efficiency, self._memory_scale))
        time_s = memory_s + self.profile.elementwise_overhead_s * kernels
        return _OpCost(time_s, np.zeros_like(memory_s), memory_s, np.zeros_like(memory_s), bytes_moved)

    def _elementwise(self, tokens: np.ndarray) -> _OpCost:
        m = self.model
        per_layer_values = (
            2 * ADD_NORM_VALUES * m.hidden_size  # two fused residual add + RMSNorm (replicated on every rank)
            + 2 * (m.q_dim + 2 * m.kv_dim) / self.tp  # RoPE reads and writes q, k
        )
        # The gated activation (read gate and up, write the product) of the dense MLP layers and the
        # shared experts; the routed experts' runs inside the fused-MoE kernel.
        activation_values = 3 * (m.num_dense_mlp_layers * m.intermediate_size + (
            m.num_moe_layers * m.moe.num_shared_experts * m.moe.shared_expert_intermediate_size if m.moe else 0)) / self.tp
        kernels = ELEMENTWISE_KERNELS_PER_LAYER
        if m.qk_norm_across_heads:
            # The fp32 norm of all heads' q and k: the sums of squares read them once, the scaling
            # reads and writes them (two kernels, split by the TP all-reduce of the sums).
            per_layer_values += 3 * (m.q_dim + m.kv_dim) / self.tp
            kernels += 2 if self.tp > 1 else 1
        bytes_moved = tokens * (m.num_layers * (per_layer_values * self._act_bytes + self._kv_layer_bytes)
                                + activation_values * self._act_bytes)
        return self._memory_bound(bytes_moved, m.num_layers * kernels)

    def _activation_quant(self, tokens: np.ndarray) -> _OpCost | None:
        """Quantizing the inputs of the 8-bit GEMMs (fp8/int8 W8A8).

        In vLLM's compiled graph a static or per-token quantization is fused into the kernel that
        produces the input (the RMSNorm, the activation): it costs nothing of its own. A dynamic
        per-tensor scale (vLLM's fp8 without calibrated scales) needs the tensor's absolute maximum
        before any value can be written: one more read of the input, in one more kernel.
        """
        if not self._quantizes_activations or not self._scheme.dynamic_per_tensor_activations:
            return None
        inputs = sum(op.count * op.k for op in self._linears if op.quantized)
        if self.model.moe is not None:
            inputs += self.model.num_moe_layers * (self.model.hidden_size + self.model.moe.expert_intermediate_size
                                                   / self.tp * self.model.moe.experts_per_token)
        kernels = sum(op.count for op in self._linears if op.quantized)
        return self._memory_bound(tokens * inputs * self._act_bytes, kernels)

    def _allreduce_s(self, message: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """One TP all-reduce of ``message`` bytes per step, by the implementation vLLM picks for that
        size (:meth:`~servopt.costmodels.engines.EngineRules.allreduce_implementation`)."""
        time_s = np.zeros_like(message)
        across_nodes = self.tp > self.gpu.nvlink_gpus
        link = self.internode_bytes_per_s if across_nodes else None
        kinds = self._engine.allreduce_implementation(message, self.tp, self.gpu, self._version,
                                                      captured=tokens <= self.graph_max_tokens, nvlink=not across_nodes)
        for kind in self._engine.allreduce_implementations:
            mask = kinds == kind
            if mask.any():
                time_s[mask] = self.profile.allreduce_time_s(self.gpu, message[mask], self.tp, kind, link)
        return time_s

    def _communication(self, tokens: np.ndarray) -> _OpCost:
        """Two all-reduces per layer (after attention and after the MLP), plus the sends between
        pipeline stages.

        A q/k norm over all heads (MiniMax-M2, ``qk_norm_across_heads``) adds a third: each TP rank
        holds a slice of the heads, so vLLM's ``MiniMaxText01RMSNormTP.forward_qk``
        (``vllm/model_executor/layers/mamba/linear_attn.py``) all-reduces the fp32 sums of squares of
        q and k (two values per token) before it can scale them.
        """
        m = self.model
        message = tokens * m.hidden_size * self._act_bytes
        time_s = np.zeros_like(message)
        if self.tp > 1:
            time_s = 2 * m.num_layers * self._allreduce_s(message, tokens)
            if m.qk_norm_across_heads:
                time_s = time_s + m.num_layers * self._allreduce_s(tokens * 2 * 4.0, tokens)
        if self.pp > 1:
            link = self.internode_bytes_per_s if self._spans_nodes else self.gpu.interconnect_bytes_per_s
            time_s = time_s + (self.pp - 1) * self.profile.p2p_time_s(message, link)
        time_s = time_s * self.profile.communication_scale
        if self.dp > 1 and self._layout is not None:
            time_s = time_s + self.profile.dispatch_scale * self.model.num_moe_layers * self._dispatch_combine_s(tokens)
        zeros = np.zeros_like(message)
        return _OpCost(time_s, zeros, time_s, zeros, zeros)

    def _dispatch_combine_s(self, tokens: np.ndarray) -> np.ndarray:
        """One MoE layer's dispatch and combine across the data-parallel ranks (``dp`` > 1).

        The all-gather / broadcast backends move every rank's padded tokens to every rank of its DP
        group (``dp`` GPUs, one group per TP rank) and reduce them back; an all-to-all backend sends
        each token to the GPUs its experts are on (``dp x tp`` GPUs). Across nodes the collective runs
        on the inter-node link.
        """
        dispatch, combine = self._engine.all2all_collectives[self.all2all_backend]
        link = self.internode_bytes_per_s if self.tp * self.dp > self.gpu.nvlink_gpus else None
        row_bytes = self.model.hidden_size * self._act_bytes
        if dispatch == "all_to_all":
            # nccl-tests' all-to-all size: the buffer each GPU sends (a copy per destination GPU).
            message = tokens * self._layout.distinct_gpus_per_token() * row_bytes
            group = self._layout.group
        else:
            message = tokens * self.dp * row_bytes  # the whole gathered buffer
            group = self.dp
        return sum(self.profile.collective_time_s(self.gpu, op, message, group, link) for op in (dispatch, combine))

    def _token_ops(self, tokens: np.ndarray, communication: bool = True) -> dict[str, _OpCost]:
        ops: dict[str, _OpCost] = {}
        for op in self._linears:  # a family split into quantized and 16-bit layers reports as one
            cost = self._gemm(op, tokens)
            ops[op.name] = ops[op.name] + cost if op.name in ops else cost
        for name, op in (("moe_routing", self._routing(tokens)), ("moe_experts", self._experts(tokens))):
            if op is not None:
                ops[name] = op
        ops["norms_elementwise"] = self._elementwise(tokens)
        quant = self._activation_quant(tokens)
        if quant is not None:
            ops["activation_quant"] = quant
        if communication:
            ops["tp_pp_communication"] = self._communication(tokens)
        return ops

    @staticmethod
    def _sums(ops: Iterable[_OpCost], time_s: float | np.ndarray = 0, compute_s: float | np.ndarray = 0):
        """Operators' times added to ``time_s`` one by one, and their compute-bound times to ``compute_s``."""
        for op in ops:
            time_s = time_s + op.time_s
            compute_s = compute_s + np.where(op.compute_s > op.memory_s, op.time_s, 0.0)
        return time_s, compute_s

    def _grow_table(self, max_tokens: int) -> None:
        """Tabulate the token-count operators up to ``max_tokens`` (at least doubling the table):
        the shared tables are extended by the token counts they lack, then this model's own
        communication is added for the counts its table lacks (each entry is the sum in the order
        of :meth:`_token_ops`, however the table grew)."""
        size = max(max_tokens + 1, 2 * len(self._table_s))
        shared = self._shared
        have = len(shared.time_s)
        if have < size:
            tokens = np.maximum(np.arange(have, size, dtype=float), 1)
            time_s, compute_s = self._sums(self._token_ops(tokens, communication=False).values())
            if have == 0:
                time_s[0] = compute_s[0] = 0.0
            shared.time_s = np.concatenate([shared.time_s, time_s])
            shared.compute_s = np.concatenate([shared.compute_s, compute_s])
        own = len(self._table_s)
        tokens = np.maximum(np.arange(own, size, dtype=float), 1)
        time_s, compute_s = self._sums([self._communication(tokens)], shared.time_s[own:size],
                                       shared.compute_s[own:size])
        if own == 0:
            time_s[0] = compute_s[0] = 0.0
        self._table_s = np.concatenate([self._table_s, time_s])
        self._table_compute_s = np.concatenate([self._table_compute_s, compute_s])

    # --- attention ------------------------------------------------------------------------------
    def _precompute_attention(self) -> None:
        m, gpu, profile = self.model, self.gpu, self.profile
        dtype = self._dense_dtype
        peak = gpu.peak_flops(dtype)
        bw = gpu.memory_bandwidth_bytes_per_s
        if m.mla is not None:
            # Absorbed MLA: scores over the latent (d_c + d_R) and outputs in the latent (d_c).
            flops_per_pair = 2 * self._heads * (m.mla.cache_dim + m.mla.kv_lora_rank)
            q_values = self._heads * (m.mla.cache_dim + m.mla.kv_lora_rank)
        else:
            flops_per_pair = 4 * self._heads * m.head_dim
            q_values = 2 * self._heads * m.head_dim  # read Q, write O
        self._flops_per_pair = flops_per_pair
        self._query_bytes = q_values * self._act_bytes
        dec, pre = profile.attention_decode, profile.attention_prefill
        served, cs, ms = served_efficiency, self._compute_scale, self._memory_scale
        self.decode_attention = AttentionRoofline(
            flops_per_pair / (peak * served(dec.compute_efficiency, cs)),
            self._kv_layer_bytes / (bw * served(dec.memory_efficiency, ms)),
            self._query_bytes / (bw * served(dec.memory_efficiency, ms)), dec.overhead_s, dec.per_seq_overhead_s)
        self.prefill_attention = AttentionRoofline(
            flops_per_pair / (peak * served(pre.compute_efficiency, cs)),
            self._kv_layer_bytes / (bw * served(pre.memory_efficiency, ms)),
            self._query_bytes / (bw * served(pre.memory_efficiency, ms)), pre.overhead_s, pre.per_seq_overhead_s,
            pre.half_efficiency_query_tokens)

    # --- the step formula -------------------------------------------------------------------------
    def _precompute_formula(self) -> None:
        """The formula's coefficients as plain floats (the event loop reads them on every step)."""
        m, p = self.model, self.profile
        self._kinds = [(float(self.full_layers), False)]
        if self.sliding_layers:
            self._kinds.append((float(self.sliding_layers), True))
        dec, pre = self.decode_attention, self.prefill_attention
        self._dec = (dec.compute_per_pair_s, dec.memory_per_kv_token_s, dec.memory_per_query_token_s,
                     dec.overhead_s, dec.overhead_per_seq_s)
        self._pre = (pre.compute_per_pair_s, pre.half_efficiency_query, pre.memory_per_kv_token_s,
                     pre.memory_per_query_token_s, pre.overhead_s, pre.overhead_per_seq_s)
        # Learned GPU costs of every step outside the kernel tables (SERVING_COEFFICIENTS).
        self._fixed_gpu_s = p.step_gpu_s + p.layer_gpu_s * m.num_layers + p.moe_layer_gpu_s * m.num_moe_layers
        self._seq_gpu_s = p.seq_gpu_s
        # The engine's CPU time per step and per sequence (hidden behind the GPU under async scheduling).
        self._cpu_step_s, self._cpu_seq_s = p.engine_cpu_s(self.engine, self.async_scheduling)
        # Lookup lists of the token-count tables for one step at a time (numpy's per-call cost
        # dominates a single lookup); grown with the arrays.
        self._tokens_list: list[float] = []
        self._lm_head_list: list[float] = []
        self._lines: dict[tuple, list] = {}  # decode lines by batch (decode_line)

    def _grow_lists(self, num_tokens: int, num_sampled: int) -> None:
        """Extend the lookup lists to cover ``num_tokens`` and ``num_sampled`` (each at least doubles)."""
        if num_tokens >= len(self._tokens_list):
            self._tokens_list = self.token_ops_time_s(np.arange(max(num_tokens + 1, 2 * len(self._tokens_list)))).tolist()
        if num_sampled >= len(self._lm_head_list):
            self._lm_head_list = self.lm_head_table_s(max(num_sampled + 1, 2 * len(self._lm_head_list))).tolist()

    def _array_tokens_s(self, num_tokens: np.ndarray) -> np.ndarray:
        return self.token_ops_time_s(np.asarray(num_tokens, dtype=np.int64))

    def _array_lm_head_s(self, num_sampled: np.ndarray) -> np.ndarray:
        sampled = np.asarray(num_sampled, dtype=np.int64)
        return self.lm_head_table_s(int(sampled.max(initial=0)) + 1)[sampled]

    def _parts(self, scalar: bool, num_tokens, num_sampled, decode_query_tokens, num_decode_seqs, decode_context,
               decode_context_windowed, prefill_pairs, prefill_pairs_windowed, prefill_kv_tokens,
               prefill_kv_tokens_windowed, prefill_chunks, padded_tokens=0, host: bool = True) -> tuple:
        """THE step formula: one step's parts from the sums of its batch (:class:`StepAggregates`),
        on Python numbers (``scalar``: one step of the event loop) or on numpy arrays (many steps).

        Returns ``(token_ops_s, lm_head_s, attention_decode_s, attention_prefill_s, fixed_gpu_s, cpu_s)``:
        the token-count operators (GEMMs, fused MoE, norms, collectives; tabulated by token count, at
        ``padded_tokens`` when data-parallel ranks pad to the largest rank's count), the LM head over the
        sampled tokens, decode attention (per layer ``max(compute per query-key pair, KV and query bytes)``
        plus launches), prefill attention (the same roofline, its compute ramping with the mean chunk),
        the learned GPU costs outside the kernel tables (per step, layer, MoE layer, sequence), and the
        engine's CPU time (``host`` False: none, as for a drafter's passes inside the target's step;
        V0's multi-step scheduling pays it once per ``num_scheduler_steps`` decode-only steps). The
        step lasts the GPU parts plus the CPU time async scheduling does not hide (:meth:`step_s`).
        """
        if scalar:
            maximum = scalar_max
            tokens = maximum(num_tokens, padded_tokens)
            if tokens >= len(self._tokens_list) or num_sampled >= len(self._lm_head_list):
                self._grow_lists(tokens, num_sampled)
            token_ops, lm_head = self._tokens_list[tokens], self._lm_head_list[num_sampled]
        else:
            maximum = np.maximum
            token_ops = self._array_tokens_s(maximum(num_tokens, padded_tokens))
            lm_head = self._array_lm_head_s(num_sampled)
        dc, dm, dq, dov, dov_seq = self._dec
        per_seq = decode_query_tokens / maximum(num_decode_seqs, 1)
        launches = (decode_query_tokens > 0) * (dov + dov_seq * num_decode_seqs)
        pc, half, pm, pq, pov, pov_seq = self._pre
        prefill_tokens = num_tokens - decode_query_tokens
        if half:
            mean_chunk = prefill_tokens / maximum(prefill_chunks, 1)
            ramp = (mean_chunk + half) / maximum(mean_chunk, 1e-9)
        else:
            ramp = 1.0
        prefill_launches = (prefill_chunks > 0) * (pov + pov_seq * prefill_chunks)
        decode_attention = prefill_attention = 0.0
        for layers, windowed in self._kinds:
            context = decode_context_windowed if windowed else decode_context
            pairs = prefill_pairs_windowed if windowed else prefill_pairs
            kv = prefill_kv_tokens_windowed if windowed else prefill_kv_tokens
            decode_attention = decode_attention + layers * (
                maximum(dc * context * per_seq, dm * context + dq * decode_query_tokens) + launches)
            prefill_attention = prefill_attention + layers * (
                maximum(pc * pairs * ramp, pm * kv + pq * prefill_tokens) + prefill_launches)
        fixed = ((num_tokens + padded_tokens) > 0) * self._fixed_gpu_s + self._seq_gpu_s * num_sampled
        cpu = (self._cpu_step_s + self._cpu_seq_s * num_sampled) if host else 0.0
        if self.num_scheduler_steps > 1:
            # V0 multi-step scheduling (--num-scheduler-steps n) schedules and processes outputs once per
            # n decode steps: each decode-only step pays 1/n of the engine's CPU time.
            cpu = cpu / (1 + (self.num_scheduler_steps - 1) * (prefill_chunks == 0))
        return token_ops, lm_head, decode_attention, prefill_attention, fixed, cpu

    def _time(self, parts: tuple, maximum) -> tuple:
        """(step time, GPU time) of :meth:`_parts`: the GPU parts plus the CPU time they do not hide."""
        gpu = parts[0] + parts[1] + parts[2] + parts[3] + parts[4]
        return gpu + cpu_wait_s(parts[5], gpu, self.async_scheduling, maximum), gpu

    def step_s(self, num_tokens: int, num_sampled: int, decode_query_tokens: int, num_decode_seqs: int,
               decode_context: float, decode_context_windowed: float, prefill_pairs: float,
               prefill_pairs_windowed: float, prefill_kv_tokens: float, prefill_kv_tokens_windowed: float,
               prefill_chunks: int, padded_tokens: int = 0, host: bool = True) -> float:
        """One step's time from its aggregates as Python numbers (the event loop's call; :meth:`_parts`)."""
        return self._time(self._parts(True, num_tokens, num_sampled, decode_query_tokens, num_decode_seqs,
                                      decode_context, decode_context_windowed, prefill_pairs, prefill_pairs_windowed,
                                      prefill_kv_tokens, prefill_kv_tokens_windowed, prefill_chunks, padded_tokens,
                                      host), scalar_max)[0]

    def _array_parts(self, agg: StepAggregates, padded_tokens: np.ndarray | int = 0) -> tuple:
        return self._parts(False, *(np.asarray(getattr(agg, name), dtype=float) for name in _FORMULA_FIELDS),
                           np.asarray(padded_tokens, dtype=float))

    def step_time_s(self, agg: StepAggregates, *, padded_tokens: np.ndarray | int = 0, return_compute_bound: bool = False):
        """Step times of arrays of step aggregates (:meth:`_parts`, vectorized; ``padded_tokens`` as in
        :meth:`step_s`).

        With ``return_compute_bound`` also returns a boolean array: compute-limited operators take
        most of that step's GPU time.
        """
        parts = self._array_parts(agg, padded_tokens)
        total, _ = self._time(parts, np.maximum)
        if not return_compute_bound:
            return total
        return total, self._compute_bound_s(agg, parts) > 0.5 * (parts[0] + parts[2] + parts[3])

    def gpu_time_s(self, agg: StepAggregates) -> np.ndarray:
        """GPU time of each step: :meth:`step_time_s` without the engine's CPU time."""
        return self._time(self._array_parts(agg), np.maximum)[1]

    def decode_line(self, num_seqs: int, query_per_seq: int, context: float, context_windowed: float,
                    padded_tokens: int = 0, host: bool = True) -> DecodeLine:
        """A decode-only step's time as a line in the summed (and windowed) context, in the regime
        that holds at ``context``: :meth:`_parts` evaluated at two contexts of that regime.

        Decode attention is memory-bound up to a context (the kink) where its per-pair compute
        overtakes the KV reads, compute-bound past it; the line holds up to the kink. Under async
        scheduling the CPU time that shows is evaluated at ``context`` and held along the line (it
        shrinks as the contexts grow, so a long run is timed slightly long).

        The event loop asks for a line per decode run, mostly of a batch it asked about before: each
        batch's kink and the terms of each regime are cached, and so is the line itself where the CPU
        time that shows is the same all along it (lines are shared: treat them as read-only).
        """
        batch = (num_seqs, query_per_seq, padded_tokens, host)
        lines = self._lines.get(batch)
        if lines is None:
            # [kink, then per regime pair: (its line where it is the same for every context, its terms)]
            lines = self._lines[batch] = [self._decode_kink(num_seqs, query_per_seq), None, None, None, None]
        kink = lines[0]
        regime, regime_windowed = context >= kink, context_windowed >= kink
        slot = 1 + 2 * regime + regime_windowed
        cached = lines[slot]
        if cached is None:
            cached = lines[slot] = self._line_cache(num_seqs, query_per_seq, padded_tokens, host, kink, regime,
                                                    regime_windowed)
        line = cached[0]
        if line is not None and context >= 0 and context_windowed >= 0:
            return line
        intercept, slope, slope_windowed, cpu_s = cached[1]
        gpu_now = intercept + slope * context + slope_windowed * context_windowed
        shown_s = cpu_wait_s(cpu_s, gpu_now, self.async_scheduling, scalar_max)
        return DecodeLine(intercept + shown_s, slope, slope_windowed, math.inf if regime else kink,
                          math.inf if regime_windowed else kink)

    def _line_cache(self, num_seqs: int, query_per_seq: int, padded_tokens: int, host: bool, kink: float,
                    regime: bool, regime_windowed: bool) -> tuple:
        """(the line of every context >= 0, or None, (terms)) of one regime for :meth:`decode_line`.

        Without async scheduling the CPU time shows whole at every context; with it, it shows only
        where it outlasts the GPU time, which only grows along the line (slopes >= 0 from the
        intercept at context 0): hidden at the intercept, it is hidden all along. Either way the CPU
        time shown at every context >= 0 is the one at the intercept, and one line serves them all.
        """
        terms = self._line_terms(num_seqs, query_per_seq, padded_tokens, host, kink, regime, regime_windowed)
        intercept, slope, slope_windowed, cpu_s = terms
        shown_s = cpu_wait_s(cpu_s, intercept, self.async_scheduling, scalar_max)
        if self.async_scheduling and not (shown_s == 0.0 and slope >= 0 and slope_windowed >= 0):
            return None, terms
        return DecodeLine(intercept + shown_s, slope, slope_windowed, math.inf if regime else kink,
                          math.inf if regime_windowed else kink), terms

    def _decode_kink(self, num_seqs: int, query_per_seq: int) -> float:
        """The summed context at which decode attention turns compute-bound (inf: never): where the
        per-pair compute ``dc x context x query_per_seq`` overtakes ``dm x context + dq x queries``."""
        dc, dm, dq, _, _ = self._dec
        compute_slope = dc * query_per_seq
        return dq * num_seqs * query_per_seq / (compute_slope - dm) if compute_slope > dm else math.inf

    def _line_terms(self, num_seqs: int, query_per_seq: int, padded_tokens: int, host: bool, kink: float,
                    regime: bool, regime_windowed: bool) -> tuple:
        """(GPU intercept, slope, windowed slope, CPU time) of a decode line, from the formula at two
        points of each context's regime (the formula is linear in each context inside it)."""
        q = num_seqs * query_per_seq

        def points(compute: bool) -> tuple[float, float]:
            if compute:
                return 2 * kink, 4 * kink
            return 0.0, (kink / 2 if kink < math.inf else 1e6)

        def gpu(context: float, context_windowed: float) -> float:
            parts = self._parts(True, q, q, q, num_seqs, context, context_windowed, 0.0, 0.0, 0.0, 0.0, 0,
                                padded_tokens, host)
            return parts[0] + parts[1] + parts[2] + parts[3] + parts[4]

        (a, b), (aw, bw) = points(regime), points(regime_windowed)
        base = gpu(a, aw)
        slope = (gpu(b, aw) - base) / (b - a)
        slope_windowed = (gpu(a, bw) - base) / (bw - aw) if self.sliding_layers else 0.0
        cpu_s = self._parts(True, q, q, q, num_seqs, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0, padded_tokens, host)[5]
        return base - slope * a - slope_windowed * aw, slope, slope_windowed, cpu_s

    # --- public API -----------------------------------------------------------------------------
    @property
    def num_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def token_ops_time_s(self, num_tokens: np.ndarray | int) -> np.ndarray:
        """Time of everything that depends only on the step's token count (table lookup)."""
        tokens = np.asarray(num_tokens, dtype=np.int64)
        top = int(tokens.max(initial=0))
        if top >= len(self._table_s):
            self._grow_table(top)
        return self._table_s[tokens]

    def lm_head_time_s(self, num_sampled: np.ndarray | int) -> np.ndarray:
        m = self.model
        op = _Linear("lm_head", m.vocab_size / self.tp, m.hidden_size, 1, quantized=False)
        sampled = np.asarray(num_sampled, dtype=float)
        return np.where(sampled > 0, self._gemm(op, np.maximum(sampled, 1)).time_s, 0.0)

    def lm_head_table_s(self, size: int) -> np.ndarray:
        """:meth:`lm_head_time_s` of 0 .. ``size - 1`` sampled tokens (tabulated once for the models
        that share this one's tables)."""
        shared = self._shared
        have = len(shared.lm_head_s)
        if have < size:
            shared.lm_head_s = np.concatenate([shared.lm_head_s, self.lm_head_time_s(np.arange(have, size))])
        return shared.lm_head_s[:size]

    def aggregate(self, batch: Batch) -> StepAggregates:
        """Reduce a batch to the sums the step time depends on."""
        chunks = np.asarray(batch.prefill_tokens, dtype=float)
        offsets = np.asarray(batch.prefill_offsets, dtype=float) if len(batch.prefill_offsets) else np.zeros_like(chunks)
        context = np.asarray(batch.decode_context, dtype=float)
        q_per_seq = 1 + batch.num_speculative_tokens
        window = self.window
        windowed_ctx = np.minimum(context, window) if window else context
        windowed_kv = np.minimum(offsets + chunks, window + chunks) if window else offsets + chunks

        def arr(value: float) -> np.ndarray:
            return np.asarray([value], dtype=float)

        return StepAggregates(
            num_tokens=arr(chunks.sum() + q_per_seq * len(context)),
            num_sampled=arr(q_per_seq * len(context) + len(chunks)),
            decode_query_tokens=arr(q_per_seq * len(context)),
            decode_context=arr(context.sum()),
            decode_context_windowed=arr(windowed_ctx.sum()),
            prefill_pairs=arr(_pairs(chunks, offsets, None).sum()),
            prefill_pairs_windowed=arr(_pairs(chunks, offsets, window).sum()),
            prefill_kv_tokens=arr((offsets + chunks).sum()),
            prefill_kv_tokens_windowed=arr(windowed_kv.sum()),
            prefill_chunks=arr(len(chunks)),
            num_decode_seqs=arr(len(context)),
        )

    def _attention_sides(self, agg: StepAggregates) -> dict[str, tuple[np.ndarray, ...]]:
        """Per attention phase, summed over the layer kinds: (compute side, memory side, FLOPs, bytes) of
        its roofline, to tell a compute-bound step from a memory-bound one (times: :meth:`_parts`)."""
        query = np.asarray(agg.decode_query_tokens, dtype=float)
        per_seq = query / np.maximum(agg.num_decode_seqs, 1)
        prefill_tokens = np.asarray(agg.num_tokens, dtype=float) - query
        kinds = [(self.full_layers, agg.decode_context, agg.prefill_pairs, agg.prefill_kv_tokens)]
        if self.sliding_layers:
            kinds.append((self.sliding_layers, agg.decode_context_windowed, agg.prefill_pairs_windowed,
                          agg.prefill_kv_tokens_windowed))
        dc, dm, dq, _, _ = self._dec
        pc, _, pm, pq, _, _ = self._pre
        decode = prefill = np.zeros((4, len(query)))
        for layers, context, pairs, kv_tokens in kinds:
            context, pairs, kv_tokens = (np.asarray(v, dtype=float) for v in (context, pairs, kv_tokens))
            decode = decode + layers * np.stack([
                dc * context * per_seq, dm * context + dq * query, self._flops_per_pair * context * per_seq,
                self._kv_layer_bytes * context + self._query_bytes * query])
            prefill = prefill + layers * np.stack([
                pc * pairs, pm * kv_tokens + pq * prefill_tokens, self._flops_per_pair * pairs,
                self._kv_layer_bytes * kv_tokens + self._query_bytes * prefill_tokens])
        return {"attention_decode": tuple(decode), "attention_prefill": tuple(prefill)}

    def _compute_bound_s(self, agg: StepAggregates, parts: tuple) -> np.ndarray:
        """The time of a step's operators that their compute side limits."""
        sides = self._attention_sides(agg)
        compute_s = self._table_compute_s[np.asarray(agg.num_tokens, dtype=np.int64)]
        for phase, time_s in (("attention_decode", parts[2]), ("attention_prefill", parts[3])):
            compute, memory, _, _ = sides[phase]
            compute_s = compute_s + np.where(compute > memory, time_s, 0.0)
        return compute_s

    def step(self, batch: Batch) -> StepTime:
        """Time of one step (:meth:`_parts`) with its per-operator breakdown."""
        agg = self.aggregate(batch)
        tokens = int(agg.num_tokens[0])
        if tokens == 0:
            return StepTime(0.0, {}, 0.0, 0.0, 0.0, 0.0, 0)
        parts = self._array_parts(agg)
        total, gpu = self._time(parts, np.maximum)
        # The token-count operators one by one: the table's entry is their sum (_grow_table).
        ops = self._token_ops(np.asarray([float(tokens)]))
        breakdown = {name: float(op.time_s[0]) for name, op in ops.items()}
        flops = sum(float(op.flops[0]) for op in ops.values())
        bytes_moved = sum(float(op.bytes_moved[0]) for op in ops.values())
        for name, (_, _, f, b) in self._attention_sides(agg).items():
            flops += float(f[0])
            bytes_moved += float(b[0])
        breakdown.update(attention_decode=float(parts[2][0]), attention_prefill=float(parts[3][0]),
                         lm_head=float(parts[1][0]), gpu_overhead=float(parts[4][0]),
                         step_overhead=float(total[0] - gpu[0]))
        compute_s = float(self._compute_bound_s(agg, parts)[0])
        return StepTime(float(total[0]), breakdown, compute_s, float(gpu[0]) - compute_s, flops, bytes_moved, tokens)

    def prefill_time_s(self, prompt_tokens: int, chunk_tokens: int | None = None) -> float:
        """Time to prefill one prompt alone, in chunks of ``chunk_tokens`` (default: one step)."""
        if prompt_tokens <= 0:
            raise InputError("prompt_tokens must be positive")
        chunk = min(chunk_tokens or prompt_tokens, prompt_tokens)
        offsets = np.arange(0, prompt_tokens, chunk, dtype=float)
        sizes = np.minimum(chunk, prompt_tokens - offsets)
        kv = offsets + sizes
        windowed_kv = np.minimum(kv, self.window + sizes) if self.window else kv
        zeros, ones = np.zeros_like(sizes), np.ones_like(sizes)
        # Every chunk is a step of its own: the vectorized step time over the chunks.
        return float(self.step_time_s(aggregates_from_arrays(
            num_tokens=sizes, num_sampled=ones, decode_query_tokens=zeros, decode_context=zeros,
            prefill_pairs=_pairs(sizes, offsets, None), prefill_pairs_windowed=_pairs(sizes, offsets, self.window),
            prefill_kv_tokens=kv, prefill_kv_tokens_windowed=windowed_kv, prefill_chunks=ones,
            num_decode_seqs=zeros)).sum())

    def decode_step_time_s(self, batch_size: int, context_tokens: int, num_speculative_tokens: int = 0) -> float:
        """Time of one decode step of ``batch_size`` sequences at ``context_tokens`` each."""
        batch = Batch(decode_context=[context_tokens] * batch_size, num_speculative_tokens=num_speculative_tokens)
        return float(self.step_time_s(self.aggregate(batch))[0])

    def weight_read_floor_s(self, context_tokens: int = 0, batch_size: int = 1) -> float:
        """Seed 2.2's lower bound on a decode step: (weights + KV bytes) / bandwidth, per GPU."""
        weights = weight_bytes(self.model, self.quantization, self.tp, self.pp, self.dp).per_gpu_bytes * self.pp
        kv = self._kv_layer_bytes * self.model.num_layers * context_tokens * batch_size
        return (weights + kv) / self.gpu.memory_bandwidth_bytes_per_s


def aggregates_from_arrays(**arrays: np.ndarray) -> StepAggregates:
    """Build :class:`StepAggregates` from arrays; windowed sums default to the unwindowed ones."""
    arrays = {k: np.asarray(v, dtype=float) for k, v in arrays.items()}
    arrays.setdefault("decode_context_windowed", arrays["decode_context"])
    arrays.setdefault("prefill_pairs_windowed", arrays["prefill_pairs"])
    arrays.setdefault("prefill_kv_tokens_windowed", arrays["prefill_kv_tokens"])
    return StepAggregates(**arrays)


def causal_pairs(chunk_tokens: np.ndarray | int, offset_tokens: np.ndarray | int, window: int | None = None) -> np.ndarray:
    """Query-key pairs a causal prefill chunk computes (public for the simulator)."""
    return _pairs(np.asarray(chunk_tokens, dtype=float), np.asarray(offset_tokens, dtype=float), window)



@dataclass(slots=True)
class DecodeLine:
    """Step time of a fixed decode-only batch as a line in its summed context.

    ``time_s = intercept_s + slope_s * context + slope_window_s * context_windowed``, valid while
    ``context <= context_limit`` and ``context_windowed <= window_limit`` (past a limit decode
    attention turns compute-bound and the slope changes). Not frozen, because a frozen dataclass costs
    several times as much to build and the event loop builds many; but
    :meth:`StepCostModel.decode_line` hands out the same line again, so never modify one.
    """

    intercept_s: float
    slope_s: float
    slope_window_s: float
    context_limit: float
    window_limit: float
