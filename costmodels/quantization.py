"""Quantization schemes: bytes per weight, which tensor-core peak applies on each GPU, accuracy cost.

Schemes (names as on the command line):

=========  =====================  ==========================================================
scheme     weights / activations  math on the GPU
=========  =====================  ==========================================================
bf16       16-bit / 16-bit        bf16 (fp16 models: fp16, same peak)
fp8        fp8 e4m3 / fp8         native fp8 on Ada, Hopper, Blackwell, MI300; on Ampere the
                                  weights stay fp8 and are dequantized to bf16 math (Marlin)
int8       int8 / int8 (W8A8)     int8 tensor cores
awq, gptq  int4, group 128 / 16   weights dequantized in the kernel, bf16 math (Marlin);
                                  gptq also covers compressed-tensors W4A16
w8a16      int8 / 16-bit          weight-only int8 (GPTQ 8-bit, compressed-tensors W8A16), Marlin
nvfp4      fp4 + fp8 scale per 16 ModelOpt / compressed-tensors NVFP4: fp4 math on Blackwell, weights
                                  dequantized by FP4 Marlin elsewhere (vLLM needs sm75 or newer)
mxfp4      fp4 + e8 scale per 32  gpt-oss's native MoE format, bf16 math off Blackwell
=========  =====================  ==========================================================

A pre-quantized checkpoint may store its scheme with other group sizes or zero points: its exact
bytes per weight come from :mod:`.checkpoints` (``ModelSpec.weight_scheme``).

Embeddings and the LM head stay in the model dtype, as in vLLM.

Example:
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.quantization import get_scheme, math_dtype
    >>> get_scheme("awq").weight_bytes_per_param
    0.51953125
    >>> math_dtype("fp8", get_gpu("a100-80gb")), math_dtype("fp8", get_gpu("h100"))
    ('bf16', 'fp8')
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal


from .errors import InputError, did_you_mean, unknown_name_error
from .hardware import GPUSpec
from .userfiles import parse_shipped_yaml

WeightScheme = Literal["bf16", "fp16", "fp32", "fp8", "int8", "awq", "gptq", "w8a16", "nvfp4", "mxfp4"]
KVCacheDType = Literal["auto", "fp8"]

# Group-quantized int4: 4-bit weights plus, per group of 128 inputs, an fp16 scale and a
# 4-bit zero point (AWQ packs zeros; GPTQ's g_idx adds 4 bytes per input row, under 0.1%).
_INT4_GROUP_BYTES = 0.5 + (2 + 0.5) / 128


@dataclass(frozen=True)
class QuantScheme:
    """A weight quantization scheme."""

    name: str
    weight_bytes_per_param: float
    activation_dtype: str
    weight_only: bool
    vllm_quantization: str | None
    description: str
    # vLLM's fp8 without calibrated scales takes one scale per tensor from each activation's maximum.
    dynamic_per_tensor_activations: bool = False


# vllm_quantization: the method vLLM 0.33 loads a checkpoint of the scheme with (a checkpoint's own
# metadata decides: costmodels/checkpoints.py); only fp8 is also applied to 16-bit weights at start-up.
SCHEMES: dict[str, QuantScheme] = {
    "bf16": QuantScheme("bf16", 2.0, "bf16", False, None, "unquantized bfloat16"),
    "fp16": QuantScheme("fp16", 2.0, "fp16", False, None, "unquantized float16"),
    "fp32": QuantScheme("fp32", 4.0, "fp32", False, None, "unquantized float32"),
    "fp8": QuantScheme("fp8", 1.0, "fp8", False, "fp8", "FP8 W8A8 (e4m3, dynamic activation scales)", True),
    "int8": QuantScheme("int8", 1.0, "int8", False, "compressed-tensors", "INT8 W8A8 (SmoothQuant/GPTQ)"),
    "awq": QuantScheme("awq", _INT4_GROUP_BYTES, "bf16", True, "auto_awq", "AWQ INT4 weight-only, group 128"),
    "gptq": QuantScheme("gptq", _INT4_GROUP_BYTES, "bf16", True, "auto_gptq", "GPTQ INT4 weight-only, group 128"),
    "w8a16": QuantScheme("w8a16", 1.0 + 2 / 128, "bf16", True, "auto_gptq", "INT8 weight-only, group 128"),
    "nvfp4": QuantScheme("nvfp4", 0.5 + 1 / 16, "fp4", False, "modelopt_fp4", "NVFP4 (fp4 e2m1, fp8 scale per 16)"),
    "mxfp4": QuantScheme("mxfp4", 0.5 + 1 / 32, "bf16", True, "mxfp4", "MXFP4 (gpt-oss MoE weights)"),
}

# Schemes vLLM can apply to an unquantized checkpoint at start-up (``--quantization fp8``); the
# others need a checkpoint that was quantized beforehand.
ONLINE_SCHEMES = frozenset({"fp8"})

_NATIVE_FP8 = frozenset({"ada", "hopper", "blackwell", "cdna3"})

MODEL_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
MODEL_DTYPE_SCHEME = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def get_scheme(name: str) -> QuantScheme:
    try:
        return SCHEMES[name.lower()]
    except KeyError:
        raise unknown_name_error("quantization", name, SCHEMES) from None


def math_dtype(scheme: str, gpu: GPUSpec) -> str:
    """The tensor-core dtype whose peak bounds GEMMs of this scheme on this GPU."""
    quant = get_scheme(scheme)
    if quant.name == "fp8":
        return "fp8" if gpu.architecture in _NATIVE_FP8 else "bf16"
    if quant.name == "int8":
        return "int8"
    if quant.name in ("mxfp4", "nvfp4") and gpu.has_dtype("fp4"):
        return "fp4"
    if quant.name in ("fp16", "fp32"):
        return "fp16" if quant.name == "fp16" else "bf16"
    return "bf16"


def runs_weight_only(scheme: str, gpu: GPUSpec) -> bool:
    """Whether GEMMs of this scheme dequantize the weights into 16-bit math on this GPU: the
    weight-only schemes everywhere, fp8 and nvfp4 where the GPU lacks their tensor cores (vLLM
    then runs FP8 / FP4 Marlin kernels)."""
    quant = get_scheme(scheme)
    if quant.weight_only:
        return True
    if quant.name == "fp8":
        return math_dtype("fp8", gpu) != "fp8"
    if quant.name == "nvfp4":
        return math_dtype("nvfp4", gpu) != "fp4"
    return False


def support_problem(scheme: str, gpu: GPUSpec) -> str | None:
    """Why a scheme cannot run on a GPU, or None when it can."""
    quant = get_scheme(scheme)
    if quant.name == "int8" and not gpu.has_dtype("int8"):
        return f"{gpu.name} has no int8 tensor cores for W8A8"
    if quant.name == "fp32":
        return "fp32 serving is not supported; use bf16"
    if quant.name == "nvfp4" and gpu.architecture == "cdna3":
        return f"{gpu.name} has no NVFP4 kernels in vLLM (FP4 Marlin is CUDA only)"
    return None


def check_supported(scheme: str, gpu: GPUSpec) -> None:
    problem = support_problem(scheme, gpu)
    if problem:
        raise InputError(f"quantization '{scheme}' cannot run on {gpu.name}: {problem}")


def kv_bytes_per_value(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes per cached K/V value: the model dtype for 'auto', one byte for fp8.

    'auto' here is already resolved against the checkpoint (``ModelSpec.kv_cache_dtype``): a
    checkpoint that carries FP8 KV scales gets an fp8 cache under vLLM's 'auto'."""
    if kv_cache_dtype == "auto":
        return MODEL_DTYPE_BYTES[model_dtype]
    if kv_cache_dtype in ("fp8", "fp8_e4m3", "fp8_e5m2"):
        return 1
    raise InputError(f"kv_cache_dtype '{kv_cache_dtype}' is not supported; use auto or fp8")


