"""Performance profile: the efficiencies and overheads that turn roofline bounds into times.

The cost model never reads files: it is handed a :class:`PerformanceProfile`. servopt's calibration
package fits profiles from microbenchmarks and ships them for measured GPUs; every other GPU gets
:meth:`PerformanceProfile.spec_default`, built from its datasheet alone and marked uncalibrated.

Each kernel family is a roofline with fitted efficiencies::

    time = overhead + max(FLOPs / (peak x compute_eff), bytes / (bandwidth x memory_eff))

where the GEMM compute efficiency varies smoothly with the token count M (knots in log2 M,
linearly interpolated): small-M GEMMs are bandwidth-bound far below peak.

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

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .hardware import GPUSpec

ArrayLike = np.ndarray | float | int


class GemmEfficiency(BaseModel):
    """GEMM roofline efficiencies for one math dtype."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    log2_m_knots: list[float] = Field(min_length=1)
    compute_efficiency: list[float] = Field(min_length=1, description="fraction of peak at each knot")
    memory_efficiency: float = Field(gt=0, le=1.2)
    overhead_s: float = Field(ge=0)

    @model_validator(mode="after")
    def _check_knots(self) -> GemmEfficiency:
        if len(self.log2_m_knots) != len(self.compute_efficiency):
            raise ValueError("log2_m_knots and compute_efficiency must have the same length")
        if any(b <= a for a, b in zip(self.log2_m_knots, self.log2_m_knots[1:])):
            raise ValueError("log2_m_knots must increase")
        if any(e <= 0 for e in self.compute_efficiency):
            raise ValueError("compute efficiencies must be positive")
        return self

    def compute_eff(self, m: ArrayLike) -> np.ndarray:
        return np.interp(np.log2(np.maximum(m, 1)), self.log2_m_knots, self.compute_efficiency)


class AttentionEfficiency(BaseModel):
    """Roofline efficiencies of an attention kernel (prefill or decode)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    compute_efficiency: float = Field(gt=0, le=1.2)
    memory_efficiency: float = Field(gt=0, le=1.2)
    overhead_s: float = Field(ge=0)
    # Prefill: efficiency ramps up with the chunk length (short queries underfill the tiles).
    half_efficiency_query_tokens: float = Field(default=0.0, ge=0)


class CollectiveModel(BaseModel):
    """All-reduce time = latency + bytes x 2(n-1)/n / (link bandwidth x efficiency)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_s: dict[int, float] = Field(description="latency by number of GPUs")
    bandwidth_efficiency: float = Field(gt=0, le=1.2)

    def latency_for(self, num_gpus: int) -> float:
        if num_gpus in self.latency_s:
            return self.latency_s[num_gpus]
        known = sorted(self.latency_s)
        return self.latency_s[min(known, key=lambda n: abs(n - num_gpus))]


