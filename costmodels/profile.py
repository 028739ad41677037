"""Performance profile: the efficiencies and overheads that turn roofline bounds into times.

The cost model never reads files: it is handed a :class:`PerformanceProfile`. servopt's calibration
package fits profiles from microbenchmarks and ships them for measured GPUs; every other GPU gets
:meth:`PerformanceProfile.spec_default`, built from its datasheet (and, where a GPU of the same
generation was measured, that GPU's fitted shape of the curves) and marked uncalibrated.

Each kernel family is a roofline with fitted efficiencies::

    time = overhead + smooth_max(FLOPs / (peak x compute_eff), bytes / (bandwidth x memory_eff))

For GEMMs ``smooth_max(a, b) = (a^q + b^q)^(1/q)`` rounds the roofline's corner (a kernel near its
balance point is slowed by both limits; ``q = None`` is the hard ``max``); attention keeps the hard
``max`` plus a per-sequence overhead. The GEMM compute efficiency varies
smoothly with the token count M (knots in log2 M, linearly interpolated: small-M GEMMs are
bandwidth-bound far below peak) and with N and K through multiplicative factors on knots in log2
(few, wide tiles fill the GPU badly; short K reuses each loaded tile less).

Example:
    >>> from servopt.costmodels.hardware import get_gpu
    >>> profile = PerformanceProfile.spec_default(get_gpu("h100"))
    >>> profile.calibrated
    False
    >>> t = profile.gemm_time_s(get_gpu("h100"), "bf16", m=1, n=4096, k=4096, weight_bytes=2.0, act_bytes=2.0)
    >>> 5e-6 < float(t) < 50e-6
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, model_validator

from .errors import Name, Spec
from .hardware import GPUSpec

ArrayLike = np.ndarray | float | int

# Bounds of a profile. Efficiencies are fractions of a datasheet peak (above 1 only by the noise of
# the peak itself). A CPU table fitted against a GPU's datasheet (the pipeline test) reaches 1e-16;
# the floor only keeps every kernel time finite. Overheads are launch and host costs, far below a
# minute.
MIN_EFFICIENCY = 1e-30
Efficiency = Annotated[float, Field(ge=MIN_EFFICIENCY, le=1.2)]
Factor = Annotated[float, Field(ge=MIN_EFFICIENCY, le=1e6)]
Log2Knot = Annotated[float, Field(ge=0, le=64)]
OverheadS = Annotated[float, Field(ge=0, le=60.0)]
# A served-to-microbenchmark time ratio (SERVING_COEFFICIENTS): a kernel served 5x slower or faster
# than measured alone is a modelling error, not a cost.
Scale = Annotated[float, Field(ge=0.2, le=5.0)]


def _count_key(value: Any) -> Any:
    """JSON writes the GPU-count keys of a table as strings: '8' is 8 (and nothing else is coerced)."""
    return int(value) if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 6 else value


def _pair(value: Any) -> Any:
    """JSON writes a (bytes, seconds) pair as a list of two."""
    return tuple(value) if isinstance(value, list) and len(value) == 2 else value


GPUCount = Annotated[int, BeforeValidator(_count_key), Field(ge=1, le=100_000)]
CurvePoint = Annotated[tuple[Annotated[float, Field(gt=0, le=1e15)], Annotated[float, Field(gt=0, le=3600.0)]],
                       BeforeValidator(_pair)]


def smooth_max(a: ArrayLike, b: ArrayLike, smoothness: float | None) -> np.ndarray:
    """``(a^q + b^q)^(1/q)``: the roofline with a rounded corner (``None``: the plain maximum)."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if smoothness is None:
        return np.maximum(a, b)
    # Scale by the larger term so that the power cannot overflow.
    top = np.maximum(np.maximum(a, b), 1e-30)
    return top * ((a / top) ** smoothness + (b / top) ** smoothness) ** (1.0 / smoothness)


def cpu_wait_s(cpu_s: ArrayLike, gpu_step_s: ArrayLike, async_scheduling: bool, maximum=np.maximum) -> ArrayLike:
    """The part of a step's engine CPU time ``cpu_s`` that adds to its GPU time: all of it, or with
    async scheduling (the next step prepared while the GPU runs this one) only what outlasts the GPU
    step. ``maximum``: ``np.maximum`` for arrays, the built-in ``max`` for one step of the event loop.

    >>> cpu_wait_s(3e-3, 1e-3, False), cpu_wait_s(3e-3, 1e-3, True, max), cpu_wait_s(1e-3, 3e-3, True, max)
    (0.003, 0.002, 0.0)
    """
    return maximum(cpu_s - gpu_step_s, 0.0) if async_scheduling else cpu_s


@dataclass(frozen=True)
class ServingCoefficient:
    """One learned coefficient of the step formula (:class:`~servopt.costmodels.roofline.StepCostModel`):
    what it means physically, its unit, the largest value that still measures that cost, and the
    prior the fit pulls it toward where the runs say little (``prior_center`` with a spread of
    ``prior_width``: a ratio's log for scales, seconds for costs)."""

    meaning: str
    unit: str
    upper: float
    prior_center: float = 0.0
    prior_width: float | None = None  # None: the runs alone set it
    scale: bool = False


