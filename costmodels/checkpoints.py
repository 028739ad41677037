"""Pre-quantized checkpoints: what their quantization metadata means for serving, and a catalog.

:func:`checkpoint_format` reads a checkpoint's quantization metadata (``quantization_config`` in
``config.json``, or ModelOpt's ``hf_quant_config.json``) into a :class:`CheckpointFormat`: the
servopt scheme it runs as, the vLLM method (``--quantization``) that loads it, its bytes per
weight, and what vLLM's ``--kv-cache-dtype auto`` means for it. vLLM (checked in its source,
0.19 to 0.33) gives a checkpoint an fp8 KV cache under ``auto`` in two cases:

- compressed-tensors (llm-compressor) with a ``kv_cache_scheme``: the Attention layer sets the
  cache dtype to fp8 (``vllm/model_executor/layers/attention/attention.py``, "llm-compressor
  models need to set cache_dtype to fp8 manually");
- ModelOpt with ``kv_cache_quant_algo: FP8`` (or a float 8-bit ``kv_cache_scheme``):
  ``resolve_kv_cache_dtype_string`` in ``vllm/utils/torch_utils.py`` maps ``auto`` to fp8_e4m3.

Plain ``quant_method: fp8`` checkpoints (Qwen's and DeepSeek's block-FP8), AWQ and GPTQ keep the
model dtype.

Which layers a checkpoint leaves unquantized is its own metadata: the module names it excludes
(``exclude_modules`` / ``ignore`` of ModelOpt, ``ignore`` of compressed-tensors,
``modules_to_not_convert`` of fp8 and AWQ checkpoints), matched as vLLM matches them when it loads
each linear layer (:meth:`CheckpointFormat.keeps_unquantized`); an excluded layer runs vLLM's
``UnquantizedLinearMethod`` in the model dtype. NVIDIA's NVFP4 releases of MiniMax-M2.5 and
Kimi-K2.5 keep every attention projection in bf16, Kimi-K2.5's INT4 release its attention, shared
experts and dense MLP too. An mxfp4 checkpoint (gpt-oss) quantizes only its experts: vLLM has no
mxfp4 linear method (``Mxfp4Config.get_quant_method`` serves every linear layer unquantized,
``vllm/model_executor/layers/quantization/mxfp4.py`` at v0.15.0, lines 201-219). :data:`CHECKPOINT_CATALOG` lists public checkpoints per base model with the accuracy
their cards publish (``data/checkpoints.yaml``, built by ``scripts/build_checkpoint_catalog.py``).

Example:
    >>> fmt = checkpoint_format({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True})
    >>> fmt.scheme, fmt.method, round(fmt.weight_bytes_per_param, 4), fmt.kv_cache_dtype
    ('awq', 'awq_marlin', 0.5195, None)
    >>> checkpoint_format({}, {"quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}}).kv_cache_dtype
    'fp8'
    >>> nvfp4 = checkpoint_format({}, {"producer": {"name": "modelopt"}, "quantization": {
    ...     "quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.0.self_attn*"]}})
    >>> nvfp4.keeps_unquantized("model.layers.0.self_attn.q_proj"), nvfp4.keeps_unquantized("model.layers.1.self_attn.q_proj")
    (True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any, Literal

import re
from fnmatch import fnmatch

import yaml
from pydantic import BaseModel, ConfigDict, Field

from .errors import InputError
from .quantization import SCHEMES, QuantScheme

# Bytes of one scale (or zero point) value by the dtype checkpoints store it in.
_SCALE_BYTES = {"fp16": 2.0, "bf16": 2.0, "fp32": 4.0, "fp8": 1.0, "e8m0": 1.0}


class CheckpointFormat(BaseModel):
    """How a pre-quantized checkpoint stores its weights, and how vLLM serves it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: str = Field(description="servopt scheme it runs as: fp8, int8, awq, gptq, w8a16, nvfp4, mxfp4")
    method: str = Field(description="vLLM's quantization method for it (the --quantization value)")
    weight_bits: int = Field(gt=0, le=16)
    group_size: int | None = Field(default=None, description="inputs per scale; None: per channel, tensor or block")
    scale_dtype: Literal["fp16", "bf16", "fp32", "fp8", "e8m0"] = "fp16"
    zero_point: bool = False
    kv_cache_dtype: Literal["fp8"] | None = Field(
        default=None, description="what kv_cache_dtype auto means for it (None: the model dtype)")
    source: str = Field(default="", description="where the format was read: config.json, hf_quant_config.json, id")
    ignore: tuple[str, ...] = Field(default=(), description="module names or patterns the checkpoint leaves unquantized")
    ignore_match: Literal["exact", "substring", "modelopt", "compressed-tensors"] = Field(
        default="exact", description="how vLLM's loader for this method matches a module against ``ignore``")
    quantizes_linear: bool = Field(
        default=True, description="whether the method quantizes linear layers at all (mxfp4: experts only)")

    def keeps_unquantized(self, module: str) -> bool:
        """Whether vLLM serves the linear layer ``module`` (a checkpoint name such as
        ``model.layers.0.self_attn.q_proj``) unquantized, as this method's loader matches ``ignore``:

        - ``exact``: the name itself is listed (``Fp8Config``, ``is_layer_skipped``,
          ``vllm/model_executor/layers/quantization/utils/quant_utils.py`` at v0.15.0, line 426);
        - ``substring``: a listed name is part of it (AWQ, ``skip_with_substr=True``, ``awq_marlin.py``);
        - ``modelopt``: exact, a listed name inside it (also without a ``language_model.`` prefix), or an
          fnmatch wildcard (``ModelOptQuantConfigBase.is_layer_excluded``, ``modelopt.py`` at v0.15.0,
          lines 144-180);
        - ``compressed-tensors``: exact, or ``re:`` patterns matched from the start
          (``_is_equal_or_regex_match``, ``compressed_tensors/utils.py`` at v0.15.0, lines 153-171).
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
        """Bytes per quantized weight: the packed values plus each group's scale and zero point."""
        per_value = self.weight_bits / 8
        if not self.group_size:
            return per_value  # one scale per output channel, tensor or 128x128 block: under 0.1%
        extra = _SCALE_BYTES[self.scale_dtype] + (self.weight_bits / 8 if self.zero_point else 0.0)
        return per_value + extra / self.group_size

    def quant_scheme(self) -> QuantScheme:
        """The scheme with this checkpoint's exact bytes per weight."""
        base = SCHEMES[self.scheme]
        return QuantScheme(base.name, self.weight_bytes_per_param, base.activation_dtype, base.weight_only,
                           self.method, f"{base.description} ({self.describe()})")

    def describe(self) -> str:
        group = f", group {self.group_size}" if self.group_size else ""
        kv = ", fp8 KV scales (kv_cache_dtype auto = fp8)" if self.kv_cache_dtype else ""
        return f"{self.method} {self.scheme}, {self.weight_bits}-bit weights{group}{kv}"