class PerformanceProfile(BaseModel):
    """Fitted efficiencies and overheads of one GPU (and serving framework)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str
    calibrated: bool
    source: str = Field(description="where the numbers come from")
    framework: str = "vllm"
    gemm: dict[str, GemmEfficiency] = Field(description="by math dtype: bf16, fp16, fp8, int8, ...")
    attention_prefill: AttentionEfficiency
    attention_decode: AttentionEfficiency
    allreduce: CollectiveModel
    elementwise_memory_efficiency: float = Field(gt=0, le=1.2)
    elementwise_overhead_s: float = Field(ge=0)
    weight_only_compute_factor: float = Field(
        default=0.85, gt=0, le=1, description="share of bf16 GEMM throughput an int4/fp8 weight-only kernel keeps"
    )
    step_overhead_s: float = Field(ge=0, description="per-step CPU time: scheduling, input prep, sampling")
    step_overhead_per_seq_s: float = Field(ge=0)
    p2p_latency_s: float = Field(default=20e-6, ge=0)
    notes: str = ""

    # --- constructors ---------------------------------------------------------------------------
    @classmethod
    def spec_default(cls, gpu: GPUSpec) -> PerformanceProfile:
        """Datasheet-only profile: textbook efficiencies, clearly marked uncalibrated."""
        ramp = GemmEfficiency(
            log2_m_knots=[0, 4, 7, 10, 13],
            compute_efficiency=[0.25, 0.35, 0.55, 0.7, 0.75],
            memory_efficiency=0.75,
            overhead_s=4e-6,
        )
        return cls(
            gpu=gpu.name,
            calibrated=False,
            source=f"spec-derived defaults from the {gpu.display_name} datasheet (uncalibrated)",
            gemm={dtype: ramp for dtype in gpu.peak_tflops},
            attention_prefill=AttentionEfficiency(
                compute_efficiency=0.55, memory_efficiency=0.7, overhead_s=8e-6, half_efficiency_query_tokens=256
            ),
            attention_decode=AttentionEfficiency(compute_efficiency=0.3, memory_efficiency=0.7, overhead_s=6e-6),
            allreduce=CollectiveModel(latency_s={2: 12e-6, 4: 16e-6, 8: 22e-6}, bandwidth_efficiency=0.7),
            elementwise_memory_efficiency=0.6,
            elementwise_overhead_s=2e-6,
            step_overhead_s=2.5e-3,
            step_overhead_per_seq_s=8e-6,
        )

    # --- kernel times ---------------------------------------------------------------------------
    def gemm_efficiency(self, dtype: str) -> GemmEfficiency:
        return self.gemm.get(dtype) or self.gemm["bf16"]

    def gemm_time_s(
        self, gpu: GPUSpec, dtype: str, m: ArrayLike, n: float, k: float, weight_bytes: float, act_bytes: float,
        weight_only: bool = False, count: float = 1.0,
    ) -> np.ndarray:
        """Time of ``count`` GEMMs [m, k] x [k, n] with weights of ``weight_bytes`` per element.

        ``weight_only``: int4/fp8 weights dequantized in the kernel to ``dtype`` math.
        """
        m = np.asarray(m, dtype=float)
        eff = self.gemm_efficiency(dtype)
        flops = 2.0 * m * n * k * count
        peak = gpu.peak_flops(dtype) * eff.compute_eff(m)
        if weight_only:
            peak = peak * self.weight_only_compute_factor
        bytes_moved = count * (n * k * weight_bytes + m * (n + k) * act_bytes)
        memory_s = bytes_moved / (gpu.memory_bandwidth_bytes_per_s * eff.memory_efficiency)
        return np.maximum(flops / peak, memory_s) + eff.overhead_s * count

    def attention_time_s(
        self, gpu: GPUSpec, phase: str, flops: ArrayLike, bytes_moved: ArrayLike, kernels: ArrayLike = 1.0,
        query_tokens: ArrayLike | None = None, dtype: str = "bf16",
    ) -> np.ndarray:
        """Roofline time of attention kernels (phase 'prefill' or 'decode')."""
        eff = self.attention_prefill if phase == "prefill" else self.attention_decode
        compute_eff = eff.compute_efficiency
        if query_tokens is not None and eff.half_efficiency_query_tokens > 0:
            q = np.asarray(query_tokens, dtype=float)
            compute_eff = compute_eff * q / (q + eff.half_efficiency_query_tokens)
        compute_s = np.asarray(flops, dtype=float) / (gpu.peak_flops(dtype) * np.maximum(compute_eff, 1e-6))
        memory_s = np.asarray(bytes_moved, dtype=float) / (gpu.memory_bandwidth_bytes_per_s * eff.memory_efficiency)
        active = np.asarray(kernels, dtype=float) > 0
        return np.where(active, np.maximum(compute_s, memory_s) + eff.overhead_s * np.asarray(kernels), 0.0)

    def allreduce_time_s(self, gpu: GPUSpec, message_bytes: ArrayLike, num_gpus: int, link_bytes_per_s: float | None = None) -> np.ndarray:
        """Ring all-reduce of ``message_bytes`` over ``num_gpus`` GPUs (zero for one GPU)."""
        message_bytes = np.asarray(message_bytes, dtype=float)
        if num_gpus <= 1:
            return np.zeros_like(message_bytes)
        link = link_bytes_per_s or gpu.interconnect_bytes_per_s
        wire = message_bytes * 2 * (num_gpus - 1) / num_gpus
        return self.allreduce.latency_for(num_gpus) + wire / (link * self.allreduce.bandwidth_efficiency)

    def p2p_time_s(self, message_bytes: ArrayLike, link_bytes_per_s: float) -> np.ndarray:
        """Point-to-point send between pipeline stages."""
        return self.p2p_latency_s + np.asarray(message_bytes, dtype=float) / link_bytes_per_s

    def elementwise_time_s(self, gpu: GPUSpec, bytes_moved: ArrayLike, kernels: float) -> np.ndarray:
        """Memory-bound kernels (norms, RoPE, activations, residual adds)."""
        bw = gpu.memory_bandwidth_bytes_per_s * self.elementwise_memory_efficiency
        return np.asarray(bytes_moved, dtype=float) / bw + self.elementwise_overhead_s * kernels

    def step_overhead(self, num_seqs: ArrayLike) -> np.ndarray:
        """Framework time per engine step that no GPU kernel accounts for."""
        return self.step_overhead_s + self.step_overhead_per_seq_s * np.asarray(num_seqs, dtype=float)
