"""Pre-quantized checkpoints: what their quantization metadata means for serving, and a catalog.

:func:`checkpoint_format` reads a checkpoint's quantization metadata (``quantization_config`` in
``config.json``, or ModelOpt's ``hf_quant_config.json``) into a :class:`CheckpointFormat`: the
servopt scheme it runs as, how its weights are scaled (per tensor, per channel, per 128 x 128
block, per group), the vLLM method that loads it and the kernels that run it, its bytes per
weight, and what vLLM's ``--kv-cache-dtype auto`` means for it. Nothing is read from a name.

Three FP8 layouts that vLLM runs on different kernels are kept apart:

- block FP8: ``quant_method: fp8`` with ``weight_block_size`` (Qwen's and DeepSeek's FP8
  releases): ``Fp8LinearMethod`` with ``block_quant`` (one fp32 scale per 128 x 128 weight block,
  per-token-group activation scales) and the block-quantized ``Fp8MoEMethod``
  (``vllm/model_executor/layers/quantization/fp8.py@v0.33.0``, lines 100-173, 257-270, 483-500);
- per-tensor FP8: ``quant_method: fp8`` without blocks (AutoFP8), ModelOpt ``quant_algo: FP8``;
- compressed-tensors FP8 (llm-compressor), by its weights' ``strategy`` (tensor, channel or block:
  ``CompressedTensorsW8A8Fp8``, ``compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py@v0.33.0``).

The vLLM method is the one vLLM 0.33 picks for the checkpoint, which an explicit
``--quantization`` must equal (``ModelConfig._verify_quantization``,
``vllm/config/model.py@v0.33.0`` lines 1383-1462: the override methods are probed in order and the
first that claims the checkpoint wins): AWQ checkpoints load as ``auto_awq``
(``quantization/auto_awq.py@v0.33.0`` lines 263-286), GPTQ as ``auto_gptq`` (``auto_gptq.py``
lines 214-233), ModelOpt FP8 / NVFP4 as ``modelopt`` / ``modelopt_fp4`` (``modelopt.py`` lines
453-459, 776-782), gpt-oss's mxfp4 as ``gpt_oss_mxfp4`` (``mxfp4.py`` lines 129-146); ``fp8`` and
``compressed-tensors`` are their own methods.

vLLM (checked in its source, 0.19 to 0.33) gives a checkpoint an fp8 KV cache under ``auto`` in
two cases:

- compressed-tensors (llm-compressor) with a ``kv_cache_scheme``: the Attention layer sets the
  cache dtype to fp8 (``vllm/model_executor/layers/attention/attention.py``, "llm-compressor
  models need to set cache_dtype to fp8 manually");
- ModelOpt with ``kv_cache_quant_algo: FP8`` (or a float 8-bit ``kv_cache_scheme``):
  ``resolve_kv_cache_dtype_string`` in ``vllm/utils/torch_utils.py`` maps ``auto`` to fp8_e4m3.

Plain ``quant_method: fp8`` checkpoints, AWQ and GPTQ keep the model dtype.

Which linear layers a checkpoint leaves unquantized is its own metadata: the module names it
excludes (ModelOpt's ``exclude_modules`` / ``ignore``, compressed-tensors' ``ignore``, fp8's
``ignored_layers`` / ``modules_to_not_convert``, AWQ's ``modules_to_not_convert``), matched as vLLM
matches them when it loads each layer (:meth:`CheckpointFormat.keeps_unquantized`); such a layer runs
vLLM's ``UnquantizedLinearMethod`` in the model dtype. NVIDIA's NVFP4 releases of MiniMax-M2.5 and
Kimi-K2.5 keep every attention projection in bf16, Kimi-K2.5's INT4 release its attention, shared
experts and dense MLP too. mxfp4 quantizes only the experts: vLLM has no mxfp4 linear method
(``Mxfp4Config.get_quant_method`` serves every linear layer unquantized, ``mxfp4.py@v0.33.0`` lines
91-105).

:func:`checkpoint_catalog` lists public checkpoints per base model with the accuracy their cards
publish (``data/checkpoints.yaml``, built by ``scripts/build_checkpoint_catalog.py``), each with
its own config where a public copy was found.

Example:
    >>> fmt = checkpoint_format({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True})
    >>> fmt.scheme, fmt.method, round(fmt.weight_bytes_per_param, 4), fmt.kv_cache_dtype
    ('awq', 'auto_awq', 0.5195, None)
    >>> block = checkpoint_format({"quant_method": "fp8", "weight_block_size": [128, 128]})
    >>> block.method, block.granularity, block.block_size, round(block.weight_bytes_per_param, 6)
    ('fp8', 'block', (128, 128), 1.000244)
    >>> checkpoint_format({}, {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}).kv_cache_dtype
    'fp8'
    >>> nvfp4 = checkpoint_format({}, {"producer": {"name": "modelopt"}, "quantization": {
    ...     "quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}})
    >>> nvfp4.keeps_unquantized("model.layers.0.self_attn.q_proj"), nvfp4.keeps_unquantized("model.layers.1.self_attn.q_proj")
    (True, False)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .errors import InputError
from .quantization import SCHEMES, QuantScheme
from .userfiles import parse_shipped_yaml

# Bytes of one scale (or zero point) value by the dtype checkpoints store it in.
_SCALE_BYTES = {"fp16": 2.0, "bf16": 2.0, "fp32": 4.0, "fp8": 1.0, "e8m0": 1.0}

Granularity = Literal["tensor", "channel", "block", "group"]

# vLLM's kernels for each (method, granularity), as a plan or a report names them (vLLM 0.33:
# fp8.py, compressed_tensors/schemes/, modelopt.py, auto_awq.py, auto_gptq.py, mxfp4.py).
_KERNELS = {
    ("fp8", "block"): "Fp8LinearMethod block-scaled GEMM (128x128 weight blocks, per-token-group activations); "
                      "block-quantized Fp8MoEMethod experts",
    ("fp8", "tensor"): "Fp8LinearMethod per-tensor FP8 GEMM; Fp8MoEMethod per-tensor experts",
    ("compressed-tensors", "block"): "CompressedTensorsW8A8Fp8 block strategy",
    ("compressed-tensors", "channel"): "CompressedTensorsW8A8Fp8 / W8A8Int8 per-channel scaled GEMM",
    ("compressed-tensors", "tensor"): "CompressedTensorsW8A8Fp8 per-tensor scaled GEMM",
    ("compressed-tensors", "group"): "CompressedTensorsWNA16 (Marlin) / W4A4 NVFP4 grouped kernels",
    ("modelopt", "tensor"): "ModelOptFp8LinearMethod per-tensor FP8 GEMM; ModelOptFp8MoEMethod experts",
    ("modelopt_fp4", "group"): "ModelOptNvFp4LinearMethod (FP4 GEMM on Blackwell, FP4 Marlin elsewhere)",
    ("auto_awq", "group"): "AutoAWQ Marlin W4A16 GEMM and MoE Marlin",
    ("auto_gptq", "group"): "AutoGPTQ Marlin WNA16 GEMM and MoE Marlin",
    ("auto_gptq", "channel"): "AutoGPTQ Marlin WNA16 GEMM (per-channel scales)",
    ("gpt_oss_mxfp4", "group"): "GptOssMxfp4MoEMethod (Triton matmul_ogs on Hopper, FlashInfer on Blackwell)",
    ("mxfp4", "group"): "Mxfp4MoEMethod",
}


class CheckpointFormat(BaseModel):
    """How a pre-quantized checkpoint stores its weights, and how vLLM serves it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: str = Field(description="servopt scheme it runs as: fp8, int8, awq, gptq, w8a16, nvfp4, mxfp4")
    method: str = Field(description="the vLLM method that loads it (what vLLM 0.33 picks; the --quantization value)")
    weight_bits: int = Field(gt=0, le=16)
    granularity: Granularity | None = Field(
        default=None, description="how the weights are scaled: per tensor, output channel, weight block or group")
    group_size: int | None = Field(default=None, description="inputs per scale (granularity group)")
    block_size: tuple[int, int] | None = Field(default=None, description="weight block of one scale (block FP8)")
    scale_dtype: Literal["fp16", "bf16", "fp32", "fp8", "e8m0"] = "fp16"
    zero_point: bool = False
    kv_cache_dtype: Literal["fp8"] | None = Field(
        default=None, description="what kv_cache_dtype auto means for it (None: the model dtype)")
    source: str = Field(default="", description="where the format was read: config.json, hf_quant_config.json, card")
    ignore: tuple[str, ...] = Field(default=(), description="module names or patterns the checkpoint leaves unquantized")
    ignore_match: Literal["exact", "substring", "modelopt", "compressed-tensors"] = Field(
        default="exact", description="how vLLM's loader for this method matches a module against ``ignore``")
    quantizes_linear: bool = Field(
        default=True, description="whether the method quantizes linear layers at all (mxfp4: only the experts)")

    def keeps_unquantized(self, module: str) -> bool:
        """Whether vLLM serves the linear layer ``module`` (a checkpoint name such as
        ``model.layers.0.self_attn.q_proj``) unquantized, matching ``ignore`` as this method's loader does:

        - ``exact``: the name itself is listed (``is_layer_skipped``, ``quantization/utils/quant_utils.py@v0.33.0``
          line 619; ``Fp8Config`` keeps its exact mode, ``fp8.py@v0.33.0`` lines 117-120);
        - ``substring``: a listed name is part of it (AutoAWQ, ``match_mode="substring"``, ``auto_awq.py@v0.33.0``
          line 298);
        - ``modelopt``: exact, a listed name inside it (also without a ``language_model.`` prefix), or an
          fnmatch wildcard (``is_layer_excluded``, ``modelopt.py@v0.33.0`` lines 191-226);
        - ``compressed-tensors``: exact, or a ``re:`` pattern matched from the start (``should_ignore_layer``,
          ``compressed_tensors/utils.py@v0.33.0`` line 53, through compressed-tensors' equal-or-regex match).
        """
        if not self.quantizes_linear:
            return True
        for pattern in self.ignore:
            if pattern == module:
                return True
            if self.ignore_match == "substring" and pattern in module:
                return True
            if self.ignore_match == "modelopt" and (
                    pattern in module or pattern in module.removeprefix("language_model.") or fnmatch(module, pattern)):
                return True
            if self.ignore_match == "compressed-tensors" and pattern.startswith("re:") and re.match(pattern[3:], module):
                return True
        return False

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes per quantized weight: the packed values plus each group's (or block's) scale and zero point."""
        per_value = self.weight_bits / 8
        if self.block_size:
            return per_value + _SCALE_BYTES[self.scale_dtype] / (self.block_size[0] * self.block_size[1])
        if not self.group_size:
            return per_value  # one scale per output channel or tensor: under 0.1%
        extra = _SCALE_BYTES[self.scale_dtype] + (self.weight_bits / 8 if self.zero_point else 0.0)
        return per_value + extra / self.group_size

    @property
    def kernels(self) -> str:
        """The vLLM linear and MoE methods that run this format."""
        return _KERNELS.get((self.method, self.granularity or ""), f"vLLM's {self.method} kernels")

    def metadata(self) -> tuple[dict, dict | None]:
        """The quantization metadata this format stands for (``quantization_config``, and ModelOpt's
        ``hf_quant_config.json``), as the quantizer named by :attr:`method` writes it: what a card's
        format says the checkpoint's config holds, for checking vLLM's pick against it."""
        if self.method in ("modelopt", "modelopt_fp4"):
            quant = {"quant_algo": "FP8" if self.method == "modelopt" else "NVFP4",
                     "kv_cache_quant_algo": "FP8" if self.kv_cache_dtype else None}
            if self.group_size:
                quant["group_size"] = self.group_size
            return {}, {"producer": {"name": "modelopt"}, "quantization": quant}
        if self.method == "auto_awq":
            return {"quant_method": "awq", "bits": self.weight_bits, "group_size": self.group_size,
                    "zero_point": self.zero_point, "version": "gemm"}, None
        if self.method == "auto_gptq":
            return {"quant_method": "gptq", "bits": self.weight_bits, "group_size": self.group_size or -1,
                    "sym": not self.zero_point, "desc_act": False}, None
        if self.method in ("fp8", "fbgemm_fp8", "mxfp4", "gpt_oss_mxfp4"):
            quant: dict[str, Any] = {"quant_method": "mxfp4" if "mxfp4" in self.method else self.method}
            if self.block_size:
                quant.update(weight_block_size=list(self.block_size), activation_scheme="dynamic")
            return quant, None
        kind = "float" if self.scheme in ("fp8", "nvfp4") else "int"
        weights = {"num_bits": self.weight_bits, "type": kind, "symmetric": not self.zero_point,
                   "strategy": "tensor_group" if self.scheme == "nvfp4" else self.granularity or "channel"}
        if self.group_size:
            weights["group_size"] = self.group_size
        if self.block_size:
            weights["block_structure"] = list(self.block_size)
        acts = None if SCHEMES[self.scheme].weight_only else {"num_bits": self.weight_bits, "type": kind, "dynamic": True}
        group = {"targets": ["Linear"], "weights": weights, "input_activations": acts}
        kv = {"num_bits": 8, "type": "float", "strategy": "tensor"} if self.kv_cache_dtype else None
        return {"quant_method": "compressed-tensors", "config_groups": {"group_0": group}, "kv_cache_scheme": kv}, None

    def quant_scheme(self) -> QuantScheme:
        """The scheme with this checkpoint's exact bytes per weight."""
        base = SCHEMES[self.scheme]
        return QuantScheme(base.name, self.weight_bytes_per_param, base.activation_dtype, base.weight_only,
                           self.method, f"{base.description} ({self.describe()})")

    def describe(self) -> str:
        if self.block_size:
            layout = f", {self.block_size[0]}x{self.block_size[1]} blocks"
        elif self.group_size:
            layout = f", group {self.group_size}"
        else:
            layout = f", per {self.granularity}" if self.granularity else ""
        kv = ", fp8 KV scales (kv_cache_dtype auto = fp8)" if self.kv_cache_dtype else ""
        return f"{self.method} {self.scheme}, {self.weight_bits}-bit weights{layout}{kv}"


