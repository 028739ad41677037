"""Fit a :class:`PerformanceProfile` to a kernel table, and report how well it fits.

One fitter per op family (:class:`GemmFit`, :class:`MoeFit` per fused-MoE weight format,
:class:`AttentionFit` for prefill and decode, :class:`AllReduceFit`, :class:`ElementwiseFit`), all behind :class:`FamilyFit`: select the family's
rows, split them by shape (whole shapes are held out, never single rows, so the held-out error says
how the profile does on a model whose shapes it never saw), fit on the training shapes by robust
least squares on log latency, and predict every row. :func:`fit_profile` runs the fitters that have
rows and takes every other family from a base profile (noted in the profile's ``notes``).

Example (recover known GEMM parameters from synthetic latencies):
    >>> import numpy as np, pandas as pd
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> gpu = get_gpu("h100")
    >>> truth = PerformanceProfile.spec_default(gpu)
    >>> m, n, k = [a.ravel().astype(float) for a in np.meshgrid(2.0 ** np.arange(0, 15), [1024, 4096, 16384], [2048, 8192])]
    >>> ms = truth.gemm_time_s(gpu, "bf16", m, n, k, 2.0, 2.0) * 1e3
    >>> table = pd.DataFrame({"op": "gemm", "dtype": "bf16", "framework": "torch", "m": m, "n": n, "k": k,
    ...                       "latency_ms": ms, "gpu": "h100"})
    >>> outcome = fit_profile(table, gpu, holdout_fraction=0.3)
    >>> float(outcome.report.query("family == 'gemm_bf16' and split == 'held_out'").median_abs_pct.iloc[0]) < 2
    True
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..costmodels.errors import InputError
from ..costmodels.hardware import GPUSpec, get_gpu
from ..costmodels.profile import AttentionEfficiency, CollectiveCurve, GemmEfficiency, MoeEfficiency, PerformanceProfile
from ..costmodels.roofline import activation_quant_bytes
from ..costmodels.engines.vllm import symm_mem_variant
from .tables import DTYPE_BYTES, KERNEL_COLUMNS

# GEMM dtypes whose kernel benchmarks include quantizing the bf16 input (W8A8 linear layers).
QUANTIZED_INPUT_DTYPES = ("fp8", "int8")
# Knots of the GEMM efficiency curves: log2 M where the tile shape and the bound change, and
# log2 N, K over the 1k..16k range of LLM projections (ends extrapolate flat).
GEMM_LOG2_M_KNOTS = [0.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0, 12.0, 14.0]
GEMM_LOG2_NK_KNOTS = [10.0, 12.0, 14.0]
# Ridge weight that keeps the N/K factors near 1 unless the data insist.
FACTOR_RIDGE = 0.3
# Weight of the second differences of the MoE efficiency ramp (in logits).
RAMP_SMOOTHING = 0.1
# Residuals beyond ~5% count linearly (soft L1): the published tables have a few outliers.
ROBUST_SCALE = 0.05


def _sigmoid(x: np.ndarray | float) -> np.ndarray | float:
    return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def _logit(p: float) -> float:
    return float(np.log(p / (1.0 - p)))


# The roofline corner's exponent stays in [1, 50] (50 is a max in all but name).
MAX_SMOOTHNESS = 50.0


def _smoothness(param: float) -> float:
    return float(max(1.0, MAX_SMOOTHNESS * _sigmoid(param)))


def abs_pct_error(predicted: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """|predicted / measured - 1| in percent."""
    return np.abs(np.asarray(predicted, dtype=float) / np.asarray(measured, dtype=float) - 1.0) * 100.0


def split_by_shape(keys: pd.DataFrame, holdout_fraction: float, seed: int = 0) -> np.ndarray:
    """Boolean mask of held-out rows: a seeded random ``holdout_fraction`` of the distinct shapes.

    Example:
        >>> keys = pd.DataFrame({"n": [1, 1, 2, 2, 3, 3], "k": [5, 5, 5, 5, 5, 5]})
        >>> int(split_by_shape(keys, 0.34).sum())
        2
    """
    shapes = keys.drop_duplicates().sort_values(list(keys.columns)).to_numpy()
    held = int(round(len(shapes) * holdout_fraction))
    if holdout_fraction <= 0 or len(shapes) < 3 or held == 0:
        return np.zeros(len(keys), dtype=bool)
    order = np.random.default_rng(seed).permutation(len(shapes))
    chosen = {tuple(shapes[i]) for i in order[:held]}
    return np.array([tuple(row) in chosen for row in keys.to_numpy()])


class FamilyFit(ABC):
    """Fit one op family of the profile: select rows, fit parameters, predict latencies."""

    family: str
    holdout_columns: list[str]

    @abstractmethod
    def select(self, table: pd.DataFrame) -> pd.DataFrame:
        """The rows of this family (already filtered to one GPU and framework)."""

    @abstractmethod
    def initial(self, rows: pd.DataFrame) -> np.ndarray:
        """Starting parameter vector."""

    @abstractmethod
    def apply(self, profile: PerformanceProfile, params: np.ndarray, rows: pd.DataFrame) -> PerformanceProfile:
        """``profile`` with this family's part replaced by the one ``params`` describe."""

    @abstractmethod
    def predict_ms(self, profile: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> np.ndarray:
        """Predicted latency of each row in milliseconds."""

    def penalty(self, params: np.ndarray) -> np.ndarray:
        """Extra residuals that regularize the fit (none by default)."""
        return np.zeros(0)

    def fit(self, base: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> PerformanceProfile:
        measured = rows["latency_ms"].to_numpy(float)

        def residuals(params: np.ndarray) -> np.ndarray:
            predicted = self.predict_ms(self.apply(base, params, rows), gpu, rows)
            return np.concatenate([np.log(np.maximum(predicted, 1e-12) / measured), self.penalty(params)])

        result = least_squares(residuals, self.initial(rows), loss="soft_l1", f_scale=ROBUST_SCALE, max_nfev=400)
        return self.apply(base, result.x, rows)


class GemmFit(FamilyFit):
    """GEMM latency by (m, n, k) for one math dtype."""

    holdout_columns = ["n", "k"]

    def __init__(self, dtype: str):
        self.dtype = dtype
        self.family = f"gemm_{dtype}"

    def select(self, table: pd.DataFrame) -> pd.DataFrame:
        rows = table[(table["op"] == "gemm") & (table["dtype"] == self.dtype)]
        sources = rows["kernel_source"].value_counts()
        # A database may time several kernels per dtype (fp8: per-tensor CUTLASS, block-scaled DeepGEMM,
        # ...); the profile holds one, so fit the most measured (per-tensor in aiconfigurator's tables).
        return rows[rows["kernel_source"] == sources.index[0]] if len(sources) > 1 else rows

    def initial(self, rows: pd.DataFrame) -> np.ndarray:
        ramp = np.linspace(-2.0, 1.5, len(GEMM_LOG2_M_KNOTS))
        factors = np.zeros(4 * len(GEMM_LOG2_NK_KNOTS))
        return np.concatenate([[np.log(4e-6), _logit(0.8)], ramp, factors, [_logit(2.0 / MAX_SMOOTHNESS)]])

    def _unpack(self, params: np.ndarray) -> GemmEfficiency:
        km, kn = len(GEMM_LOG2_M_KNOTS), len(GEMM_LOG2_NK_KNOTS)
        factors = np.exp(params[2 + km: 2 + km + 4 * kn]).reshape(4, kn)
        return GemmEfficiency.model_construct(
            log2_m_knots=GEMM_LOG2_M_KNOTS, compute_efficiency=list(_sigmoid(params[2:2 + km])),
            memory_efficiency=float(1.1 * _sigmoid(params[1])), overhead_s=float(np.exp(params[0])),
            log2_nk_knots=GEMM_LOG2_NK_KNOTS, n_compute_factor=list(factors[0]), k_compute_factor=list(factors[1]),
            n_memory_factor=list(factors[2]), k_memory_factor=list(factors[3]),
            smoothness=_smoothness(params[-1]),
        )

    def penalty(self, params: np.ndarray) -> np.ndarray:
        km = len(GEMM_LOG2_M_KNOTS)
        return FACTOR_RIDGE * params[2 + km: 2 + km + 4 * len(GEMM_LOG2_NK_KNOTS)]

    def apply(self, profile: PerformanceProfile, params: np.ndarray, rows: pd.DataFrame) -> PerformanceProfile:
        return profile.model_copy(update={"gemm": {**profile.gemm, self.dtype: self._unpack(params)}})

    def predict_ms(self, profile: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> np.ndarray:
        weight_bytes = DTYPE_BYTES.get(self.dtype, 2)
        m, n, k = (rows[c].to_numpy(float) for c in ("m", "n", "k"))
        gemm_s = profile.gemm_time_s(gpu, self.dtype, m, n, k, weight_bytes, 2.0)
        if self.dtype in QUANTIZED_INPUT_DTYPES:
            # The 8-bit benchmarks time a whole vLLM linear layer: it quantizes its bf16 input with a
            # dynamic per-tensor scale (a max reduction, then the quantization) before the GEMM.
            gemm_s = gemm_s + profile.elementwise_time_s(gpu, activation_quant_bytes(m, k, True), 2.0)
        return gemm_s * 1e3


# Fused-MoE knots: log2 of the rows each expert's grouped GEMM gets (1 to 16k tokens per expert)
# and of the expert's intermediate width on one GPU (128 to 8k).
MOE_LOG2_TOKENS_KNOTS = [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]
MOE_LOG2_INTER_KNOTS = [7.0, 9.0, 11.0, 13.0]
# The tensor-core math each fused-MoE weight format runs in (vLLM's kernels): 4-bit weight-only
# formats (mxfp4 W4A16 on Hopper and, by default, on Blackwell; int4 Marlin) dequantize into bf16.
MOE_MATH = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8", "mxfp4": "bf16",
            "mxfp4_mxfp8": "fp8", "int4": "bf16", "nvfp4": "fp4"}
# Bytes per weight of each format as the kernels store it: mxfp4 an e8m0 scale per 32 values,
# nvfp4 an fp8 scale per 16, int4 (aiconfigurator's Marlin rows) a bf16 scale per group of 128.
MOE_WEIGHT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp8_block": 1.0 + 4.0 / 128**2, "mxfp4": 0.5 + 1 / 32,
                    "mxfp4_mxfp8": 0.5 + 1 / 32, "int4": 0.5 + 2 / 128, "nvfp4": 0.5 + 1 / 16}
# Padding vLLM applies to mxfp4 experts (vllm/model_executor/layers/quantization/mxfp4.py,
# Mxfp4MoEMethod.create_weights): (kernel-source fragment, intermediate alignment, hidden alignment).
# FlashInfer's TRT-LLM kernels (Blackwell's default) pad both to 256, Marlin 128 / 256, the Triton
# (triton_kernels matmul_ogs) kernel the intermediate size to 64.
MXFP4_PADDING = (("flashinfer_trtllm", 256, 256), ("marlin", 128, 256), ("triton", 64, 1), ("", 64, 1))


def moe_padding(kernel: str, kernel_source: str) -> tuple[int, int]:
    """(intermediate, hidden) alignment vLLM pads a fused-MoE layer's weights to for this kernel."""
    if kernel != "mxfp4":
        return 1, 1
    return next((inter, hidden) for fragment, inter, hidden in MXFP4_PADDING if fragment in kernel_source.lower())


def moe_row_shapes(rows: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per row of a MoE kernel table: tokens, the routed pairs and touched experts of one GPU, its
    expert widths. Balanced rows route round robin (aiconfigurator's ``balanced_logits``: a token's
    k experts a stride apart, so every pair lands on an expert not yet touched until all are);
    other distributions are taken as a uniform random router (the expected distinct experts)."""
    tokens, topk, experts, ep = (rows[c].to_numpy(float) for c in ("num_tokens", "topk", "num_experts", "moe_ep_size"))
    local = experts / ep
    pairs = tokens * topk / ep
    balanced = rows["distribution"].fillna("balanced").astype(str).eq("balanced").to_numpy()
    random = local * (1.0 - (1.0 - topk / experts) ** tokens)
    touched = np.where(balanced, np.minimum(local, pairs), random)
    inter = rows["inter_size"].to_numpy(float) / rows["moe_tp_size"].to_numpy(float)
    return {"pairs": pairs, "touched": touched, "inter": inter, "hidden": rows["hidden_size"].to_numpy(float)}


class MoeFit(FamilyFit):
    """Fused-MoE layer latency (one GPU's routed experts) for one weight format: the
    :class:`~servopt.costmodels.profile.MoeEfficiency` roofline in tokens per expert and expert width.

    Whole model shapes (hidden, intermediate, experts, top-k) are held out, with every parallel
    split and token count of them. A table may time several kernels for one format (FlashInfer,
    Triton, Marlin); the profile holds one per format, the most measured (the one the table's vLLM
    picks for most shapes), named in the entry's ``kernel``. ``source`` fits another kernel the
    table times for the format (its kernel-source names contain it) under the profile key ``key``:
    Hopper's block-FP8 experts run Triton's fused MoE without expert parallelism and FlashInfer's
    CUTLASS kernel with it (:data:`~servopt.costmodels.moe.HOPPER_BLOCK_FP8_TRITON_FOR_TP_FROM`).
    """

    holdout_columns = ["hidden_size", "inter_size", "num_experts", "topk"]

    def __init__(self, kernel: str, source: str | None = None, key: str | None = None):
        self.kernel = kernel
        self.key = key or kernel
        self.family = f"moe_{self.key}"
        self._wanted = source
        self._source = ""

    def select(self, table: pd.DataFrame) -> pd.DataFrame:
        rows = table[(table["op"] == "moe") & (table["dtype"] == self.kernel)]
        if self._wanted is not None:
            rows = rows[rows["kernel_source"].fillna("").str.contains(self._wanted, regex=False)]
        if rows.empty:
            return rows
        dist = rows["distribution"].fillna("balanced")
        rows = rows[dist == ("balanced" if (dist == "balanced").any() else dist.value_counts().index[0])]
        sources = rows["kernel_source"].fillna("").value_counts()
        self._source = str(sources.index[0])
        return rows[rows["kernel_source"].fillna("") == self._source]

    def initial(self, rows: pd.DataFrame) -> np.ndarray:
        ramp = np.linspace(-3.0, 1.0, len(MOE_LOG2_TOKENS_KNOTS))
        return np.concatenate([[np.log(2e-5), _logit(0.6)], ramp, np.zeros(2 * len(MOE_LOG2_INTER_KNOTS)),
                               [_logit(2.0 / MAX_SMOOTHNESS)]])

    def _unpack(self, params: np.ndarray) -> MoeEfficiency:
        kt, ki = len(MOE_LOG2_TOKENS_KNOTS), len(MOE_LOG2_INTER_KNOTS)
        factors = np.exp(params[2 + kt: 2 + kt + 2 * ki]).reshape(2, ki)
        return MoeEfficiency.model_construct(
            kernel=self._source, math_dtype=MOE_MATH.get(self.kernel, "bf16"),
            log2_tokens_per_expert_knots=MOE_LOG2_TOKENS_KNOTS, compute_efficiency=list(_sigmoid(params[2:2 + kt])),
            memory_efficiency=float(1.1 * _sigmoid(params[1])), overhead_s=float(np.exp(params[0])),
            log2_inter_knots=MOE_LOG2_INTER_KNOTS, inter_compute_factor=list(factors[0]),
            inter_memory_factor=list(factors[1]), smoothness=_smoothness(params[-1]),
            inter_alignment=moe_padding(self.kernel, self._source)[0],
            hidden_alignment=moe_padding(self.kernel, self._source)[1],
        )

    def penalty(self, params: np.ndarray) -> np.ndarray:
        # Factors near 1 unless the data insist; the ramp smooth between knots (a knot no row reaches,
        # such as thousands of tokens per expert for a many-expert table, follows its neighbours).
        kt = len(MOE_LOG2_TOKENS_KNOTS)
        return np.concatenate([FACTOR_RIDGE * params[2 + kt: 2 + kt + 2 * len(MOE_LOG2_INTER_KNOTS)],
                               RAMP_SMOOTHING * np.diff(params[2:2 + kt], 2)])

    def apply(self, profile: PerformanceProfile, params: np.ndarray, rows: pd.DataFrame) -> PerformanceProfile:
        return profile.model_copy(update={"moe": {**profile.moe, self.key: self._unpack(params)}})

    def predict_ms(self, profile: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> np.ndarray:
        shape = moe_row_shapes(rows)
        return profile.moe_time_s(gpu, self.key, shape["pairs"], shape["touched"], shape["hidden"], shape["inter"],
                                  MOE_WEIGHT_BYTES.get(self.kernel, 2.0)) * 1e3


def attention_flops_bytes(rows: pd.DataFrame, phase: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FLOPs, bytes, query tokens per sequence) of attention kernel rows.

    Prefill of b sequences of s tokens computes s(s+1)/2 causal pairs each and moves Q, O (model
    dtype) and K, V (cache dtype); decode reads the whole cache of step + 1 tokens per sequence.
    """
    b, heads, kv_heads, head_dim = (rows[c].to_numpy(float) for c in ("batch_size", "num_heads", "num_key_value_heads", "head_dim"))
    kv_bytes = rows["kv_cache_dtype"].map(lambda d: DTYPE_BYTES.get(d, 2)).to_numpy(float)
    if phase == "prefill":
        s = rows["isl"].to_numpy(float)
        flops = 4 * heads * head_dim * b * s * (s + 1) / 2
        bytes_moved = b * s * (2 * heads * head_dim * 2 + 2 * kv_heads * head_dim * kv_bytes)
        return flops, bytes_moved, s
    context = rows["step"].to_numpy(float) + 1
    flops = 4 * heads * head_dim * b * context
    bytes_moved = b * context * 2 * kv_heads * head_dim * kv_bytes + b * 2 * heads * head_dim * 2
    return flops, bytes_moved, np.ones_like(b)


class AttentionFit(FamilyFit):
    """Prefill (context) or decode (generation) attention, bf16 math."""

    holdout_columns = ["num_heads", "num_key_value_heads"]

    def __init__(self, phase: str):
        self.phase = phase
        self.family = f"attention_{phase}"
        self.op = "context_attention" if phase == "prefill" else "generation_attention"

    def select(self, table: pd.DataFrame) -> pd.DataFrame:
        # The profile holds one kernel per phase: fit the bf16 one with a cache in the same dtype
        # (fp8 caches run other kernels; their rows are validated, not fitted).
        half = ["bf16", "fp16"]
        rows = table[(table["op"] == self.op) & table["dtype"].isin(half)]
        if rows.empty:
            return rows
        return rows[rows["head_dim"].notna() & (rows["kv_cache_dtype"].isin(half) | rows["kv_cache_dtype"].isna())]

    def initial(self, rows: pd.DataFrame) -> np.ndarray:
        compute, memory = (0.6, 0.6) if self.phase == "prefill" else (0.3, 0.8)
        return np.array([np.log(1e-5), _logit(compute), _logit(memory), np.log(256.0), np.log(1e-8)])

    def apply(self, profile: PerformanceProfile, params: np.ndarray, rows: pd.DataFrame) -> PerformanceProfile:
        eff = AttentionEfficiency.model_construct(
            overhead_s=float(np.exp(params[0])), compute_efficiency=float(_sigmoid(params[1])),
            memory_efficiency=float(_sigmoid(params[2])),
            half_efficiency_query_tokens=float(np.exp(params[3])) if self.phase == "prefill" else 0.0,
            per_seq_overhead_s=float(np.exp(params[4])),
        )
        return profile.model_copy(update={f"attention_{self.phase}": eff})

    def predict_ms(self, profile: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> np.ndarray:
        flops, bytes_moved, query = attention_flops_bytes(rows, self.phase)
        return profile.attention_time_s(
            gpu, self.phase, flops, bytes_moved, 1.0, query, "bf16", rows["batch_size"].to_numpy(float)
        ) * 1e3


# Collective tables' kernel sources -> the all-reduce implementations vLLM dispatches between
# (servopt.costmodels.engines.vllm.allreduce_implementation). torch.distributed runs NCCL.
ALLREDUCE_SOURCES = {
    "vllm_custom_graph": "custom_graph", "vllm_custom_eager": "custom_eager", "ca_1stage": "custom_graph",
    "symm_mem": "symm_mem", "symm_mem_multimem": "symm_mem", "symm_mem_two_shot": "symm_mem",
    "nccl": "nccl", "pynccl": "nccl", "torch.distributed": "nccl",
}


def allreduce_implementation_of(kernel_source: object) -> str | None:
    """The implementation a collective row measured, or None for kernels vLLM does not run."""
    return ALLREDUCE_SOURCES.get(str(kernel_source).strip().lower())


class _MeasuredCurveFit(FamilyFit):
    """Families whose profile entry is the measurements themselves (no parameters to fit)."""

    def initial(self, rows: pd.DataFrame) -> np.ndarray:
        return np.zeros(0)

    def apply(self, profile: PerformanceProfile, params: np.ndarray, rows: pd.DataFrame) -> PerformanceProfile:
        return profile


class AllReduceFit(_MeasuredCurveFit):
    """Measured all-reduce curves: the median latency at each measured size, per implementation and GPU count.

    Nothing is fitted by least squares: a :class:`CollectiveCurve` interpolates the measurements
    themselves, so the held-out error is the interpolation error at sizes left out.
    """

    family = "all_reduce"
    holdout_columns = ["message_bytes"]

    def select(self, table: pd.DataFrame) -> pd.DataFrame:
        rows = table[(table["op"] == "all_reduce") & table["message_bytes"].notna() & (table["num_gpus"] > 1)]
        # 16-bit messages only: serving all-reduces bf16 activations (nccl-tests also times int8).
        rows = rows[rows["dtype"].isin(["bf16", "fp16"]) | rows["dtype"].isna()]
        rows = rows.assign(implementation=rows["kernel_source"].map(allreduce_implementation_of))
        rows = rows[rows["implementation"].notna()]
        # Symmetric memory has two kernels; vLLM picks one by GPU count and architecture.
        variant = rows["kernel_source"].astype(str).str.extract(r"symm_mem_(multimem|two_shot)$", expand=False)
        runs = [v != v or v == symm_mem_variant(int(n), get_gpu(g))
                for v, n, g in zip(variant, rows["num_gpus"], rows["gpu"])]
        rows = rows[np.asarray(runs, dtype=bool)]
        rows = _without_host_bound_counts(rows)
        # One source per implementation: two benchmarks of the same kernel differ in their launch and
        # timing overheads, and interleaving their sizes would make the curve zigzag. NCCL's own
        # benchmark (nccl-tests) wins over a framework's wrapper; otherwise the most measured.
        keep = []
        for _, part in rows.groupby("implementation"):
            own = part[part["framework"].isin(SHARED_LIBRARY_FRAMEWORKS)]
            part = own if len(own) else part
            # (the symmetric-memory kernels, one per GPU count as selected above, are one benchmark's)
            bench = part["kernel_source"].astype(str).str.replace(r"_(multimem|two_shot)$", "", regex=True)
            keep.append(part[bench == bench.value_counts().index[0]])
        return pd.concat(keep) if keep else rows

    def fit(self, base: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> PerformanceProfile:
        return base.model_copy(update={"allreduce": _measured_curves(rows, "implementation", gpu)})

    def predict_ms(self, profile: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> np.ndarray:
        out = np.empty(len(rows))
        implementation = (rows["implementation"] if "implementation" in rows
                          else rows["kernel_source"].map(allreduce_implementation_of).fillna("nccl"))
        keys = zip(implementation, rows["num_gpus"].astype(int))
        sizes = rows["message_bytes"].to_numpy(float)
        for i, (implementation, n) in enumerate(keys):
            out[i] = float(profile.allreduce_time_s(gpu, sizes[i], n, implementation)) * 1e3
        return out


# On PCIe GPUs the path between the GPUs' links is the host's (switches, CPU root complexes and sockets,
# host memory when P2P is off), and differs from server to server. A ring all-reduce puts 2(n-1)/n of
# the buffer on each GPU's own link whatever the GPU count n, so a count whose peak bus bandwidth falls
# below this share of the best count's measured its server's fabric, not the GPU's link: it is left
# out, and the curve's nearest measured count stands in for it (CollectiveCurve).
HOST_BOUND_BUSBW_SHARE = 0.5


def _without_host_bound_counts(rows: pd.DataFrame) -> pd.DataFrame:
    """All-reduce rows less the GPU counts of PCIe GPUs whose bus bandwidth the host held down."""
    pcie = rows["gpu"].map(lambda g: get_gpu(g).interconnect.startswith("pcie"))
    if not pcie.any():
        return rows
    n = rows["num_gpus"].astype(float)
    busbw = rows["message_bytes"] * 2 * (n - 1) / n / rows["latency_ms"]
    peak = busbw.groupby([rows["gpu"], rows["implementation"], rows["num_gpus"]]).transform("max")
    best = busbw.groupby([rows["gpu"], rows["implementation"]]).transform("max")
    return rows[~pcie | (peak >= HOST_BOUND_BUSBW_SHARE * best)]


# Elementwise rows of hand-written CUDA kernels that vLLM V1 no longer runs: its compiled model
# generates the norms, the activation and RoPE with Inductor (custom ops are off under torch.compile
# by default), so the streaming kernels a table times (copies, PyTorch's own elementwise ops) are
# what those kernels are fitted to; Vidur's timings of the old kernels (about a third of the memory
# bandwidth for RMSNorm) are not.
LEGACY_ELEMENTWISE_KERNELS = frozenset({"input_layernorm", "post_attention_layernorm", "mlp_act"})


def _measured_curves(rows: pd.DataFrame, by: str, gpu: GPUSpec) -> dict[str, CollectiveCurve]:
    """One :class:`CollectiveCurve` per value of ``by``: the median latency at each measured size and GPU count."""
    curves = {}
    for key, part in rows.groupby(by):
        medians = part.groupby(["num_gpus", "message_bytes"])["latency_ms"].median().reset_index()
        points = {int(n): [(float(b), float(ms) / 1e3) for b, ms in zip(g["message_bytes"], g["latency_ms"])]
                  for n, g in medians.groupby("num_gpus")}
        collective = str(part["collective"].iloc[0]) if "collective" in part else "all_reduce"
        curves[str(key)] = CollectiveCurve(link_gbps=gpu.interconnect_gbps, points=points, collective=collective)
    return curves


# Kernel-table op names of the NCCL collectives an MoE layer's dispatch and combine run, and the
# profile's names for them (PerformanceProfile.collectives).
MOE_COLLECTIVES = {"all_gather": "all_gather", "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all",
                   "all_to_all": "all_to_all"}


class NcclCollectiveFit(_MeasuredCurveFit):
    """Measured NCCL all-gather, reduce-scatter and all-to-all curves (nccl-tests), like :class:`AllReduceFit`:
    the measurements themselves, interpolated, so the held-out error is the interpolation error."""

    family = "moe_collectives"
    holdout_columns = ["message_bytes"]

    def select(self, table: pd.DataFrame) -> pd.DataFrame:
        rows = table[table["op"].isin(list(MOE_COLLECTIVES)) & table["message_bytes"].notna() & (table["num_gpus"] > 1)]
        # 16-bit messages: the dispatch moves bf16 activations (nccl-tests also times int8).
        rows = rows[rows["dtype"].isin(["bf16", "fp16"])]
        return rows.assign(collective=rows["op"].map(MOE_COLLECTIVES))

    def fit(self, base: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> PerformanceProfile:
        return base.model_copy(update={"collectives": _measured_curves(rows, "collective", gpu)})

    def predict_ms(self, profile: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> np.ndarray:
        sizes, counts = rows["message_bytes"].to_numpy(float), rows["num_gpus"].astype(int).to_numpy()
        return np.array([float(profile.collective_time_s(gpu, c, b, n)) * 1e3
                         for c, b, n in zip(rows["collective"], sizes, counts)])


# Below this size a streaming kernel is bound by its launch; above the second it streams from HBM
# (larger than any GPU's L2 cache: 50 MB on H100, 126 MB on B200).
LAUNCH_BOUND_BYTES = 2**20
HBM_BOUND_BYTES = 2**27


class ElementwiseFit(FamilyFit):
    """Memory-bound streaming kernels (fused norms, activations, copies): overhead + bytes / (bandwidth x efficiency)."""

    family = "elementwise"
    holdout_columns = ["message_bytes"]

    def select(self, table: pd.DataFrame) -> pd.DataFrame:
        rows = table[table["op"].isin(["elementwise", "memcpy"]) & table["message_bytes"].notna()]
        rows = rows[~rows["kernel_source"].isin(LEGACY_ELEMENTWISE_KERNELS)]
        # The model has a launch floor and an HBM bandwidth, no cache: sizes between (which can
        # stay in L2 and beat the HBM peak) would bend the bandwidth above 100%.
        size = rows["message_bytes"]
        return rows[(size <= LAUNCH_BOUND_BYTES) | (size >= HBM_BOUND_BYTES)]

    def initial(self, rows: pd.DataFrame) -> np.ndarray:
        return np.array([np.log(3e-6), _logit(0.6 / 1.2)])

    def apply(self, profile: PerformanceProfile, params: np.ndarray, rows: pd.DataFrame) -> PerformanceProfile:
        return profile.model_copy(update={"elementwise_overhead_s": float(np.exp(params[0])),
                                          "elementwise_memory_efficiency": float(1.2 * _sigmoid(params[1]))})

    def predict_ms(self, profile: PerformanceProfile, gpu: GPUSpec, rows: pd.DataFrame) -> np.ndarray:
        return profile.elementwise_time_s(gpu, rows["message_bytes"].to_numpy(float), 1.0) * 1e3


def family_fits(table: pd.DataFrame) -> list[FamilyFit]:
    """The fitters for everything a (one-GPU) kernel table measures."""
    # Elementwise first: the 8-bit GEMM benchmarks include quantization kernels timed by its fit.
    fits: list[FamilyFit] = [ElementwiseFit()]
    gemm = table[table["op"] == "gemm"]
    fits += [GemmFit(dtype) for dtype in sorted(gemm["dtype"].dropna().unique())]
    moe = table[table["op"] == "moe"]
    fits += [MoeFit(kernel) for kernel in sorted(moe["dtype"].dropna().unique())]
    # Hopper's block-FP8 Triton experts (vLLM's kernel without expert parallelism), where the table
    # times them beside FlashInfer's.
    block_sources = moe.loc[moe["dtype"] == "fp8_block", "kernel_source"].fillna("").astype(str)
    triton = block_sources.str.contains("triton", regex=False)
    if triton.any() and not triton.all():
        fits.append(MoeFit("fp8_block", source="triton", key="fp8_block_triton"))
    fits += [AttentionFit("prefill"), AttentionFit("decode"), AllReduceFit(), NcclCollectiveFit()]
    return fits


@dataclass(frozen=True)
class FitOutcome:
    """A fitted profile, its error report and the per-row predictions behind it."""

    profile: PerformanceProfile
    report: pd.DataFrame
    predictions: pd.DataFrame


def summarize_errors(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Rows, median and p90 absolute % error of ``frame.abs_pct_error`` per group."""
    grouped = frame.groupby(by, dropna=False)["abs_pct_error"]
    return grouped.agg(rows="size", median_abs_pct="median",
                       p90_abs_pct=lambda e: float(np.percentile(e, 90))).reset_index()


# Libraries every serving framework calls alike (NCCL, through nccl-tests or torch.distributed):
# their rows count as the framework's own.
SHARED_LIBRARY_FRAMEWORKS = frozenset({"nccl-tests"})
SHARED_LIBRARY_SOURCES = frozenset({"torch.distributed"})


def _rows_for_framework(table: pd.DataFrame, framework: str) -> pd.DataFrame:
    """Per op, the framework's own rows (and shared libraries') when the table has them, else all rows of that op."""
    parts = []
    for _, rows in table.groupby("op", sort=False):
        shared = rows["framework"].isin(SHARED_LIBRARY_FRAMEWORKS) | rows["kernel_source"].isin(SHARED_LIBRARY_SOURCES)
        mine = rows[(rows["framework"] == framework.lower()) | shared]
        parts.append(mine if (mine["framework"] == framework.lower()).any() else rows)
    return pd.concat(parts) if parts else table


def fit_profile(
    table: pd.DataFrame, gpu: GPUSpec, framework: str = "vllm", holdout_fraction: float = 0.3,
    base: PerformanceProfile | None = None, source: str = "", seed: int = 0,
) -> FitOutcome:
    """Fit every family the table measures for ``gpu``; the rest comes from ``base``.

    The profile returned is the one fitted on the training shapes, so the held-out errors in its
    report are those of the profile itself.
    """
    if not 0 <= holdout_fraction < 1:
        raise InputError(f"holdout fraction must be in [0, 1), got {holdout_fraction}")
    table = table.reindex(columns=list(dict.fromkeys([*KERNEL_COLUMNS, *table.columns])))
    if "gpu" in table:
        table = table[table["gpu"] == gpu.name]
    if table.empty:
        raise InputError(f"the kernel tables have no rows for GPU '{gpu.name}'")
    table = _rows_for_framework(table.dropna(subset=["latency_ms"]), framework)
    table = table[table["latency_ms"] > 0]
    profile = base or PerformanceProfile.spec_default(gpu)
    fitted, predictions = [], []
    for fitter in family_fits(table):
        rows = fitter.select(table)
        if rows.empty:
            continue
        held = split_by_shape(rows[fitter.holdout_columns], holdout_fraction, seed)
        profile = fitter.fit(profile, gpu, rows[~held])
        predicted = fitter.predict_ms(profile, gpu, rows)
        predictions.append(rows.assign(
            family=fitter.family, split=np.where(held, "held_out", "train"), pred_latency_ms=predicted,
            abs_pct_error=abs_pct_error(predicted, rows["latency_ms"]),
        ))
        fitted.append(fitter.family)
    if not fitted:
        raise InputError(f"the kernel tables have no GEMM, attention, all-reduce or copy rows for '{gpu.name}'")
    predictions = pd.concat(predictions, ignore_index=True)
    report = summarize_errors(predictions, ["family", "split"])
    if "bf16" in profile.gemm and "gemm_bf16" in fitted and "gemm_fp16" not in fitted and "fp16" in gpu.peak_tflops:
        # fp16 and bf16 run on the same tensor cores at the same peak.
        profile = profile.model_copy(update={"gemm": {**profile.gemm, "fp16": profile.gemm["bf16"]}})
    missing = [f for f in ("gemm", "moe", "attention_prefill", "attention_decode", "all_reduce", "elementwise")
               if not any(name.startswith(f) for name in fitted)]
    frameworks = ", ".join(sorted(table["framework"].dropna().unique()))
    profile = PerformanceProfile.model_validate({
        **profile.model_dump(),
        "gpu": gpu.name, "calibrated": True, "framework": framework,
        "source": source or f"fitted by servopt calibrate fit from {len(table)} kernel rows ({frameworks})",
        "fit_report": {f"{r.family}/{r.split}": {"rows": float(r.rows), "median_abs_pct": round(float(r.median_abs_pct), 2),
                                                  "p90_abs_pct": round(float(r.p90_abs_pct), 2)} for r in report.itertuples()},
        "notes": ("not measured, taken from the base profile: " + ", ".join(missing)) if missing else "",
    })
    return FitOutcome(profile, report, predictions)