# The trained-physics coefficients: the kernel tables (fitted to microbenchmarks) are the basis
# functions, and these turn their sums into the steps a served engine takes. Scales multiply a
# roofline side of every kernel (a served forward pass runs kernels back to back at sustained clocks,
# with caches shared); costs are added to every step on the GPU's critical path, which async
# scheduling does not hide. The engine's CPU time and the front end's latency are their own fields.
# Priors: the kernel tables hold out to about 5% (docs/benchmarks.md), and a GPU under sustained load
# runs below its boost clock (H100 and H200 throttle by 10-20% at full power): a served kernel within
# about 25% of its microbenchmark; collectives, timed by nccl-tests on idle links, within about 30%.
# Additive costs: near zero, at the width of a few launches (per step about a millisecond, per layer
# tens of microseconds).
SERVING_COEFFICIENTS: dict[str, ServingCoefficient] = {
    "compute_scale": ServingCoefficient(
        "served time of the compute-bound side of every kernel (GEMM, fused MoE, attention) over its "
        "microbenchmark time", "x", 3.0, 1.0, 0.25, scale=True),
    "memory_scale": ServingCoefficient(
        "served time of the memory-bound side of every kernel (weights, activations, KV cache) over its "
        "microbenchmark time", "x", 3.0, 1.0, 0.25, scale=True),
    "communication_scale": ServingCoefficient(
        "served time of the tensor-parallel all-reduces and pipeline sends over their nccl-tests / "
        "microbenchmark time", "x", 3.0, 1.0, 0.3, scale=True),
    "dispatch_scale": ServingCoefficient(
        "served time of the MoE dispatch and combine across data-parallel ranks (all-gather and "
        "reduce-scatter, or all-to-all) over their nccl-tests time: the ranks wait for the slowest",
        "x", 3.0, 1.0, 0.3, scale=True),
    "moe_scale": ServingCoefficient(
        "served time of the compute side of the fused-MoE kernel (routed experts) over its microbenchmark time, on "
        "top of the compute scale: real routing is skewed where the microbenchmarks route uniformly, so the "
        "busiest expert's grouped GEMM sets the time", "x", 3.0, 1.0, 0.25, scale=True),
    "step_gpu_s": ServingCoefficient(
        "GPU time per step outside the kernel tables: sampler, logits gather, the step's launch and "
        "synchronisation", "s", 0.02, 0.0, 1e-3),
    "layer_gpu_s": ServingCoefficient(
        "GPU time per transformer layer per step outside the kernel tables: launches and gaps between "
        "kernels (piecewise CUDA graphs run attention outside the graph)", "s", 1e-3, 0.0, 20e-6),
    "seq_gpu_s": ServingCoefficient(
        "GPU time per scheduled sequence per step: sampling, penalties and per-request input buffers",
        "s", 1e-3, 0.0, 10e-6),
    "moe_layer_gpu_s": ServingCoefficient(
        "GPU time per MoE layer per step outside the fused-MoE kernel tables: routing glue, expert-map "
        "bookkeeping, the extra launches of the MoE block", "s", 2e-3, 0.0, 30e-6),
    # The engine's CPU time per step (hidden behind the GPU step under async scheduling) and the
    # front end's latency per request: no kernel table measures them. Their priors are wide: a
    # Python engine loop spends about a millisecond a step and tens of microseconds a sequence
    # (scheduling, input preparation, output processing; V0 also detokenizes in its loop), and an
    # HTTP front end a few to a few tens of milliseconds a request.
    "step_overhead_s": ServingCoefficient(
        "V1 engine's CPU time per step: scheduling, input preparation, output processing", "s", 0.03, 1e-3, 1.5e-3),
    "step_overhead_per_seq_s": ServingCoefficient(
        "V1 engine's CPU time per step and scheduled sequence", "s", 1e-3, 20e-6, 30e-6),
    "async_step_overhead_s": ServingCoefficient(
        "V1 engine's CPU time per step where it schedules asynchronously (vLLM 0.14 and later; hidden behind the "
        "GPU step, it shows only where it outlasts it): another engine loop, with its output thread", "s", 0.03,
        1e-3, 1.5e-3),
    "async_step_overhead_per_seq_s": ServingCoefficient(
        "that engine's CPU time per step and scheduled sequence", "s", 1e-3, 20e-6, 30e-6),
    "v0_step_overhead_s": ServingCoefficient(
        "V0 engine's CPU time per step (vLLM before 0.8, and pipeline parallelism in 0.8), which also "
        "detokenizes in its loop", "s", 0.03, 2e-3, 3e-3),
    "v0_step_overhead_per_seq_s": ServingCoefficient(
        "V0 engine's CPU time per step and scheduled sequence", "s", 1e-3, 50e-6, 100e-6),
    "request_overhead_s": ServingCoefficient(
        "front-end latency per request behind vLLM's API server: HTTP, chat template, the hop to the "
        "engine core, the first token's way back (tokenization is timed on its own)", "s", 0.05, 10e-3, 15e-3),
    "dynamo_request_overhead_s": ServingCoefficient(
        "the same latency behind Dynamo's front end (Rust HTTP and tokenizer, a hop to the vLLM worker)",
        "s", 0.05, 5e-3, 10e-3),
}


def _check_increasing(name: str, knots: list[float]) -> None:
    if any(b <= a for a, b in zip(knots, knots[1:])):
        raise ValueError(f"{name} must increase")