def _kv_from_scheme(kv_scheme: Any) -> Literal["fp8"] | None:
    if isinstance(kv_scheme, dict) and kv_scheme.get("type") == "float" and kv_scheme.get("num_bits") == 8:
        return "fp8"
    if isinstance(kv_scheme, str) and kv_scheme.lower().startswith("fp8"):
        return "fp8"
    return None


def _block(value: Any, source: str, key: str) -> tuple[int, int]:
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise InputError(f"{source}: {key} must be two positive integers such as [128, 128], got {value!r}")
    return int(value[0]), int(value[1])


def _ignored(quant: dict, *keys: str) -> tuple[str, ...]:
    """The module names listed under the first of ``keys`` the metadata has."""
    for key in keys:
        value = quant.get(key)
        if value:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InputError(f"quantization metadata: '{key}' must be a list of module names")
            return tuple(value)
    return ()


def _whole(quant: dict, keys: tuple[str, ...], default: int, source: str) -> tuple[str, int]:
    """The first of ``keys`` the metadata sets (its name and value), else ``default``; a value that is
    not a whole number is refused naming the key."""
    key = next((k for k in keys if quant.get(k) is not None), keys[0])
    value = quant.get(key, default)
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{source}: {key} must be a whole number, got {value!r}")
    return key, value