def _kv_from_scheme(kv_scheme: Any) -> Literal["fp8"] | None:
    if isinstance(kv_scheme, dict) and kv_scheme.get("type") == "float" and kv_scheme.get("num_bits") == 8:
        return "fp8"
    if isinstance(kv_scheme, str) and kv_scheme.lower().startswith("fp8"):
        return "fp8"
    return None


def _ignored(quant: dict, *keys: str) -> tuple[str, ...]:
    """The module names listed under the first of ``keys`` the metadata has."""
    for key in keys:
        value = quant.get(key)
        if value:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise InputError(f"quantization metadata: '{key}' must be a list of module names")
            return tuple(value)
    return ()


def _compressed_tensors(quant: dict, source: str) -> CheckpointFormat:
    kv = _kv_from_scheme(quant.get("kv_cache_scheme"))
    return _compressed_tensors_weights(quant, source, kv).model_copy(
        update={"ignore": _ignored(quant, "ignore"), "ignore_match": "compressed-tensors"})


def _compressed_tensors_weights(quant: dict, source: str, kv: Literal["fp8"] | None) -> CheckpointFormat:
    fmt = str(quant.get("format") or "").lower()
    for group in (quant.get("config_groups") or {}).values():
        weights = (group or {}).get("weights") or {}
        acts = (group or {}).get("input_activations") or None
        bits, kind = weights.get("num_bits"), weights.get("type")
        size = weights.get("group_size") if weights.get("strategy") in ("group", "tensor_group") else None
        zero = weights.get("symmetric") is False
        if kind == "float" and bits == 4:
            return CheckpointFormat(scheme="nvfp4", method="compressed-tensors", weight_bits=4, group_size=size or 16,
                                    scale_dtype="fp8", kv_cache_dtype=kv, source=source)
        if kind == "float" and bits == 8:
            return CheckpointFormat(scheme="fp8", method="compressed-tensors", weight_bits=8, kv_cache_dtype=kv,
                                    source=source)
        if kind == "int" and bits == 8:
            scheme = "int8" if acts else "w8a16"  # W8A8 runs int8 tensor cores; W8A16 is weight-only
            return CheckpointFormat(scheme=scheme, method="compressed-tensors", weight_bits=8, group_size=size,
                                    scale_dtype="bf16", zero_point=zero, kv_cache_dtype=kv, source=source)
        if kind == "int" and bits == 4:
            # W4A16 runs on the Marlin kernels GPTQ uses; scales are stored in the model dtype.
            return CheckpointFormat(scheme="gptq", method="compressed-tensors", weight_bits=4, group_size=size,
                                    scale_dtype="bf16", zero_point=zero, kv_cache_dtype=kv, source=source)
    # Without config_groups the format string still tells the weight type.
    by_format = {"float-quantized": ("fp8", 8), "naive-quantized": ("int8", 8), "int-quantized": ("int8", 8),
                 "pack-quantized": ("gptq", 4), "marlin-24": ("gptq", 4), "nvfp4-pack-quantized": ("nvfp4", 4)}
    if fmt in by_format:
        scheme, bits = by_format[fmt]
        return CheckpointFormat(scheme=scheme, method="compressed-tensors", weight_bits=bits,
                                group_size={"gptq": 128, "nvfp4": 16}.get(scheme), kv_cache_dtype=kv, source=source)
    raise InputError(f"{source}: compressed-tensors quantization with format '{fmt or '?'}' and no weight "
                     "scheme servopt models (fp8, int8, int4, nvfp4)")