def _check_curve(model: Spec, ramp_knots: str, factor_knots: str, factors: tuple[str, ...]) -> None:
    """An efficiency ramp (``compute_efficiency`` on ``ramp_knots``) and multiplicative factors on
    ``factor_knots``: increasing knots, one positive value per knot."""
    if len(getattr(model, ramp_knots)) != len(model.compute_efficiency):
        raise ValueError(f"{ramp_knots} and compute_efficiency must have the same length")
    _check_increasing(ramp_knots, getattr(model, ramp_knots))
    knots = getattr(model, factor_knots)
    _check_increasing(factor_knots, knots)
    for name in factors:
        values = getattr(model, name)
        if len(values) != len(knots):
            raise ValueError(f"{name} needs one value per {factor_knots} entry ({len(knots)})")
        if any(v <= 0 for v in values):
            raise ValueError(f"{name} values must be positive")
    if any(e <= 0 for e in model.compute_efficiency):
        raise ValueError("compute efficiencies must be positive")


class GemmEfficiency(Spec):
    """GEMM roofline efficiencies for one math dtype.

    ``compute_eff(m, n, k) = compute_efficiency(log2 m) x n_compute_factor(log2 n) x k_compute_factor(log2 k)``
    and ``memory_eff(n, k) = memory_efficiency x n_memory_factor(log2 n) x k_memory_factor(log2 k)``;
    the factors sit on ``log2_nk_knots`` (empty: no shape dependence beyond M).
    """

    log2_m_knots: list[Log2Knot] = Field(min_length=1, max_length=64)
    compute_efficiency: list[Efficiency] = Field(min_length=1, max_length=64, description="fraction of peak at each knot")
    memory_efficiency: Efficiency
    overhead_s: OverheadS
    log2_nk_knots: list[Log2Knot] = Field(default_factory=list, max_length=64)
    n_compute_factor: list[Factor] = Field(default_factory=list)
    k_compute_factor: list[Factor] = Field(default_factory=list)
    n_memory_factor: list[Factor] = Field(default_factory=list)
    k_memory_factor: list[Factor] = Field(default_factory=list)
    smoothness: float | None = Field(default=None, ge=1, le=50)

    @model_validator(mode="after")
    def _check_knots(self) -> GemmEfficiency:
        _check_curve(self, "log2_m_knots", "log2_nk_knots",
                     ("n_compute_factor", "k_compute_factor", "n_memory_factor", "k_memory_factor"))
        return self

    def _factor(self, values: list[float], dim: ArrayLike | None) -> np.ndarray | float:
        if dim is None or not self.log2_nk_knots:
            return 1.0
        return np.interp(np.log2(np.maximum(dim, 1)), self.log2_nk_knots, values)

    def compute_eff(self, m: ArrayLike, n: ArrayLike | None = None, k: ArrayLike | None = None) -> np.ndarray:
        """Fraction of peak FLOP/s for an [m, k] x [k, n] GEMM (n, k omitted: shape-neutral)."""
        base = np.interp(np.log2(np.maximum(m, 1)), self.log2_m_knots, self.compute_efficiency)
        return base * self._factor(self.n_compute_factor, n) * self._factor(self.k_compute_factor, k)

    def memory_eff(self, n: ArrayLike | None = None, k: ArrayLike | None = None) -> np.ndarray | float:
        """Fraction of peak bandwidth the GEMM streams its weights and activations at."""
        return self.memory_efficiency * self._factor(self.n_memory_factor, n) * self._factor(self.k_memory_factor, k)


class AttentionEfficiency(Spec):
    """Roofline efficiencies of an attention kernel (prefill or decode)."""

    compute_efficiency: Efficiency
    memory_efficiency: Efficiency
    overhead_s: OverheadS
    # Prefill: efficiency ramps up with the chunk length (short queries underfill the tiles).
    half_efficiency_query_tokens: float = Field(default=0.0, ge=0, le=1e7)
    # Each sequence adds scheduling and (decode) split-KV reduction work beyond its bytes. Attention
    # keeps the hard max: its time stays linear in the context, which the simulator relies on.
    per_seq_overhead_s: OverheadS = 0.0

    def compute_eff(self, query_tokens: ArrayLike | None = None) -> np.ndarray | float:
        """Compute efficiency at a (mean) query length per sequence."""
        if query_tokens is None or self.half_efficiency_query_tokens <= 0:
            return self.compute_efficiency
        q = np.asarray(query_tokens, dtype=float)
        return self.compute_efficiency * q / (q + self.half_efficiency_query_tokens)