def _weight_bits(quant: dict, keys: tuple[str, ...], served: tuple[int, ...], method: str, source: str) -> int:
    """Bits per weight (default 4), one of those vLLM's kernels serve for ``method``."""
    key, bits = _whole(quant, keys, 4, source)
    if bits not in served:
        raise InputError(f"{source}: {key} {bits}: {method} with {bits}-bit weights is not served by vLLM "
                         f"({' or '.join(map(str, served))} bits)")
    return bits


def _group_size(quant: dict, keys: tuple[str, ...], default: int, source: str) -> int | None:
    """Inputs per scale (default ``default``); -1 is one scale per output channel (None here)."""
    key, size = _whole(quant, keys, default, source)
    if size == -1:
        return None
    if size <= 0:
        raise InputError(f"{source}: {key} {size} is not a group size: give the inputs that share a scale (e.g. 128), "
                         "or -1 for one scale per channel")
    return size


def _compressed_tensors(quant: dict, source: str) -> CheckpointFormat:
    kv = _kv_from_scheme(quant.get("kv_cache_scheme"))
    fmt = str(quant.get("format") or "").lower()
    groups = quant.get("config_groups") or {}
    if not isinstance(groups, dict) or not all(isinstance(g, dict | None) for g in groups.values()):
        raise InputError(f"{source}: config_groups must be a mapping of group names to their schemes")
    for group in groups.values():
        weights = (group or {}).get("weights") or {}
        if not isinstance(weights, dict):
            raise InputError(f"{source}: a config_groups entry's weights must be a mapping, got {weights!r:.60}")
        acts = (group or {}).get("input_activations") or None
        bits, kind = weights.get("num_bits"), weights.get("type")
        strategy = str(weights.get("strategy") or "tensor").lower()
        size = _group_size(weights, ("group_size",), -1, f"{source} weights") if strategy in ("group", "tensor_group") \
            else None
        zero = weights.get("symmetric") is False
        granularity: Granularity = ("group" if size else "block" if strategy == "block"
                                    else "channel" if strategy == "channel" else "tensor")
        block = _block(weights.get("block_structure"), source, "weights.block_structure") if granularity == "block" else None
        common = {"method": "compressed-tensors", "kv_cache_dtype": kv, "source": source,
                  "ignore": _ignored(quant, "ignore"), "ignore_match": "compressed-tensors"}
        if kind == "float" and bits == 4:
            return CheckpointFormat(scheme="nvfp4", weight_bits=4, granularity="group", group_size=size or 16,
                                    scale_dtype="fp8", **common)
        if kind == "float" and bits == 8:
            return CheckpointFormat(scheme="fp8", weight_bits=8, granularity=granularity, block_size=block,
                                    scale_dtype="fp32" if block else "fp16", **common)
        if kind == "int" and bits == 8:
            scheme = "int8" if acts else "w8a16"  # W8A8 runs int8 tensor cores; W8A16 is weight-only
            return CheckpointFormat(scheme=scheme, weight_bits=8, granularity=granularity, group_size=size,
                                    scale_dtype="bf16", zero_point=zero, **common)
        if kind == "int" and bits == 4:
            # W4A16 runs on the Marlin kernels GPTQ uses; scales are stored in the model dtype.
            return CheckpointFormat(scheme="gptq", weight_bits=4, granularity=granularity, group_size=size,
                                    scale_dtype="bf16", zero_point=zero, **common)
    raise InputError(f"{source}: compressed-tensors quantization with format '{fmt or '?'}' and no weight "
                     "scheme servopt models in its config_groups (fp8, int8, int4, nvfp4)")