def _modelopt(quant: dict, source: str) -> CheckpointFormat:
    inner = quant.get("quantization") if isinstance(quant.get("quantization"), dict) else quant
    algo = str(inner.get("quant_algo") or quant.get("quant_algo") or "").upper()
    kv_algo = (inner.get("kv_cache_scheme") or quant.get("kv_cache_scheme") or inner.get("kv_cache_quant_algo")
               or quant.get("kv_cache_quant_algo"))
    kv = _kv_from_scheme(kv_algo)
    # hf_quant_config.json lists them under quantization.exclude_modules, config.json under ignore
    # (ModelOptQuantConfigBase.from_config, modelopt.py at v0.15.0, lines 275-282).
    ignore = {"ignore": _ignored(inner, "exclude_modules") or _ignored(quant, "ignore", "exclude_modules"),
              "ignore_match": "modelopt"}
    if algo == "FP8":
        return CheckpointFormat(scheme="fp8", method="modelopt", weight_bits=8, kv_cache_dtype=kv, source=source,
                                **ignore)
    if algo == "NVFP4":
        size = int(inner.get("group_size") or 16)
        return CheckpointFormat(scheme="nvfp4", method="modelopt_fp4", weight_bits=4, group_size=size,
                                scale_dtype="fp8", kv_cache_dtype=kv, source=source, **ignore)
    raise InputError(f"{source}: ModelOpt quant_algo '{algo or '?'}' is not modelled; servopt reads FP8 and NVFP4")