class CollectiveCurve(Spec):
    """Measured latency of one collective (an all-reduce implementation, or an NCCL all-gather,
    reduce-scatter or all-to-all) against message size, per GPU count.

    ``points[n]`` holds (message bytes, latency in seconds) measured over ``n`` GPUs whose link
    carries ``link_gbps`` GB/s per direction. Message bytes follow nccl-tests: the buffer each GPU
    all-reduces, the whole gathered (or reduce-scattered) buffer, and the buffer each GPU sends in an
    all-to-all. Between measured sizes the latency is interpolated
    linearly in log-log (a collective's protocol changes with size: a flat launch-and-sync floor,
    then a ramp, then the link's bandwidth); below the smallest size it stays at that latency, above
    the largest it grows in proportion to the bytes. On another link (a GPU of another fabric, a
    group that spans nodes) a message costs what a message larger by the link ratio costs on this
    one: the curve keeps its shape and its bandwidth scales. A GPU count that was not measured takes
    the nearest one, with the bytes scaled by the share of the buffer each GPU puts on the wire:
2(n-1)/n for an all-reduce, (n-1)/n for the others (``collective``).

    Example:
        >>> curve = CollectiveCurve(link_gbps=450, points={8: [(1e3, 5e-6), (1e6, 1e-5), (1e8, 4e-4)]})
        >>> [round(float(curve.time_s(b, 8)) * 1e6, 1) for b in (10, 1e6, 2e8)]
        [5.0, 10.0, 800.0]
        >>> round(float(curve.time_s(1e8, 8, link_gbps=45)) * 1e3, 1)
        4.0
    """

    link_gbps: float = Field(ge=0.01, le=1e5, description="per-direction link bandwidth where the points were measured")
    points: dict[GPUCount, list[CurvePoint]] = Field(min_length=1, description="GPU count -> (bytes, seconds)")
    collective: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all"] = "all_reduce"

    @model_validator(mode="after")
    def _check_points(self) -> CollectiveCurve:
        for count, pairs in self.points.items():
            if count < 2 or not pairs:
                raise ValueError("points need at least one (bytes, seconds) pair for a GPU count of 2 or more")
            sizes = [b for b, _ in pairs]
            if any(b <= 0 or t <= 0 for b, t in pairs) or any(y <= x for x, y in zip(sizes, sizes[1:])):
                raise ValueError(f"points for {count} GPUs need positive bytes and seconds, sizes increasing")
        return self

    def _wire(self, num_gpus: int) -> float:
        return (2.0 if self.collective == "all_reduce" else 1.0) * (num_gpus - 1) / num_gpus

    def time_s(self, message_bytes: ArrayLike, num_gpus: int, link_gbps: float | None = None) -> np.ndarray:
        """Latency of the collective on ``message_bytes`` over ``num_gpus`` GPUs (on a link of ``link_gbps``)."""
        count = min(self.points, key=lambda n: (abs(n - num_gpus), n))
        scale = (link_gbps and self.link_gbps / link_gbps) or 1.0
        scale *= self._wire(num_gpus) / self._wire(count)
        sizes, times = (np.asarray(v, dtype=float) for v in zip(*self.points[count]))
        message = np.maximum(np.asarray(message_bytes, dtype=float) * scale, 1.0)
        inside = np.exp(np.interp(np.log(message), np.log(sizes), np.log(times)))
        # Past the largest size the last segment's cost per byte (at least the link's) holds.
        return np.where(message > sizes[-1], times[-1] * message / sizes[-1], inside)


def textbook_curve(link_gbps: float, collective: str = "all_reduce", counts: tuple[int, ...] = (2, 4, 8)) -> CollectiveCurve:
    """An NCCL-like curve for a fabric nobody measured: 15 us plus the wire bytes at 70% of the link."""
    factor = 2.0 if collective == "all_reduce" else 1.0
    sizes = 2.0 ** np.arange(10, 31, 2)
    points = {n: [(float(b), 15e-6 + float(b) * factor * (n - 1) / n / (0.7 * link_gbps * 1e9)) for b in sizes]
              for n in counts}
    return CollectiveCurve(link_gbps=link_gbps, points=points, collective=collective)


def textbook_allreduce(link_gbps: float) -> dict[str, CollectiveCurve]:
    """The all-reduce curves of a GPU nobody measured (:func:`textbook_curve`)."""
    return {"nccl": textbook_curve(link_gbps)}