def _modelopt(quant: dict, source: str) -> CheckpointFormat:
    inner = quant.get("quantization") if isinstance(quant.get("quantization"), dict) else quant
    algo = str(inner.get("quant_algo") or quant.get("quant_algo") or "").upper()
    kv_algo = (inner.get("kv_cache_scheme") or quant.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
               or quant.get("kv_cache_quant_algo"))
    kv = _kv_from_scheme(kv_algo)
    # hf_quant_config.json lists them under quantization.exclude_modules, config.json under ignore
    # (ModelOptQuantConfigBase.from_config, modelopt.py@v0.33.0 lines 342 and 359).
    ignore = {"ignore": _ignored(inner, "exclude_modules") or _ignored(quant, "ignore", "exclude_modules"),
              "ignore_match": "modelopt"}
    if algo == "FP8":
        return CheckpointFormat(scheme="fp8", method="modelopt", weight_bits=8, granularity="tensor",
                                kv_cache_dtype=kv, source=source, **ignore)
    if algo == "NVFP4":
        size = _group_size(inner, ("group_size",), 16, source) or 16
        return CheckpointFormat(scheme="nvfp4", method="modelopt_fp4", weight_bits=4, granularity="group",
                                group_size=size, scale_dtype="fp8", kv_cache_dtype=kv, source=source, **ignore)
    raise InputError(f"{source}: ModelOpt quant_algo '{algo or '?'}' is not modelled; servopt reads FP8 and NVFP4")


