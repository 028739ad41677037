"""Mixture-of-experts over GPUs: which GPU holds which experts, how routed tokens spread over them,
and what the dispatch and combine move.

vLLM's layout (``docs/serving/data_parallel_deployment.md`` and ``expert_parallel_deployment.md``):
with ``--data-parallel-size D`` and ``--tensor-parallel-size T`` the MoE layers form one group of
``G = D x T`` GPUs. Without ``--enable-expert-parallel`` the routed experts are tensor-parallel over
``G`` (every GPU holds ``1/G`` of every expert); with it every GPU holds ``E/G`` whole experts
(linear placement). Attention, dense MLP layers, shared experts, embeddings and the LM head stay
tensor-parallel over ``T`` inside each DP rank and are replicated over the ``D`` ranks; every DP rank
runs its own scheduler and keeps its own KV cache. With ``D > 1`` the ranks step in lockstep: a
step pads every rank to the largest token count among them (so that CUDA graphs and collectives
line up), the MoE layers gather all ranks' tokens (dispatch), every GPU runs its experts over them
and the outputs return (combine); an idle rank runs a dummy step to join the collectives.

Load over expert-parallel GPUs: a **multinomial routing model**. Each token picks ``k`` distinct
experts uniformly at random, so the routed (token, expert) pairs landing on a GPU that holds ``m`` of
the ``E`` experts are a sum of hypergeometric counts, mean ``N k m / E`` and variance
``N k (m/E) (1 - m/E) (E - k)/(E - 1)`` over ``N`` tokens. The step waits for the busiest of the ``G``
GPUs: its expected load is taken as the mean plus the expected maximum of ``G`` standard normals
standard deviations, at most every pair a GPU can take. The expected largest of ``G`` normal order
statistics uses Blom's approximation ``Phi^-1((G - 0.375) / (G + 0.25))`` (G. Blom, *Statistical
Estimates and Transformed Beta-Variables*, Wiley 1958; against 200,000 Monte Carlo draws it is 4%
high at G = 2, 2% at G = 4 and within 1% from G = 8 to 64),
and the normal limit of the per-GPU count is the central limit theorem over the ``N`` tokens' routes
(each token's ``k`` picks are drawn without replacement: the hypergeometric variance above).
This is the floor that a perfectly balanced router leaves: trained routers aim at
uniform loads over large batches (DeepSeek-V3's auxiliary-loss-free bias, arXiv 2412.19437 s2.1.2),
but real traffic is skewed more than this (the reason vLLM ships its EPLB rebalancer); no skew
factor beyond the multinomial model is applied, so expert-parallel steps are predicted optimistically.

Which fused-MoE kernel vLLM runs (:func:`moe_kernel`) decides the weight format whose measured
kernel roofline (``PerformanceProfile.moe``) times the experts.

Example:
    >>> layout = ExpertLayout(num_experts=256, experts_per_token=8, dp=8, tp=1, expert_parallel=True)
    >>> layout.group, layout.experts_per_gpu, layout.width_share
    (8, 32.0, 1.0)
    >>> mean = float(layout.mean_pairs_per_gpu(1024)); busiest = float(layout.busiest_pairs_per_gpu(1024))
    >>> mean, 1.0 < busiest / mean < 1.2
    (1024.0, True)
    >>> round(float(layout.distinct_gpus_per_token()), 2)
    5.29
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from .hardware import GPUSpec
from .quantization import QuantScheme, runs_weight_only

ArrayLike = np.ndarray | float | int


# vLLM release from which Hopper runs block-FP8 experts on Triton when no expert parallelism splits
# them and on FlashInfer's CUTLASS kernel under expert parallelism ("On Hopper for Block Fp8, prefer
# Triton for TP and FI CUTLASS for EP": _get_priority_backends, fused_moe/oracle/fp8.py@v0.17.0
# lines 85-95, the same at v0.18.0 and v0.20.0). At v0.15.0 and v0.16.0 the priority list puts
# FLASHINFER_CUTLASS ahead of TRITON for every layout (oracle/fp8.py@v0.16.0 lines 154-166); up
# to v0.14 FlashInfer ran only when VLLM_USE_FLASHINFER_MOE_FP8 asked for it (get_fp8_moe_backend,
# quantization/fp8.py@v0.12.0 lines 126-185), so the experts ran on Triton's fused MoE (or DeepGEMM
# where the deep_gemm package is installed, which servopt does not model).
HOPPER_BLOCK_FP8_TRITON_FOR_TP_FROM = (0, 17, 0)
HOPPER_BLOCK_FP8_FLASHINFER_FROM = (0, 15, 0)


def moe_kernel(scheme: QuantScheme, quantization: str, checkpoint: object | None, gpu: GPUSpec,
               expert_parallel_size: int = 1, version: tuple[int, int, int] | None = None) -> str:
    """The fused-MoE weight format vLLM runs a model's experts in (a key of ``PerformanceProfile.moe``).

    - 16-bit: vLLM's unquantized fused MoE (``UnquantizedFusedMoEMethod``: Triton, or FlashInfer's
      kernels on Blackwell).
    - fp8: block-scaled (``fp8_block``) for checkpoints whose weights carry one scale per block
      (``quant_method: fp8`` with ``weight_block_size``, DeepSeek's and Qwen's releases, or a
      compressed-tensors block strategy: ``Fp8MoEMethod`` with ``block_quant``; on Hopper the kernel
      depends on the release and the layout, :data:`HOPPER_BLOCK_FP8_TRITON_FOR_TP_FROM`:
      ``fp8_block_triton`` for Triton's fused MoE, ``fp8_block`` for FlashInfer's); per-tensor or
      per-channel (``fp8``) for ``--quantization fp8`` and the other FP8 checkpoints
      (``Fp8MoEMethod``, ``ModelOptFp8MoEMethod``, ``CompressedTensorsW8A8Fp8MoEMethod``).
    - mxfp4 (gpt-oss): ``Mxfp4MoEMethod`` (``vllm/model_executor/layers/quantization/mxfp4.py``,
      ``get_mxfp4_backend``): on Hopper the Triton (``triton_kernels`` matmul_ogs) W4A16 kernel, on
      Blackwell FlashInfer's TRT-LLM MXFP4 x BF16 kernel unless an environment variable asks for
      MXFP8 activations, elsewhere Marlin; all three keep 16-bit activations.
    - nvfp4: FlashInfer's FP4 kernels on Blackwell (``nvfp4``).
    - Any other weight-only run (AWQ, GPTQ, W8A16; fp8 and nvfp4 on GPUs without their tensor cores)
      is a Marlin MoE kernel (``int4``: the measured W4A16 Marlin kernel).

    Example:
        >>> from servopt.costmodels.hardware import get_gpu
        >>> from servopt.costmodels.quantization import get_scheme
        >>> [moe_kernel(get_scheme(q), q, None, get_gpu("h100")) for q in ("bf16", "fp8", "mxfp4", "awq", "nvfp4")]
        ['bf16', 'fp8', 'mxfp4', 'int4', 'int4']
        >>> from servopt.costmodels.checkpoints import checkpoint_format
        >>> block = checkpoint_format({"quant_method": "fp8", "weight_block_size": [128, 128]})
        >>> [moe_kernel(get_scheme("fp8"), "fp8", block, get_gpu("h200"), ep, v)
        ...  for ep, v in ((1, (0, 18, 0)), (8, (0, 18, 0)), (1, (0, 16, 0)), (1, (0, 7, 2)))]
        ['fp8_block_triton', 'fp8_block', 'fp8_block', 'fp8_block_triton']
    """
    name = scheme.name
    if name == "mxfp4":
        return "mxfp4"
    if runs_weight_only(quantization, gpu):
        return "int4"
    if name == "fp8":
        block = checkpoint is not None and getattr(checkpoint, "block_size", None) is not None
        if block and gpu.architecture == "hopper" and version is not None and (
                version < HOPPER_BLOCK_FP8_FLASHINFER_FROM
                or (version >= HOPPER_BLOCK_FP8_TRITON_FOR_TP_FROM and expert_parallel_size == 1)):
            return "fp8_block_triton"
        return "fp8_block" if block else "fp8"
    if name in ("fp16", "nvfp4", "int8"):
        return name
    return "bf16"


def expected_max_standard_normal(count: int) -> float:
    """Expected largest of ``count`` independent standard normals (Blom's approximation; 0 for one)."""
    if count <= 1:
        return 0.0
    return NormalDist().inv_cdf((count - 0.375) / (count + 0.25))


@dataclass(frozen=True)
class ExpertLayout:
    """How one MoE layer's routed experts sit on its ``dp x tp`` GPUs."""

    num_experts: int
    experts_per_token: int
    dp: int = 1
    tp: int = 1
    expert_parallel: bool = False

    @property
    def group(self) -> int:
        """GPUs the routed experts are spread over."""
        return self.dp * self.tp

    @property
    def experts_per_gpu(self) -> float:
        """Experts a GPU computes (all of them, in slices, without expert parallelism)."""
        return self.num_experts / self.group if self.expert_parallel else float(self.num_experts)

    @property
    def width_share(self) -> float:
        """Share of each held expert's weights on one GPU."""
        return 1.0 if self.expert_parallel else 1.0 / self.group

    def mean_pairs_per_gpu(self, tokens: ArrayLike) -> np.ndarray:
        """Routed (token, expert) pairs one GPU computes on average for ``tokens`` gathered tokens."""
        return np.asarray(tokens, dtype=float) * self.experts_per_token * self.experts_per_gpu / self.num_experts

    def busiest_pairs_per_gpu(self, tokens: ArrayLike) -> np.ndarray:
        """Expected pairs on the busiest GPU (the multinomial routing model of the module docstring)."""
        mean = self.mean_pairs_per_gpu(tokens)
        if not self.expert_parallel or self.group == 1:
            return mean
        e, k, share = self.num_experts, self.experts_per_token, self.experts_per_gpu / self.num_experts
        tokens = np.asarray(tokens, dtype=float)
        sigma = np.sqrt(tokens * k * share * (1 - share) * (e - k) / (e - 1))
        cap = tokens * min(k, self.experts_per_gpu)
        return np.minimum(mean + expected_max_standard_normal(self.group) * sigma, cap)

    def touched_experts_per_gpu(self, tokens: ArrayLike) -> np.ndarray:
        """Held experts that at least one of ``tokens`` gathered tokens routes to (their weights are read)."""
        tokens = np.asarray(tokens, dtype=float)
        untouched = (1.0 - self.experts_per_token / self.num_experts) ** tokens
        return self.experts_per_gpu * (1.0 - untouched)

    def distinct_gpus_per_token(self) -> float:
        """Expert-parallel GPUs one token's ``k`` experts live on (what an all-to-all dispatch sends it to)."""
        if not self.expert_parallel:
            return float(self.group)
        e, k, held = self.num_experts, self.experts_per_token, self.experts_per_gpu
        # P(none of the k distinct experts is on a given GPU), drawing without replacement.
        miss = math.prod((e - held - i) / (e - i) for i in range(k)) if e - held >= k else 0.0
        return self.group * (1.0 - miss)