class MoeEfficiency(Spec):
    """Roofline of one fused-MoE kernel: a MoE layer's routed experts on one GPU.

    For ``pairs`` routed (token, expert) pairs over ``touched`` experts of ``hidden`` x ``inter``
    (the expert's intermediate width on this GPU)::

        time = overhead_s + smooth_max(6 pairs hidden inter / (peak(math_dtype) x compute_eff),
                                       (touched 3 hidden inter w + pairs (3 hidden + 6 inter) a) / (bandwidth x memory_eff))

    (gated experts: gate and up, then down; ``w`` bytes per weight, ``a`` per activation value: the
    permuted input, the gate/up output, the activation's input and output, the down output and the
    top-k sum). ``compute_eff`` ramps with the rows each expert's grouped GEMM gets (``pairs /
    touched``, knots in log2: a few tokens per expert fill a tile badly) and scales with a factor
    on log2 ``inter`` (narrow tensor-parallel slices make small tiles); ``memory_eff`` takes its
    own factor on log2 ``inter``. ``overhead_s`` is the kernel sequence's floor: routing, the
    permute and unpermute, the launches. ``math_dtype`` names the tensor-core peak the kernel runs at
    (mxfp4 weights on Hopper, and by default on Blackwell, run in bf16 math); ``kernel`` the vLLM
    kernel it was fitted on.
    """

    kernel: str = ""
    math_dtype: Name = "bf16"
    log2_tokens_per_expert_knots: list[Log2Knot] = Field(min_length=1, max_length=64)
    compute_efficiency: list[Efficiency] = Field(min_length=1, max_length=64, description="fraction of peak at each knot")
    memory_efficiency: Efficiency
    overhead_s: OverheadS
    log2_inter_knots: list[Log2Knot] = Field(default_factory=list, max_length=64)
    inter_compute_factor: list[Factor] = Field(default_factory=list)
    inter_memory_factor: list[Factor] = Field(default_factory=list)
    smoothness: float | None = Field(default=None, ge=1, le=50)
    inter_alignment: int = Field(default=1, ge=1, le=65536, description="vLLM pads each expert's intermediate width to this")
    hidden_alignment: int = Field(default=1, ge=1, le=65536, description="and the hidden width to this")

    @model_validator(mode="after")
    def _check_knots(self) -> MoeEfficiency:
        _check_curve(self, "log2_tokens_per_expert_knots", "log2_inter_knots", ("inter_compute_factor", "inter_memory_factor"))
        return self

    def _inter_factor(self, values: list[float], inter: ArrayLike) -> np.ndarray | float:
        if not self.log2_inter_knots:
            return 1.0
        return np.interp(np.log2(np.maximum(inter, 1)), self.log2_inter_knots, values)

    def padded(self, hidden: ArrayLike, inter: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(hidden, intermediate) widths after vLLM's padding of this kernel's weights."""
        return (np.ceil(np.asarray(hidden, dtype=float) / self.hidden_alignment) * self.hidden_alignment,
                np.ceil(np.asarray(inter, dtype=float) / self.inter_alignment) * self.inter_alignment)

    def compute_eff(self, tokens_per_expert: ArrayLike, inter: ArrayLike) -> np.ndarray:
        base = np.interp(np.log2(np.maximum(tokens_per_expert, 1)), self.log2_tokens_per_expert_knots,
                         self.compute_efficiency)
        return base * self._inter_factor(self.inter_compute_factor, inter)

    def memory_eff(self, inter: ArrayLike) -> np.ndarray | float:
        return self.memory_efficiency * self._inter_factor(self.inter_memory_factor, inter)

    @classmethod
    def from_gemm(cls, gemm: GemmEfficiency, math_dtype: str) -> MoeEfficiency:
        """The textbook stand-in when a GPU's fused-MoE kernels were never measured: the GEMM roofline
        of the same math (its M ramp read as tokens per expert), two GEMM launches plus the routing,
        permute, activation and unpermute launches (six in all) as the floor."""
        return cls(kernel="uncalibrated: GEMM efficiencies", math_dtype=math_dtype,
                   log2_tokens_per_expert_knots=gemm.log2_m_knots, compute_efficiency=gemm.compute_efficiency,
                   memory_efficiency=gemm.memory_efficiency, overhead_s=6 * gemm.overhead_s,
                   smoothness=gemm.smoothness)


# The measured MoE kernel to stand in for one a profile lacks, nearest first (same weight format
# family, then 16-bit): block-scaled and per-tensor fp8 run the same fp8 tensor cores, the 4-bit
# weight-only kernels (mxfp4, int4 Marlin) both dequantize into bf16 math.
MOE_FALLBACK = {
    "bf16": ("fp16",), "fp16": ("bf16",), "fp8": ("fp8_block", "bf16"), "fp8_block": ("fp8", "bf16"),
    "fp8_block_triton": ("fp8_block", "fp8", "bf16"),
    "mxfp4": ("int4", "bf16"), "int4": ("mxfp4", "bf16"), "nvfp4": ("mxfp4_mxfp8", "fp8", "bf16"),
    "mxfp4_mxfp8": ("fp8", "bf16"),
}


# Textbook shapes for a GPU nobody measured: Hopper-like GEMM ramp in M, no N/K dependence.
_DEFAULT_GEMM = GemmEfficiency(
    log2_m_knots=[0, 4, 7, 10, 13], compute_efficiency=[0.25, 0.35, 0.55, 0.7, 0.75],
    memory_efficiency=0.75, overhead_s=4e-6,
)


class PerformanceProfile(Spec):
    """Fitted efficiencies and overheads of one GPU (and serving framework)."""

    gpu: Name
    calibrated: bool
    source: str = Field(description="where the numbers come from")
    framework: str = "vllm"
    gemm: dict[Name, GemmEfficiency] = Field(description="by math dtype: bf16, fp16, fp8, int8, ...")
    attention_prefill: AttentionEfficiency
    attention_decode: AttentionEfficiency
    allreduce: dict[Name, CollectiveCurve] = Field(
        min_length=1, description="measured curves by implementation: custom_graph, custom_eager, symm_mem, nccl")
    collectives: dict[Name, CollectiveCurve] = Field(
        default_factory=dict,
        description="measured NCCL curves of the MoE dispatch and combine collectives: all_gather, reduce_scatter, "
                    "all_to_all (missing ones: textbook curves on the GPU's link)")
    moe: dict[Name, MoeEfficiency] = Field(
        default_factory=dict,
        description="fused-MoE kernels by weight format: bf16, fp8, fp8_block (fp8_block_triton: Hopper's "
                    "Triton kernel), mxfp4, mxfp4_mxfp8, int4, nvfp4 "
                    "(missing ones: the nearest measured one, else the GEMM roofline, uncalibrated)")
    elementwise_memory_efficiency: Efficiency
    elementwise_overhead_s: OverheadS
    weight_only_compute_factor: float = Field(
        default=0.85, ge=MIN_EFFICIENCY, le=1, description="share of bf16 GEMM throughput an int4/fp8 weight-only kernel keeps"
    )
    # --- trained-physics coefficients (SERVING_COEFFICIENTS): learned from measured serving runs by
    # calibration/serving_fit.py; the defaults are the kernel tables as measured and no extra cost.
    compute_scale: Scale = Field(default=1.0, description=SERVING_COEFFICIENTS["compute_scale"].meaning)
    memory_scale: Scale = Field(default=1.0, description=SERVING_COEFFICIENTS["memory_scale"].meaning)
    communication_scale: Scale = Field(default=1.0, description=SERVING_COEFFICIENTS["communication_scale"].meaning)
    dispatch_scale: Scale = Field(default=1.0, description=SERVING_COEFFICIENTS["dispatch_scale"].meaning)
    moe_scale: Scale = Field(default=1.0, description=SERVING_COEFFICIENTS["moe_scale"].meaning)
    step_gpu_s: OverheadS = Field(default=0.0, description=SERVING_COEFFICIENTS["step_gpu_s"].meaning)
    layer_gpu_s: OverheadS = Field(default=0.0, description=SERVING_COEFFICIENTS["layer_gpu_s"].meaning)
    seq_gpu_s: OverheadS = Field(default=0.0, description=SERVING_COEFFICIENTS["seq_gpu_s"].meaning)
    moe_layer_gpu_s: OverheadS = Field(default=0.0, description=SERVING_COEFFICIENTS["moe_layer_gpu_s"].meaning)
    step_overhead_s: OverheadS = Field(description="V1 engine's CPU time per step: scheduling, input prep, output processing")
    step_overhead_per_seq_s: OverheadS = Field(description="V1 engine's CPU time per step and running sequence")
    v0_step_overhead_s: OverheadS | None = Field(
        default=None, description="the V0 engine's (vLLM before 0.8), which also detokenizes in its loop; "
                                  "default: the V1 engine's")
    v0_step_overhead_per_seq_s: OverheadS | None = None
    async_step_overhead_s: OverheadS | None = Field(
        default=None, description="the V1 engine's where it schedules asynchronously (vLLM 0.14+); default: the V1 engine's")
    async_step_overhead_per_seq_s: OverheadS | None = None
    request_overhead_s: float = Field(
        default=0.0, ge=0, le=60,
        description="per-request front-end latency outside the engine's steps: HTTP, chat template and "
                    "tokenization on the way in, the first token's way back to the client",
    )
    dynamo_request_overhead_s: float | None = Field(
        default=None, ge=0, le=60, description="the same latency behind Dynamo's front end (Rust HTTP and tokenizer, a hop to "
                                        "the vLLM worker); default: vLLM API server's")
    serving_source: str = Field(default="", description="where the serving coefficients (SERVING_COEFFICIENTS) come from")
    p2p_latency_s: OverheadS = 20e-6
    fit_report: dict[str, dict[str, float]] = Field(
        default_factory=dict, description="median/p90 absolute % error per op family (train and held-out)"
    )
    notes: str = ""

    @model_validator(mode="after")
    def _check_gemm(self) -> PerformanceProfile:
        if "bf16" not in self.gemm:
            raise ValueError("gemm needs a bf16 entry (the fallback for math dtypes the profile does not list)")
        return self

    # --- constructors ---------------------------------------------------------------------------
    @classmethod
    def spec_default(cls, gpu: GPUSpec, reference: PerformanceProfile | None = None,
                     reference_gpu: GPUSpec | None = None) -> PerformanceProfile:
        """Datasheet-derived profile, clearly marked uncalibrated.

        With a ``reference`` profile fitted on a GPU of the same generation (``reference_gpu``),
        the efficiencies (fractions of each datasheet peak) are transferred: the same kernels reach
        about the same share of a similar chip's peak. Fixed overheads (launch latency) carry over
        unchanged; the all-reduce curves keep their shape with their bandwidth scaled to this GPU's
        link (:class:`CollectiveCurve`). Without one, textbook efficiencies are used.

        Example:
            >>> from servopt.costmodels.hardware import get_gpu
            >>> p = PerformanceProfile.spec_default(get_gpu("l40s"))
            >>> p.calibrated, "uncalibrated" in p.source
            (False, True)
        """
        if reference is not None and reference_gpu is not None:
            bf16 = reference.gemm_efficiency("bf16")
            gemm = {dtype: reference.gemm.get(dtype, bf16) for dtype in gpu.peak_tflops}
            return reference.model_copy(update={
                "gpu": gpu.name, "calibrated": False, "gemm": gemm, "fit_report": {},
                "source": (f"spec-derived defaults for the {gpu.display_name} (uncalibrated): efficiencies of the "
                           f"fitted {reference_gpu.display_name} profile ({reference.source}) applied to this "
                           "GPU's datasheet peaks"),
                "notes": "uncalibrated: no measurements of this GPU; run `servopt calibrate run` on one to fit it",
            })
        return cls(
            gpu=gpu.name,
            calibrated=False,
            source=f"spec-derived defaults from the {gpu.display_name} datasheet (uncalibrated)",
            gemm={dtype: _DEFAULT_GEMM for dtype in gpu.peak_tflops},
            attention_prefill=AttentionEfficiency(
                compute_efficiency=0.55, memory_efficiency=0.7, overhead_s=8e-6, half_efficiency_query_tokens=256
            ),
            attention_decode=AttentionEfficiency(compute_efficiency=0.3, memory_efficiency=0.7, overhead_s=6e-6),
            allreduce=textbook_allreduce(gpu.interconnect_gbps),
            elementwise_memory_efficiency=0.6,
            elementwise_overhead_s=2e-6,
            step_overhead_s=2.5e-3,
            step_overhead_per_seq_s=8e-6,
        )

    # --- kernel times ---------------------------------------------------------------------------
    def gemm_efficiency(self, dtype: str) -> GemmEfficiency:
        return self.gemm.get(dtype) or self.gemm["bf16"]

    def gemm_parts_s(
        self, gpu: GPUSpec, dtype: str, m: ArrayLike, n: float, k: float, weight_bytes: float, act_bytes: float,
        weight_only: bool = False, count: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(compute-limited, memory-limited) time of ``count`` GEMMs, before overhead and rounding."""
        m = np.asarray(m, dtype=float)
        eff = self.gemm_efficiency(dtype)
        flops = 2.0 * m * n * k * count
        peak = gpu.peak_flops(dtype) * eff.compute_eff(m, n, k)
        if weight_only:
            peak = peak * self.weight_only_compute_factor
        bytes_moved = count * (n * k * weight_bytes + m * (n + k) * act_bytes)
        memory_s = bytes_moved / (gpu.memory_bandwidth_bytes_per_s * eff.memory_eff(n, k))
        return flops / peak, memory_s

    def gemm_time_s(
        self, gpu: GPUSpec, dtype: str, m: ArrayLike, n: float, k: float, weight_bytes: float, act_bytes: float,
        weight_only: bool = False, count: float = 1.0,
    ) -> np.ndarray:
        """Time of ``count`` GEMMs [m, k] x [k, n] with weights of ``weight_bytes`` per element.

        ``weight_only``: int4/fp8 weights dequantized in the kernel to ``dtype`` math.
        """
        compute_s, memory_s = self.gemm_parts_s(gpu, dtype, m, n, k, weight_bytes, act_bytes, weight_only, count)
        eff = self.gemm_efficiency(dtype)
        return smooth_max(compute_s, memory_s, eff.smoothness) + eff.overhead_s * count

    def moe_efficiency(self, kernel: str, math_dtype: str = "bf16") -> MoeEfficiency:
        """The fused-MoE roofline for a weight format: measured, else the nearest measured format
        (:data:`MOE_FALLBACK`), else :meth:`MoeEfficiency.from_gemm` on ``math_dtype``'s GEMM efficiency."""
        for name in (kernel, *MOE_FALLBACK.get(kernel, ("bf16",))):
            if name in self.moe:
                return self.moe[name]
        return MoeEfficiency.from_gemm(self.gemm_efficiency(math_dtype), math_dtype)

    def moe_parts_s(
        self, gpu: GPUSpec, eff: MoeEfficiency, pairs: ArrayLike, touched: ArrayLike, hidden: float, inter: float,
        weight_bytes: float, act_bytes: float = 2.0, count: float = 1.0,
    ) -> tuple[np.ndarray, np.ndarray]:
        """(compute-limited, memory-limited) time of ``count`` MoE layers (the :class:`MoeEfficiency` roofline,
        on the widths vLLM pads the weights to)."""
        pairs = np.asarray(pairs, dtype=float)
        touched = np.maximum(np.asarray(touched, dtype=float), 1e-9)
        hidden, inter = eff.padded(hidden, inter)
        math_dtype = eff.math_dtype if gpu.has_dtype(eff.math_dtype) else "bf16"
        flops = 6.0 * pairs * hidden * inter * count
        peak = gpu.peak_flops(math_dtype) * eff.compute_eff(pairs / touched, inter)
        bytes_moved = count * (touched * 3.0 * hidden * inter * weight_bytes + pairs * (3.0 * hidden + 6.0 * inter) * act_bytes)
        return flops / peak, bytes_moved / (gpu.memory_bandwidth_bytes_per_s * eff.memory_eff(inter))

    def moe_time_s(
        self, gpu: GPUSpec, kernel: str, pairs: ArrayLike, touched: ArrayLike, hidden: float, inter: float,
        weight_bytes: float, act_bytes: float = 2.0, count: float = 1.0,
    ) -> np.ndarray:
        """Time of ``count`` MoE layers' routed experts on one GPU: ``pairs`` routed (token, expert) pairs
        over ``touched`` experts, each ``hidden`` x ``inter`` on this GPU, in weight format ``kernel``.

        Example:
            >>> from servopt.costmodels.hardware import get_gpu
            >>> gpu = get_gpu("h100")
            >>> p = PerformanceProfile.spec_default(gpu)
            >>> one, many = (float(p.moe_time_s(gpu, "bf16", t * 8, min(t * 8, 128), 4096, 1536, 2.0)) for t in (1, 8192))
            >>> 1e-4 < one < 1e-3 < many  # one token reads its 8 experts' weights; 8k tokens are compute-bound
            True
        """
        eff = self.moe_efficiency(kernel)
        compute_s, memory_s = self.moe_parts_s(gpu, eff, pairs, touched, hidden, inter, weight_bytes, act_bytes, count)
        return smooth_max(compute_s, memory_s, eff.smoothness) + eff.overhead_s * count

    def attention_parts_s(
        self, gpu: GPUSpec, phase: str, flops: ArrayLike, bytes_moved: ArrayLike,
        query_tokens: ArrayLike | None = None, dtype: str = "bf16",
    ) -> tuple[np.ndarray, np.ndarray]:
        """(compute-limited, memory-limited) time of attention, before overheads and rounding."""
        eff = self.attention_prefill if phase == "prefill" else self.attention_decode
        compute_eff = np.maximum(eff.compute_eff(query_tokens), 1e-6)
        compute_s = np.asarray(flops, dtype=float) / (gpu.peak_flops(dtype) * compute_eff)
        memory_s = np.asarray(bytes_moved, dtype=float) / (gpu.memory_bandwidth_bytes_per_s * eff.memory_efficiency)
        return compute_s, memory_s

    def attention_time_s(
        self, gpu: GPUSpec, phase: str, flops: ArrayLike, bytes_moved: ArrayLike, kernels: ArrayLike = 1.0,
        query_tokens: ArrayLike | None = None, dtype: str = "bf16", num_seqs: ArrayLike = 0.0,
    ) -> np.ndarray:
        """Time of ``kernels`` attention launches (phase 'prefill' or 'decode') over ``num_seqs`` sequences.

        ``query_tokens`` is the mean query length per sequence (prefill's efficiency ramp).
        """
        eff = self.attention_prefill if phase == "prefill" else self.attention_decode
        compute_s, memory_s = self.attention_parts_s(gpu, phase, flops, bytes_moved, query_tokens, dtype)
        kernels = np.asarray(kernels, dtype=float)
        busy = np.maximum(compute_s, memory_s)
        overhead = eff.overhead_s * kernels + eff.per_seq_overhead_s * np.asarray(num_seqs, dtype=float)
        return np.where(kernels > 0, busy + overhead, 0.0)

    def allreduce_time_s(self, gpu: GPUSpec, message_bytes: ArrayLike, num_gpus: int, implementation: str = "nccl",
                         link_bytes_per_s: float | None = None) -> np.ndarray:
        """All-reduce of ``message_bytes`` over ``num_gpus`` GPUs by ``implementation`` (zero for one GPU).

        An implementation the profile has no curve for, or none at this GPU count, falls back to
        NCCL's (the one every collective benchmark measures). ``link_bytes_per_s``: the group's link when it is not this
        GPU's own (a group across nodes).
        """
        message_bytes = np.asarray(message_bytes, dtype=float)
        if num_gpus <= 1:
            return np.zeros_like(message_bytes)
        curve = self.allreduce.get(implementation)
        if curve is None or (implementation != "nccl" and num_gpus not in curve.points):
            # An implementation's kernel differs by GPU count (vLLM's symmetric memory runs multimem
            # or two-shot by count), so a count it was not measured at takes NCCL's curve.
            curve = self.allreduce.get("nccl") or curve or next(iter(self.allreduce.values()))
        link = (link_bytes_per_s or gpu.interconnect_bytes_per_s) / 1e9
        return curve.time_s(message_bytes, num_gpus, link_gbps=link)

    def collective_time_s(self, gpu: GPUSpec, collective: str, message_bytes: ArrayLike, num_gpus: int,
                          link_bytes_per_s: float | None = None) -> np.ndarray:
        """NCCL ``collective`` (all_gather, reduce_scatter, all_to_all or all_reduce) of ``message_bytes``
        (nccl-tests' buffer size) over ``num_gpus`` GPUs; zero for one GPU.

        A collective the profile did not measure takes :func:`textbook_curve` on this GPU's link.
        """
        message_bytes = np.asarray(message_bytes, dtype=float)
        if num_gpus <= 1:
            return np.zeros_like(message_bytes)
        if collective == "all_reduce":
            return self.allreduce_time_s(gpu, message_bytes, num_gpus, "nccl", link_bytes_per_s)
        curve = self.collectives.get(collective) or textbook_curve(gpu.interconnect_gbps, collective)
        link = (link_bytes_per_s or gpu.interconnect_bytes_per_s) / 1e9
        return curve.time_s(message_bytes, num_gpus, link_gbps=link)

    def p2p_time_s(self, message_bytes: ArrayLike, link_bytes_per_s: float) -> np.ndarray:
        """Point-to-point send between pipeline stages."""
        return self.p2p_latency_s + np.asarray(message_bytes, dtype=float) / link_bytes_per_s

    def elementwise_time_s(self, gpu: GPUSpec, bytes_moved: ArrayLike, kernels: float) -> np.ndarray:
        """Memory-bound kernels (norms, RoPE, activations, residual adds)."""
        bw = gpu.memory_bandwidth_bytes_per_s * self.elementwise_memory_efficiency
        return np.asarray(bytes_moved, dtype=float) / bw + self.elementwise_overhead_s * kernels

    def front_end_latency_s(self, frontend: str = "vllm") -> float:
        """The front end's latency per request: vLLM's API server, or Dynamo's front end."""
        if frontend == "dynamo" and self.dynamo_request_overhead_s is not None:
            return self.dynamo_request_overhead_s
        return self.request_overhead_s

    def engine_cpu_s(self, engine: str = "v1", async_scheduling: bool = False) -> tuple[float, float]:
        """(per step, per running sequence) CPU time of the 'v0' or 'v1' engine (the V1 engine's own
        where it schedules asynchronously, when the profile has one)."""
        if engine == "v0" and self.v0_step_overhead_s is not None:
            return self.v0_step_overhead_s, self.v0_step_overhead_per_seq_s or 0.0
        if async_scheduling and self.async_step_overhead_s is not None:
            return self.async_step_overhead_s, self.async_step_overhead_per_seq_s or 0.0
        return self.step_overhead_s, self.step_overhead_per_seq_s