def checkpoint_format(quant: dict | None, hf_quant: dict | None = None, source: str = "config.json") -> CheckpointFormat | None:
    """The format a checkpoint's quantization metadata describes, or None for an unquantized one.

    ``quant`` is ``config.json``'s ``quantization_config``; ``hf_quant`` is ModelOpt's
    ``hf_quant_config.json`` (which older ModelOpt exports ship instead). Unknown methods raise
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
    if method in ("awq", "awq_marlin"):
        bits = int(quant.get("bits") or quant.get("w_bit") or 4)
        return CheckpointFormat(scheme="awq" if bits == 4 else "w8a16", method="awq_marlin", weight_bits=bits,
                                group_size=int(quant.get("group_size") or quant.get("q_group_size") or 128),
                                zero_point=bool(quant.get("zero_point", True)), source=source,
                                ignore=_ignored(quant, "modules_to_not_convert"), ignore_match="substring")
    if method in ("gptq", "gptq_marlin"):
        bits = int(quant.get("bits") or 4)
        if bits not in (4, 8):
            raise InputError(f"{source}: GPTQ with {bits}-bit weights is not served by vLLM's Marlin kernels (4 or 8)")
        size = int(quant.get("group_size") or 128)
        return CheckpointFormat(scheme="gptq" if bits == 4 else "w8a16", method="gptq_marlin", weight_bits=bits,
                                group_size=size if size > 0 else None, zero_point=not quant.get("sym", True),
                                source=source)
    if method in ("fp8", "fbgemm_fp8"):
        # Fp8Config.from_config reads ignored_layers, else modules_to_not_convert (fp8.py at v0.15.0, 172-176).
        return CheckpointFormat(scheme="fp8", method=method, weight_bits=8, source=source,
                                ignore=_ignored(quant, "ignored_layers", "modules_to_not_convert"))
    if method == "mxfp4":
        return CheckpointFormat(scheme="mxfp4", method="mxfp4", weight_bits=4, group_size=32, scale_dtype="e8m0",
                                source=source, quantizes_linear=False)
    if method == "compressed-tensors":
        return _compressed_tensors(quant, source)
    if method.startswith("modelopt"):
        return _modelopt(quant, source)
    raise InputError(f"{source}: quant_method '{method or '?'}' is not modelled; servopt reads compressed-tensors, "
                     "AWQ, GPTQ, fp8, ModelOpt (FP8, NVFP4) and mxfp4 checkpoints")


# --- naming conventions, for ids that are neither cached nor in the catalog ---------------------

# Keywords of a checkpoint id and the format they usually mean, most specific first. The format is
# a guess (no KV scales, default group size): a cached config or the catalog replaces it.
_ID_FORMATS: tuple[tuple[str, dict[str, Any]], ...] = (
    (r"nvfp4", {"scheme": "nvfp4", "method": "modelopt_fp4", "weight_bits": 4, "group_size": 16, "scale_dtype": "fp8"}),
    (r"awq", {"scheme": "awq", "method": "awq_marlin", "weight_bits": 4, "group_size": 128, "zero_point": True}),
    (r"w4a16", {"scheme": "gptq", "method": "compressed-tensors", "weight_bits": 4, "group_size": 128,
                "scale_dtype": "bf16"}),
    (r"gptq[-_.]int8|w8a16", {"scheme": "w8a16", "method": "gptq_marlin", "weight_bits": 8, "group_size": 128}),
    (r"gptq|int4", {"scheme": "gptq", "method": "gptq_marlin", "weight_bits": 4, "group_size": 128}),
    (r"fp8", {"scheme": "fp8", "method": "compressed-tensors", "weight_bits": 8}),
    (r"w8a8|int8", {"scheme": "int8", "method": "compressed-tensors", "weight_bits": 8, "scale_dtype": "bf16"}),
)


def format_from_id(model_id: str) -> CheckpointFormat | None:
    """The format a checkpoint id's name suggests (``-AWQ``, ``-FP8-dynamic``, ``.w8a8``), or None."""
    import re

    text = model_id.lower()
    for pattern, fields in _ID_FORMATS:
        # Delimiters around every alternative: "w8a8" must be a whole token of the name.
        if re.search(rf"(?:^|[-_./])(?:{pattern})(?:$|[-_./])", text):
            return CheckpointFormat(**fields, source=f"guessed from the id '{model_id}'")
    return None


# --- the catalog of public checkpoints ----------------------------------------------------------

@dataclass(frozen=True)
class CatalogCheckpoint:
    """A public pre-quantized checkpoint of a base model, with its card's accuracy recovery."""

    id: str
    bases: tuple[str, ...]
    format: CheckpointFormat
    recovery_pct: float | None
    recovery_metric: str
    source: str

    @property
    def accuracy_drop_pct(self) -> float | None:
        """100 - recovery, never below 0 (a card's >100% recovery is noise, not a gain to bank)."""
        return None if self.recovery_pct is None else max(0.0, 100.0 - self.recovery_pct)


@lru_cache(maxsize=1)
def checkpoint_catalog() -> tuple[CatalogCheckpoint, ...]:
    """The shipped catalog (``data/checkpoints.yaml``), in file order (preferred first per scheme)."""
    raw = yaml.safe_load(resources.files(__package__).joinpath("data/checkpoints.yaml").read_text())
    entries = []
    for item in raw["checkpoints"]:
        accuracy = item.get("accuracy") or {}
        entries.append(CatalogCheckpoint(
            id=item["id"], bases=tuple([item["base"]] if isinstance(item["base"], str) else item["base"]),
            format=CheckpointFormat(**item["format"], source=f"checkpoint catalog ({item['format_source']})"),
            recovery_pct=accuracy.get("recovery_pct"), recovery_metric=accuracy.get("metric", ""),
            source=accuracy.get("source", ""),
        ))
    return tuple(entries)


def catalog_entry(model_id: str) -> CatalogCheckpoint | None:
    """The catalog's record of a checkpoint id (case-insensitive), or None."""
    key = model_id.strip().lower()
    return next((c for c in checkpoint_catalog() if c.id.lower() == key), None)


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