def checkpoint_format(quant: dict | None, hf_quant: dict | None = None, source: str = "config.json",
                      model_type: str | None = None) -> CheckpointFormat | None:
    """The format a checkpoint's quantization metadata describes, or None for an unquantized one.

    ``quant`` is ``config.json``'s ``quantization_config``; ``hf_quant`` is ModelOpt's
    ``hf_quant_config.json`` (which older ModelOpt exports ship instead); ``model_type`` is the
    config's (vLLM loads gpt-oss's mxfp4 with its own method). Unknown methods raise
    :class:`InputError` rather than being served as 16-bit weights.
    """
    if hf_quant and str((hf_quant.get("producer") or {}).get("name", "modelopt")).lower() == "modelopt":
        return _modelopt(hf_quant, "hf_quant_config.json")
    if not quant:
        return None
    if not isinstance(quant, dict):
        raise InputError(f"{source}: quantization_config must be a JSON object")
    method = str(quant.get("quant_method") or "").lower()
    source = f"{source} quantization_config"
    # A bits or group size of 0 once read as the default (4-bit, group 128), and -128 as "group -128".
    if method in ("awq", "awq_marlin"):
        bits = _weight_bits(quant, ("bits", "w_bit"), (4, 8), "AWQ", source)
        size = _group_size(quant, ("group_size", "q_group_size"), 128, source)
        return CheckpointFormat(scheme="awq" if bits == 4 else "w8a16", method="auto_awq", weight_bits=bits,
                                granularity="group" if size else "channel", group_size=size,
                                zero_point=bool(quant.get("zero_point", True)), source=source,
                                ignore=_ignored(quant, "modules_to_not_convert"), ignore_match="substring")
    if method in ("gptq", "gptq_marlin"):
        bits = _weight_bits(quant, ("bits",), (4, 8), "GPTQ (vLLM's Marlin kernels)", source)
        size = _group_size(quant, ("group_size",), 128, source)
        return CheckpointFormat(scheme="gptq" if bits == 4 else "w8a16", method="auto_gptq", weight_bits=bits,
                                granularity="group" if size else "channel", group_size=size,
                                zero_point=not quant.get("sym", True), source=source)
    if method == "fp8":
        # Fp8Config.from_config reads ignored_layers, else modules_to_not_convert (fp8.py@v0.33.0 lines 160-168).
        ignore = _ignored(quant, "ignored_layers", "modules_to_not_convert")
        if quant.get("weight_block_size") is not None:
            return CheckpointFormat(scheme="fp8", method="fp8", weight_bits=8, granularity="block",
                                    block_size=_block(quant["weight_block_size"], source, "weight_block_size"),
                                    scale_dtype="fp32", source=source, ignore=ignore)
        return CheckpointFormat(scheme="fp8", method="fp8", weight_bits=8, granularity="tensor", source=source,
                                ignore=ignore)
    if method == "fbgemm_fp8":
        return CheckpointFormat(scheme="fp8", method="fbgemm_fp8", weight_bits=8, granularity="channel", source=source)
    if method == "mxfp4":
        return CheckpointFormat(scheme="mxfp4", method="gpt_oss_mxfp4" if model_type == "gpt_oss" else "mxfp4",
                                weight_bits=4, granularity="group", group_size=32, scale_dtype="e8m0", source=source,
                                quantizes_linear=False)
    if method == "compressed-tensors":
        return _compressed_tensors(quant, source)
    if method.startswith("modelopt"):
        return _modelopt(quant, source)
    raise InputError(f"{source}: quant_method '{method or '?'}' is not modelled; servopt reads compressed-tensors, "
                     "AWQ, GPTQ, fp8, ModelOpt (FP8, NVFP4) and mxfp4 checkpoints")