# ---------------------------------------------------------------------------------------------
# Accuracy penalties
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class AccuracyEntry:
    scheme: str
    model_size_b: float
    drop_pct: float
    metric: str
    source: str


class AccuracyTable:
    """Expected quality drop (percent of the unquantized score) per scheme and model size.

    The value for a model is taken from the entry of that scheme whose size is nearest on a log
    scale. ``overrides`` (scheme -> drop) replaces the table for a scheme whatever the size.
    """

    def __init__(self, entries: list[AccuracyEntry], kv_fp8_drop_pct: float, kv_source: str,
                 overrides: dict[str, float] | None = None):
        self.entries = entries
        self.kv_fp8_drop_pct = kv_fp8_drop_pct
        self.kv_source = kv_source
        self.overrides = dict(overrides or {})

    def with_overrides(self, overrides: dict[str, float]) -> AccuracyTable:
        unknown = set(overrides) - set(SCHEMES) - {"kv_fp8"}
        if unknown:
            first = sorted(unknown)[0]
            raise InputError(f"accuracy overrides: unknown scheme '{first}'{did_you_mean(first, [*SCHEMES, 'kv_fp8'])}; "
                             f"known: {', '.join(sorted(SCHEMES))}, kv_fp8")
        return AccuracyTable(self.entries, self.kv_fp8_drop_pct, self.kv_source, {**self.overrides, **overrides})

    def lookup(self, scheme: str, model_params: float) -> AccuracyEntry | None:
        """The table entry used for a scheme and a model of ``model_params`` parameters."""
        candidates = [e for e in self.entries if e.scheme == scheme]
        if not candidates:
            return None
        size_b = max(model_params / 1e9, 0.1)
        return min(candidates, key=lambda e: abs(math.log(e.model_size_b / size_b)))

    def drop_pct(self, scheme: str, model_params: float, kv_cache_dtype: str = "auto") -> float:
        """Expected quality drop in percent for weights ``scheme`` and the KV dtype."""
        if scheme in self.overrides:
            weight_drop = self.overrides[scheme]
        elif scheme in ("bf16", "fp16", "fp32"):
            weight_drop = 0.0
        else:
            entry = self.lookup(scheme, model_params)
            weight_drop = entry.drop_pct if entry else 0.0
        kv_drop = 0.0
        if kv_cache_dtype != "auto":
            kv_drop = self.overrides.get("kv_fp8", self.kv_fp8_drop_pct)
        return weight_drop + kv_drop


@lru_cache(maxsize=1)
def builtin_accuracy_table() -> AccuracyTable:
    """The shipped table (data/quant_accuracy.yaml, built by scripts/build_quant_accuracy.py)."""
    raw = parse_shipped_yaml(resources.files(__package__).joinpath("data/quant_accuracy.yaml").read_text())
    entries = [AccuracyEntry(**item) for item in raw["weights"]]
    kv = raw["kv_cache"]["fp8"]
    return AccuracyTable(entries, float(kv["drop_pct"]), kv["source"])