# --- the catalog of public checkpoints ----------------------------------------------------------

@dataclass(frozen=True)
class CatalogCheckpoint:
    """A public pre-quantized checkpoint of a base model, with its card's accuracy recovery.

    ``format.source`` says where the format was read: the checkpoint's own config (a public copy,
    ``config: repository@commit:path``; the model catalog then ships that config) or its card
    (``card: ...``; the checkpoint then has its first base's architecture, which the card states
    it keeps).
    """

    id: str
    bases: tuple[str, ...]
    format: CheckpointFormat
    recovery_pct: float | None
    recovery_metric: str
    source: str
    aliases: tuple[str, ...] = ()

    @property
    def from_config(self) -> bool:
        """Whether the format was read from the checkpoint's own config (else from its card)."""
        return self.format.source.startswith("checkpoint catalog (config:")

    @property
    def accuracy_drop_pct(self) -> float | None:
        """100 - recovery, never below 0 (a card's >100% recovery is noise, not a gain to bank)."""
        return None if self.recovery_pct is None else max(0.0, 100.0 - self.recovery_pct)


@lru_cache(maxsize=1)
def checkpoint_catalog() -> tuple[CatalogCheckpoint, ...]:
    """The shipped catalog (``data/checkpoints.yaml``), in file order (preferred first per scheme)."""
    raw = parse_shipped_yaml(resources.files(__package__).joinpath("data/checkpoints.yaml").read_text())
    entries = []
    for item in raw["checkpoints"]:
        accuracy = item.get("accuracy") or {}
        fmt = {**item["format"], "block_size": tuple(item["format"]["block_size"])} if item["format"].get(
            "block_size") else item["format"]
        entries.append(CatalogCheckpoint(
            id=item["id"], bases=tuple([item["base"]] if isinstance(item["base"], str) else item["base"]),
            format=CheckpointFormat(**fmt, source=f"checkpoint catalog ({item['format_source']})"),
            recovery_pct=accuracy.get("recovery_pct"), recovery_metric=accuracy.get("metric", ""),
            source=accuracy.get("source", ""), aliases=tuple(item.get("aliases", ())),
        ))
    return tuple(entries)


def catalog_entry(model_id: str) -> CatalogCheckpoint | None:
    """The catalog's record of a checkpoint id or one of its earlier names (case-insensitive), or None."""
    key = model_id.strip().lower()
    return next((c for c in checkpoint_catalog() if key in (n.lower() for n in (c.id, *c.aliases))), None)


def checkpoints_of(model_id: str) -> dict[str, CatalogCheckpoint]:
    """Scheme -> the preferred catalog checkpoint quantized from exactly this model id.

    The match is on the id a user serves (``meta-llama/Llama-3.1-8B-Instruct``), never on its
    architecture: a quantized instruct model is no substitute for the base model, nor the reverse.
    """
    key = model_id.strip().lower()
    out: dict[str, CatalogCheckpoint] = {}
    for entry in checkpoint_catalog():
        if key in (b.lower() for b in entry.bases):
            out.setdefault(entry.format.scheme, entry)
    return out
