"""Model architectures: a pydantic spec, a Hugging Face ``config.json`` reader, and shipped configs.

A :class:`ModelSpec` holds what the cost model needs: layer count and widths, the attention kind
(MHA, GQA, MQA or MLA), MoE routing, sliding windows, the context limit and, for a pre-quantized
checkpoint, its :class:`~servopt.costmodels.checkpoints.CheckpointFormat` (bytes per weight, the
vLLM method, what ``kv_cache_dtype auto`` means). The shipped catalog stores the relevant fields of
each model's Hugging Face ``config.json`` under ``data/models/`` (written by
``scripts/build_model_catalog.py``, with the source of each file) and reads them with the same
:func:`spec_from_hf_config` a user's file goes through.

:func:`resolve_model` turns a name into a spec and says which config it used, in this order: a
local path; the Hugging Face cache (with its revision); the shipped catalog (canonical ids, short
aliases, ids the catalog states share a catalogued config: ``data/derivatives.yaml``, catalogued
pre-quantized checkpoints); the Hub through ``huggingface_hub`` when it is installed and online.
A name is never read as a config: Qwen2.5-7B-Instruct is not Qwen2.5-7B (32,768 positions, not
131,072), so an id none of these describe is one clear error naming how to provide its config.
:attr:`ModelSpec.max_context` is the longest ``--max-model-len`` vLLM accepts for the config
(:func:`vllm_max_model_len`); :func:`longer_context_fix` names what serves more.

Parameter counts include every weight the checkpoint loads (norms, biases, QK-norms, MLA's low-rank
projections, routers, a multimodal checkpoint's vision tower) and come within 1% of the published
sizes. :attr:`ModelSpec.weight_memory_bytes` adds the RoPE tables vLLM builds at load time, which is
what its "Model loading took" line reports for an unquantized checkpoint on one GPU.

Example:
    >>> from servopt.costmodels.architectures import resolve_model
    >>> resolved = resolve_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16")
    >>> resolved.spec.name, resolved.quantization, resolved.spec.checkpoint.method
    ('meta-llama/Llama-3.1-8B', 'gptq', 'compressed-tensors')
    >>> round(resolved.spec.num_params / 1e9, 2), resolved.spec.kv_cache_dtype("auto")
    (8.03, 'auto')
    >>> resolved.origin[:65]
    'derived from meta-llama/Llama-3.1-8B by name: the checkpoint cata'
    >>> resolve_model("Qwen/Qwen2.5-7B-Instruct").spec.max_context
    32768
"""

from __future__ import annotations

import math
import json
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from . import model_sources
from .checkpoints import CheckpointFormat, catalog_entry, checkpoint_catalog, checkpoint_format
from .errors import MAX_INT, InputError, did_you_mean, one_line, quote, validate_spec
from .quantization import QuantScheme, get_scheme
from .userfiles import parse_shipped_yaml
from .engines.vllm import VLLM_DEFAULT_MAX_LEN

AttentionKind = Literal["mha", "gqa", "mqa", "mla"]
ModelDType = Literal["bfloat16", "float16", "float32"]


class MLAConfig(BaseModel):
    """Multi-head latent attention (DeepSeek-V2/V3): the cache holds a latent plus a RoPE key."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kv_lora_rank: int = Field(gt=0)
    qk_rope_head_dim: int = Field(gt=0)
    qk_nope_head_dim: int = Field(gt=0)
    v_head_dim: int = Field(gt=0)
    q_lora_rank: int | None = Field(default=None, gt=0)

    @property
    def cache_dim(self) -> int:
        """Values cached per layer per token: d_c + d_R (576 for DeepSeek-V2/V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


class MoEConfig(BaseModel):
    """Mixture of experts on the MLP. Dense layers (``num_dense_layers`` leading ones) use the
    model's ``intermediate_size``; MoE layers route each token to ``experts_per_token`` experts."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_experts: int = Field(gt=1)
    experts_per_token: int = Field(gt=0)
    expert_intermediate_size: int = Field(gt=0)
    num_shared_experts: int = Field(default=0, ge=0)
    shared_expert_intermediate_size: int = Field(default=0, ge=0, description="per shared expert")
    num_dense_layers: int = Field(default=0, ge=0)
    router_bias: bool = False
    expert_bias: bool = False

    @model_validator(mode="after")
    def _check_topk(self) -> MoEConfig:
        if self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token cannot exceed num_experts")
        return self


class ModelSpec(BaseModel):
    """The architecture of a decoder-only transformer, as far as serving cost depends on it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="canonical Hugging Face id of the base architecture")
    family: str = Field(description="Hugging Face model_type, e.g. llama, qwen3_moe, deepseek_v3")
    num_layers: int = Field(gt=0)
    hidden_size: int = Field(gt=0)
    num_attention_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    tie_word_embeddings: bool = False
    attention_kind: AttentionKind
    mla: MLAConfig | None = None
    moe: MoEConfig | None = None
    sliding_window: int | None = Field(default=None, gt=0)
    num_sliding_layers: int = Field(default=0, ge=0, description="layers that use the sliding window")
    max_context: int = Field(gt=0)
    dtype: ModelDType = Field(default="bfloat16", description="dtype vLLM serves the unquantized weights in")
    gated_mlp: bool = True
    attention_bias: bool = False
    attention_output_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    qk_norm_across_heads: bool = Field(
        default=False, description="q/k RMSNorm over all heads at once (MiniMax-M2's qk_norm_type per_layer), "
                                   "not per head: under TP its variance needs an all-reduce")
    extra_params: int = Field(default=0, ge=0, description="weights outside the decoder (vision tower)")
    rope_cache_values: int = Field(
        default=0, ge=0, description="RoPE cos/sin values vLLM precomputes on the GPU, over its distinct tables"
    )
    num_mtp_layers: int = Field(
        default=0, ge=0, description="multi-token-prediction modules the checkpoint ships (num_nextn_predict_layers)")
    checkpoint: CheckpointFormat | None = Field(
        default=None, description="how a pre-quantized checkpoint stores its weights (None: 16-bit weights)")
    published_params_b: float | None = Field(default=None, description="size the model card states")
    published_params_rounding_b: float | None = Field(
        default=None, gt=0, description="the step the card rounds its size to (1000 for a card that says 1T); "
                                        "None: the size is stated to three significant figures or better")
    aliases: tuple[str, ...] = ()
    rope_type: str | None = Field(default=None, description="the config's RoPE scaling type (None: plain RoPE)")
    config_source: str = Field(default="", description="where this configuration was read (what resolution used)")

    @model_validator(mode="after")
    def _check_consistency(self) -> ModelSpec:
        if self.attention_kind == "mla" and self.mla is None:
            raise ValueError("attention_kind 'mla' needs an 'mla' section (kv_lora_rank, qk_rope_head_dim, ...)")
        if self.attention_kind != "mla" and self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        if self.num_sliding_layers > self.num_layers:
            raise ValueError("num_sliding_layers cannot exceed num_layers")
        if self.moe is not None and self.moe.num_dense_layers > self.num_layers:
            raise ValueError("moe.num_dense_layers cannot exceed num_layers")
        return self

    # --- the checkpoint's format ----------------------------------------------------------------
    @property
    def native_quantization(self) -> str | None:
        """The scheme the checkpoint ships in (fp8, int8, awq, gptq, w8a16, nvfp4, mxfp4), or None."""
        return None if self.checkpoint is None else self.checkpoint.scheme

    def unquantized_layers(self, quantization: str) -> dict[str, int]:
        """Per linear family of a layer (the roofline's names: ``qkv_proj``, ``o_proj``, MLA's
        projections, ``gate_up_proj`` / ``down_proj`` of the dense MLP layers, ``shared_gate_up`` /
        ``shared_down``), how many layers keep it in the model dtype when served as ``quantization``.

        The checkpoint's own metadata says which (:meth:`CheckpointFormat.keeps_unquantized`); a
        family counts in a layer when every checkpoint module it fuses is excluded (vLLM refuses a fused
        layer whose shards differ). Serving a checkpoint in another scheme (``--quantization fp8`` of a
        16-bit model) quantizes every linear layer; mxfp4 none (vLLM has no mxfp4 linear method).

        Example:
            >>> get_model("openai/gpt-oss-120b").unquantized_layers("mxfp4")["qkv_proj"]
            36
            >>> get_model("Qwen/Qwen3-32B").unquantized_layers("fp8")
            {}
        """
        if quantization == "mxfp4":
            return _unquantized_layers(self._linear_modules(), CheckpointFormat(
                scheme="mxfp4", method="mxfp4", weight_bits=4, quantizes_linear=False))
        if self.checkpoint is None or self.checkpoint.scheme != quantization or (
                not self.checkpoint.ignore and self.checkpoint.quantizes_linear):
            return {}
        return _unquantized_layers(self._linear_modules(), self.checkpoint)

    def _linear_modules(self) -> tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]:
        """(family, per layer its checkpoint module names) for the linear families of the decoder."""
        if self.mla is not None:
            attention = {"q_a_proj": ("q_a_proj",), "q_b_proj": ("q_b_proj",)} if self.mla.q_lora_rank else {
                "q_proj": ("q_proj",)}
            attention |= {"kv_a_proj": ("kv_a_proj_with_mqa",), "k_up_absorb": ("kv_b_proj",),
                          "v_up_absorb": ("kv_b_proj",), "o_proj": ("o_proj",)}
        else:
            attention = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "o_proj": ("o_proj",)}
        every = range(self.num_layers)
        families = [(name, tuple(tuple(f"model.layers.{i}.self_attn.{p}" for p in parts) for i in every))
                    for name, parts in attention.items()]
        dense = range(self.num_dense_mlp_layers)  # the first layers (DeepSeek's first_k_dense_replace)
        families += [(name, tuple(tuple(f"model.layers.{i}.mlp.{p}" for p in parts) for i in dense))
                     for name, parts in (("gate_up_proj", ("gate_proj", "up_proj")), ("down_proj", ("down_proj",)))]
        if self.moe is not None and self.moe.num_shared_experts:
            moe_layers = range(self.num_layers - self.num_moe_layers, self.num_layers)
            families += [(name, tuple(tuple(f"model.layers.{i}.mlp.shared_experts.{p}" for p in parts)
                                      for i in moe_layers))
                         for name, parts in (("shared_gate_up", ("gate_proj", "up_proj")), ("shared_down", ("down_proj",)))]
        return tuple(families)

    def weight_scheme(self, quantization: str) -> QuantScheme:
        """The scheme ``quantization`` as this checkpoint stores it (its own group size and zero
        points when it ships in that scheme; the scheme's defaults otherwise)."""
        if self.checkpoint is not None and self.checkpoint.scheme == quantization:
            return self.checkpoint.quant_scheme()
        return get_scheme(quantization)

    def kv_cache_dtype(self, requested: str) -> str:
        """What vLLM stores the KV cache in for ``--kv-cache-dtype requested``: 'auto' is the
        model dtype, except for checkpoints that carry FP8 KV scales (fp8)."""
        if requested == "auto" and self.checkpoint is not None and self.checkpoint.kv_cache_dtype:
            return self.checkpoint.kv_cache_dtype
        return requested

    # --- shapes -------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        """Width of the query projection output."""
        if self.mla is not None:
            return self.num_attention_heads * (self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim)
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of one of K or V for all KV heads (non-MLA)."""
        return self.num_kv_heads * self.head_dim

    @property
    def attn_out_dim(self) -> int:
        """Input width of the output projection."""
        if self.mla is not None:
            return self.num_attention_heads * self.mla.v_head_dim
        return self.num_attention_heads * self.head_dim

    @property
    def num_moe_layers(self) -> int:
        return 0 if self.moe is None else self.num_layers - self.moe.num_dense_layers

    @property
    def num_dense_mlp_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    @property
    def kv_values_per_token_per_layer(self) -> int:
        """Cached values per token per layer: 2 x kv_heads x head_dim, or d_c + d_R for MLA."""
        if self.mla is not None:
            return self.mla.cache_dim
        return 2 * self.num_kv_heads * self.head_dim

    # --- parameter counts ---------------------------------------------------------------------
    @property
    def attention_params_per_layer(self) -> int:
        h = self.hidden_size
        if self.mla is not None:
            m = self.mla
            heads = self.num_attention_heads
            q_head = m.qk_nope_head_dim + m.qk_rope_head_dim
            if m.q_lora_rank:
                q = h * m.q_lora_rank + m.q_lora_rank + m.q_lora_rank * heads * q_head
            else:
                q = h * heads * q_head
            kv_a = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank
            kv_b = m.kv_lora_rank * heads * (m.qk_nope_head_dim + m.v_head_dim)
            return q + kv_a + kv_b + heads * m.v_head_dim * h
        params = h * self.q_dim + 2 * h * self.kv_dim + self.attn_out_dim * h
        if self.attention_bias:
            params += self.q_dim + 2 * self.kv_dim
        if self.attention_output_bias:
            params += h
        if self.qk_norm:
            # A weight per value of the normed width: one head's, or every head's (MiniMax-M2).
            params += self.q_dim + self.kv_dim if self.qk_norm_across_heads else 2 * self.head_dim
        if self.family == "gpt_oss":
            params += self.num_attention_heads  # one learned attention-sink logit per head
        return params

    def _mlp_params(self, intermediate: int) -> int:
        matrices = 3 if self.gated_mlp else 2
        params = matrices * self.hidden_size * intermediate
        if self.mlp_bias:
            params += (matrices - 1) * intermediate + self.hidden_size
        return params

    @property
    def dense_mlp_params(self) -> int:
        return self._mlp_params(self.intermediate_size)

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        assert self.moe is not None
        params = self._mlp_params(self.moe.expert_intermediate_size)
        if self.moe.expert_bias:
            matrices = 3 if self.gated_mlp else 2
            params += (matrices - 1) * self.moe.expert_intermediate_size + self.hidden_size
        return params

    @property
    def moe_layer_params(self) -> int:
        """All parameters of one MoE MLP layer (routed and shared experts, router)."""
        assert self.moe is not None
        moe = self.moe
        router = self.hidden_size * moe.num_experts + (moe.num_experts if moe.router_bias else 0)
        shared = moe.num_shared_experts * self._mlp_params(moe.shared_expert_intermediate_size)
        return moe.num_experts * self.expert_params + shared + router

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    @property
    def norm_params(self) -> int:
        per_layer = 2 * self.hidden_size
        if self.family in ("gemma2", "gemma3"):
            per_layer = 4 * self.hidden_size  # pre- and post- norms around attention and MLP
        return self.num_layers * per_layer + self.hidden_size

    @cached_property
    def decoder_params(self) -> int:
        """Parameters of the text model (embeddings, layers, norms, LM head)."""
        layers = self.num_layers * self.attention_params_per_layer + self.num_dense_mlp_layers * self.dense_mlp_params
        if self.moe is not None:
            layers += self.num_moe_layers * self.moe_layer_params
        return self.embedding_params + self.lm_head_params + layers + self.norm_params

    @property
    def num_params(self) -> int:
        """All weights loaded on the GPU, including a vision tower when the checkpoint has one."""
        return self.decoder_params + self.extra_params

    @property
    def active_params_per_token(self) -> int:
        """Parameters a single token's forward pass touches (MoE: only its experts)."""
        if self.moe is None:
            return self.decoder_params
        moe = self.moe
        inactive = self.num_moe_layers * (moe.num_experts - moe.experts_per_token) * self.expert_params
        return self.decoder_params - inactive

    @property
    def active_params_excluding_embedding(self) -> int:
        """Active parameters less the input embedding table, when it is not also the LM head.

        A token only looks up one row of the embedding, so this is what a decode step streams per
        token. It is also the convention of some model cards (gpt-oss's 5.1B active), while others
        (Mixtral's 12.9B, Qwen3's A3B/A22B) count the embedding as active.
        """
        return self.active_params_per_token - (0 if self.tie_word_embeddings else self.embedding_params)

    @property
    def dtype_bytes(self) -> int:
        """Bytes per value of the checkpoint dtype."""
        return 4 if self.dtype == "float32" else 2

    @property
    def rope_cache_bytes(self) -> int:
        """Bytes of the RoPE cos/sin tables vLLM builds at load time, in the model dtype.

        vLLM shares one table per distinct RoPE configuration across layers, so this is small for
        most models (Llama-3.1: 32 MiB) but not for Gemma 3, whose 8x linear-scaled global table
        holds 1M positions (0.5 GiB at head_dim 256), which vLLM counts as model-loading memory.
        """
        return self.rope_cache_values * self.dtype_bytes

    @property
    def weight_memory_bytes(self) -> int:
        """Bytes the unquantized checkpoint takes once loaded: all weights plus the RoPE tables.

        This is what vLLM reports as "Model loading took ..." for a single-GPU bf16 deployment.
        """
        return self.num_params * self.dtype_bytes + self.rope_cache_bytes

    def summary(self) -> dict[str, Any]:
        """Plain-dict view for tables and JSON."""
        return {
            "name": self.name,
            "family": self.family,
            "params_b": round(self.num_params / 1e9, 2),
            "active_params_b": round(self.active_params_per_token / 1e9, 2),
            "layers": self.num_layers,
            "hidden": self.hidden_size,
            "heads": self.num_attention_heads,
            "kv_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "attention": self.attention_kind,
            "moe": f"{self.moe.num_experts}x top-{self.moe.experts_per_token}" if self.moe else "",
            "max_context": self.max_context,
            "aliases": ", ".join(self.aliases),
        }


# ---------------------------------------------------------------------------------------------
# Hugging Face config.json reader
# ---------------------------------------------------------------------------------------------

_SUPPORTED_FAMILIES = (
    "llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gemma2", "gemma3", "gemma3_text",
    "granite", "phi3", "deepseek_v2", "deepseek_v3", "kimi_k2", "gpt_oss", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe",
    "minimax_m2", "kimi_k25",
)

@lru_cache(maxsize=256)
def _unquantized_layers(families: tuple, checkpoint: CheckpointFormat) -> dict[str, int]:
    """Layers per family whose every module the checkpoint keeps unquantized. A multimodal
    checkpoint names its decoder ``language_model.model.layers...`` (Kimi-K2.5), so both names are tried."""
    def kept(module: str) -> bool:
        return checkpoint.keeps_unquantized(module) or checkpoint.keeps_unquantized(f"language_model.{module}")
    counts = {name: sum(all(kept(m) for m in modules) for modules in layers) for name, layers in families}
    return {name: count for name, count in counts.items() if count}


# Qwen vision-language checkpoints: the text model they wrap (vLLM serves the vision tower beside it).
_QWEN_VL_TEXT = {"qwen2_5_vl": "qwen2", "qwen3_vl": "qwen3", "qwen3_vl_moe": "qwen3_moe"}

_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "half": "float16",
           "fp16": "float16", "bf16": "bfloat16", "float": "float32"}

# Families whose transformers config class defaults to tied input/output embeddings.
_TIED_BY_DEFAULT = ("gemma2", "gemma3")

# Gemma3TextConfig defaults. Google's gemma-3-4b-it config.json leaves these keys out of its
# text_config, so transformers (and vLLM) fill them in; without them the 4B reads as an 8-head MHA
# with a 262144-entry vocabulary it does not have.
_GEMMA3_TEXT_DEFAULTS = {
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256, "vocab_size": 262208,
    "max_position_embeddings": 131072, "sliding_window": 4096, "sliding_window_pattern": 6,
}


def _require(config: dict, key: str, source: str) -> Any:
    if key not in config or config[key] is None:
        raise InputError(f"{source}: config.json lacks required key '{key}'")
    return config[key]


def _int(config: dict, key: str, source: str, default: int | None = None) -> int:
    """An integer field; required when ``default`` is None, and then at least 1 (a size or a count:
    0 heads divided the hidden size by zero). Names the key when the value is bad."""
    value = config.get(key)
    if value is None:
        if default is None:
            raise InputError(f"{source}: config.json lacks required key '{key}'")
        return default
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or abs(value) > MAX_INT):
        raise InputError(f"{source}: config.json key '{key}' must be an integer, got {quote(value)}")
    if default is None and value < 1:
        raise InputError(f"{source}: config.json key '{key}' must be at least 1, got {quote(value)}")
    return int(value)


def _dim(section: dict, keys: tuple[str, ...], default: int, source: str) -> int:
    """A size of a nested section (a vision tower's), by the first of ``keys`` set to a non-zero
    value, else ``default``; one that is not a whole number of at least 1 is refused naming the key."""
    for key in keys:
        if section.get(key):  # 0 and null mean "not set", as these configs write it
            return _int(section, key, source)
    return default


def _number(config: dict, key: str, source: str, default: float) -> float:
    """A numeric field (a factor, a window), ``default`` when absent; text or a non-finite value is
    refused naming the key."""
    value = config.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InputError(f"{source}: config.json key '{key}' must be a finite number, got {quote(value)}")
    return value


def _check_finite(config: dict, source: str) -> None:
    """Refuse NaN and Infinity anywhere in a config (Python's JSON reads both; no size, count or
    factor is either), naming the key."""
    stack: list[tuple[Any, str]] = [(config, "")]
    while stack:
        node, path = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            raise InputError(f"{source}: config.json key '{path}' is {node!r}; every number in a config is finite")
        children = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        stack += [(child, f"{path}.{key}" if path else str(key)) for key, child in children]


def _siglip_vision_params(vision: dict, text_hidden: int, source: str) -> int:
    """Parameters of a SigLIP vision tower (``siglip_vision_model``) plus Gemma 3's projector.

    Patch embedding (conv with bias), learned position embeddings, ``num_hidden_layers`` pre-norm
    encoder layers (q/k/v/o and fc1/fc2 with biases, two LayerNorms with bias) and the post
    LayerNorm. Gemma 3's multi-modal projector adds a (vision hidden x text hidden) matrix and an
    RMSNorm over the soft tokens. Gemma 3 sets ``vision_use_head: false``; the attention-pooling
    head is counted only where a config enables it.
    """
    h = _dim(vision, ("hidden_size",), 1152, source)
    inter = _dim(vision, ("intermediate_size",), 4304, source)
    layers = _dim(vision, ("num_hidden_layers",), 27, source)
    patch = _dim(vision, ("patch_size",), 14, source)
    image = _dim(vision, ("image_size",), 896, source)
    channels = _dim(vision, ("num_channels",), 3, source)
    embeddings = channels * patch * patch * h + h + (image // patch) ** 2 * h
    mlp = h * inter + inter + inter * h + h
    per_layer = 4 * (h * h + h) + mlp + 2 * 2 * h
    head = 0
    if vision.get("vision_use_head", True):
        head = h + 3 * h * h + 3 * h + h * h + h + 2 * h + mlp  # probe, attention, LayerNorm, MLP
    projector = h * text_hidden + h
    return embeddings + layers * per_layer + 2 * h + head + projector


def _qwen_vision_params(vision: dict, gated: bool, source: str) -> int:
    """Parameters of a Qwen2.5-VL / Qwen3-VL vision tower and its patch merger(s).

    Patch embedding (a 3D conv over ``temporal_patch_size`` frames), ``depth`` pre-norm blocks
    (qkv and output projections with biases; Qwen2.5-VL's gated SiLU MLP with RMSNorms, Qwen3-VL's
    two-layer GELU MLP with LayerNorms), Qwen3-VL's learned position embeddings, and the merger
    that maps ``spatial_merge_size``^2 patches to the text width (Qwen3-VL adds one per
    ``deepstack_visual_indexes`` entry).
    """
    h = _dim(vision, ("hidden_size", "embed_dim"), 1280, source)
    depth = _dim(vision, ("depth", "num_hidden_layers"), 32, source)
    inter = _dim(vision, ("intermediate_size",), 4 * h, source)
    out = _dim(vision, ("out_hidden_size",), h, source)
    patch = _dim(vision, ("patch_size",), 14, source)
    frames = _dim(vision, ("temporal_patch_size",), 2, source)
    channels = _dim(vision, ("in_channels", "in_chans"), 3, source)
    merge = _dim(vision, ("spatial_merge_size",), 2, source)
    attention = 4 * h * h + 4 * h
    if gated:
        mlp, norms = 3 * h * inter + 2 * inter + h, 2 * h
    else:
        mlp, norms = 2 * h * inter + inter + h, 4 * h
    merged = h * merge * merge
    merger = merged * merged + merged + merged * out + out + (h if gated else 2 * h)
    embed = channels * frames * patch * patch * h + (0 if gated else h)
    positions = _dim(vision, ("num_position_embeddings",), 0, source) * h
    indexes = vision.get("deepstack_visual_indexes") or []
    if not isinstance(indexes, list):
        raise InputError(f"{source}: config.json key 'deepstack_visual_indexes' must be a list, got {quote(indexes)}")
    deepstack = len(indexes) * merger
    return embed + positions + depth * (attention + mlp + norms) + merger + deepstack


def _moonvit_params(vision: dict, text_hidden: int, source: str) -> int:
    """Parameters of Kimi-K2.5's MoonViT vision tower and its patch-merger projector.

    A SigLIP-style encoder (``vt_*`` keys): a patch-embedding conv with bias, learned height x width
    position embeddings (``init_pos_emb_height`` x ``init_pos_emb_width``) and temporal ones,
    ``vt_num_hidden_layers`` pre-norm blocks (q/k/v/o and a two-layer MLP with biases, two
    LayerNorms), a final LayerNorm; the projector merges ``merge_kernel_size`` patches (LayerNorm,
    then two linear layers with biases into the text width).
    """
    h = _dim(vision, ("vt_hidden_size",), 1152, source)
    inter = _dim(vision, ("vt_intermediate_size",), 4304, source)
    layers = _dim(vision, ("vt_num_hidden_layers",), 27, source)
    patch = _dim(vision, ("patch_size",), 14, source)
    positions = _dim(vision, ("init_pos_emb_height",), 64, source) * _dim(vision, ("init_pos_emb_width",), 64, source)
    frames = _dim(vision, ("init_pos_emb_time",), 0, source)
    kernel = vision.get("merge_kernel_size") or [2, 2]
    if not isinstance(kernel, list):
        raise InputError(f"{source}: config.json key 'merge_kernel_size' must be a list, got {quote(kernel)}")
    merge = 1
    for i in range(len(kernel)):
        merge *= _int(dict(enumerate(kernel)), i, f"{source} merge_kernel_size")
    embeddings = 3 * patch * patch * h + h + (positions + frames) * h
    per_layer = 4 * (h * h + h) + 2 * h * inter + inter + h + 2 * 2 * h
    merged = merge * h
    projector = 2 * merged + merged * merged + merged + merged * text_hidden + text_hidden
    return embeddings + layers * per_layer + 2 * h + projector


def _rope_cache_values(config: dict, family: str, rotary_dim: int, max_context: int, has_sliding: bool,
                      source: str = "config.json") -> int:
    """cos/sin values of the RoPE tables vLLM's ``get_rope`` precomputes (one per distinct RoPE).

    Each table holds ``positions x rotary_dim`` values. Linear and dynamic scaling extend the table
    to ``max_position_embeddings x factor``; YaRN builds ``original_max_position_embeddings x factor``
    positions; default and llama3 RoPE stop at ``max_position_embeddings``. Gemma 3's sliding layers
    use a second, unscaled table (``rope_local_base_freq``).
    """
    scaling = config.get("rope_scaling") or config.get("rope_parameters") or {}
    kind = str(scaling.get("rope_type") or scaling.get("type") or "default") if isinstance(scaling, dict) else "default"
    factor = _number(scaling, "factor", source, 1.0) or 1.0 if isinstance(scaling, dict) else 1.0
    if kind in ("linear", "dynamic"):
        positions = int(max_context * factor)
    elif kind in ("yarn", "deepseek_yarn"):
        original = _dim(scaling, ("original_max_position_embeddings",), max_context, source)
        positions = int(original * factor)
    else:
        positions = max_context
    if family == "gemma3" and has_sliding:
        positions += max_context
    return positions * rotary_dim


# vLLM's keys for a config's maximum length; it takes the smallest present
# (``derive_max_model_len_and_key``, vllm/transformers_utils/model_arch_config_convertor.py@v0.33.0
# lines 374-406), except that ``model_max_length`` wins when set (Command-R).
_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
# RoPE types whose max_position_embeddings is already the scaled length (vLLM does not multiply by
# their factor): ``_get_and_verify_max_len``, vllm/config/model.py@v0.33.0 lines 2600-2634.
_PRESCALED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")


def _rope_sections(config: dict) -> list[dict]:
    """The config's RoPE scaling dicts (``rope_scaling``, or transformers 5's ``rope_parameters``,
    one per layer type when nested)."""
    rope = config.get("rope_parameters") or config.get("rope_scaling")
    if not isinstance(rope, dict) or not rope:
        return []
    if all(isinstance(value, dict) for value in rope.values()):
        return [value for value in rope.values() if value]
    return [rope]


def _rope_type(config: dict) -> str | None:
    kinds = [str(r.get("rope_type") or r.get("type") or "default") for r in _rope_sections(config)]
    scaled = [kind for kind in kinds if kind != "default"]
    return scaled[0] if scaled else None


def vllm_max_model_len(config: dict, family: str, source: str = "config.json") -> int:
    """The longest ``--max-model-len`` vLLM 0.33 accepts for a config, as it derives it.

    The smallest of the config's length keys (:data:`_MAX_LEN_KEYS`; 2048 when there is none),
    times the RoPE scaling factor unless the type already counts it (llama3, YaRN, LongRoPE: their
    ``max_position_embeddings`` is the scaled length) or the model is Gemma 3 (whose 128k is
    scaled). A longer ``--max-model-len`` makes vLLM refuse to start unless
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`` (``_get_and_verify_max_len``, vllm/config/model.py@v0.33.0
    lines 2545-2685); servopt never exports one.

    >>> vllm_max_model_len({"max_position_embeddings": 32768}, "qwen2")
    32768
    >>> vllm_max_model_len({"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}, "llama")
    8192
    >>> vllm_max_model_len({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "llama")
    131072
    """
    values = [config[key] for key in _MAX_LEN_KEYS
              if isinstance(config.get(key), (int, float)) and not isinstance(config.get(key), bool)]
    derived = float(min(values)) if values else float(VLLM_DEFAULT_MAX_LEN)
    if isinstance(config.get("model_max_length"), (int, float)) and config["model_max_length"]:
        derived = float(config["model_max_length"])
    if family != "gemma3":
        factor = 1.0
        for rope in _rope_sections(config):
            kind = str(rope.get("rope_type") or rope.get("type") or "default")
            if kind not in _PRESCALED_ROPE:
                factor = _number(rope, "factor", source, factor) or factor
        derived *= factor
    return int(derived)


def spec_from_hf_config(config: dict, name: str, source: str = "config.json", hf_quant_config: dict | None = None,
                        **extra: Any) -> ModelSpec:
    """Build a :class:`ModelSpec` from the dict of a Hugging Face ``config.json``.

    Multimodal configs (Gemma 3) are read through their ``text_config``; their SigLIP vision tower
    is counted in ``extra_params`` unless ``extra`` sets it. ``extra`` sets fields the config does
    not hold (aliases, published size, vision-tower parameters). ``hf_quant_config`` is ModelOpt's
    ``hf_quant_config.json`` when the checkpoint ships one.
    """
    if not isinstance(config, dict):
        raise InputError(f"{source}: config.json must hold a JSON object")
    _check_finite(config, source)
    family = config.get("model_type")
    if family is not None and not isinstance(family, str):
        raise InputError(f"{source}: config.json key 'model_type' must be text, got {quote(family)}")
    if family is None:
        raise InputError(
            f"{source}: config.json lacks 'model_type'; supported: {', '.join(_SUPPORTED_FAMILIES)}"
        )
    vision: dict | None = None
    for key, kind in (("text_config", dict), ("vision_config", dict), ("quantization_config", dict),
                      ("rope_scaling", dict), ("rope_parameters", dict), ("mlp_only_layers", list), ("layer_types", list)):
        for section in (config, config.get("text_config") if isinstance(config.get("text_config"), dict) else {}):
            if section.get(key) is not None and not isinstance(section[key], kind):
                raise InputError(f"{source}: config.json key '{key}' must be a {'mapping' if kind is dict else 'list'}, "
                                 f"got {quote(section[key])}")
    if family == "gemma3" and isinstance(config.get("text_config"), dict):
        # The multimodal wrapper keeps dtype and quantization at the top level.
        text = {**config["text_config"]}
        text.setdefault("torch_dtype", config.get("torch_dtype") or config.get("dtype"))
        if "quantization_config" in config:
            text.setdefault("quantization_config", config["quantization_config"])
        if isinstance(config.get("vision_config"), dict):
            vision = config["vision_config"]
        config = {**text, "model_type": "gemma3"}
    vision_family = None
    if family in _QWEN_VL_TEXT:
        # Newer configs nest the text model in text_config; Qwen2.5-VL's original keeps it on top.
        text = {**(config.get("text_config") or config)}
        for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
            if key in config and key not in text:
                text[key] = config[key]
        vision_family, vision = family, config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None
        config = {**text, "model_type": _QWEN_VL_TEXT[family]}
        family = config["model_type"]
    moonvit = None
    if family == "kimi_k25" and isinstance(config.get("text_config"), dict):
        # Kimi-K2.5 wraps a Kimi-K2 (DeepSeek-V3) language model beside its MoonViT vision tower;
        # the wrapper keeps the dtype (and, in re-quantized exports, the quantization) at the top.
        text = {**config["text_config"]}
        for key in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings"):
            if key in config and key not in text:
                text[key] = config[key]
        moonvit = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else None
        config = {**text, "model_type": "kimi_k2"}
        family = "kimi_k2"
    if family not in _SUPPORTED_FAMILIES or family == "kimi_k25":
        raise InputError(
            f"{source}: model_type '{family}' is not supported; supported: {', '.join(_SUPPORTED_FAMILIES)}"
        )
    family = "gemma3" if family == "gemma3_text" else family
    # Kimi K2 is DeepSeek-V3's architecture under another name (vLLM serves it with the same class).
    family = "deepseek_v3" if family == "kimi_k2" else family
    if family == "gemma3":
        config = {**_GEMMA3_TEXT_DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    heads = _int(config, "num_attention_heads", source)
    hidden = _int(config, "hidden_size", source)
    num_layers = _int(config, "num_hidden_layers", source)
    kv_heads = _int(config, "num_key_value_heads", source, default=heads)
    head_dim = _int(config, "head_dim", source, default=hidden // heads)
    positions = _int(config, "max_position_embeddings", source, default=0) or _int(
        config, "max_sequence_length", source, default=4096
    )
    max_context = vllm_max_model_len(config, family, source)
    dtype = _DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), "bfloat16")
    if dtype == "float32":
        dtype = "bfloat16"  # vLLM's dtype=auto serves float32 checkpoints in bf16 (gemma-2-2b ships fp32)
    fields: dict[str, Any] = {
        "name": name,
        "family": family,
        "num_layers": num_layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": _int(config, "intermediate_size", source),
        "vocab_size": _int(config, "vocab_size", source),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", family in _TIED_BY_DEFAULT)),
        "max_context": max_context,
        "dtype": dtype,
        "attention_bias": bool(config.get("attention_bias", False)),
        "mlp_bias": bool(config.get("mlp_bias", False)),
        "qk_norm": family in ("qwen3", "qwen3_moe", "gemma3") or bool(config.get("use_qk_norm")),
        "qk_norm_across_heads": bool(config.get("use_qk_norm")) and config.get("qk_norm_type") == "per_layer",
    }
    if moonvit is not None:
        fields["extra_params"] = _moonvit_params(moonvit, hidden, source)
    if vision is not None:
        fields["extra_params"] = (_qwen_vision_params(vision, vision_family == "qwen2_5_vl", source) if vision_family
                                  else _siglip_vision_params(vision, hidden, source))
    # Per-family biases. Qwen2 hard-codes q/k/v biases (its config has no attention_bias key) but
    # not on o_proj. Phi-3 has none (its fused qkv_proj / gate_up_proj hold the same weights as
    # separate projections). gpt-oss puts biases on q/k/v and on o_proj.
    if family == "qwen2":
        fields["attention_bias"] = True
    if family == "phi3":
        fields["attention_bias"] = False
    if family == "gpt_oss":
        fields["attention_bias"] = True
        fields["attention_output_bias"] = True
    if fields["attention_bias"] and family in ("llama", "granite"):
        fields["attention_output_bias"] = True  # their attention_bias covers o_proj too
    # Granite's embedding/attention/residual multipliers and logits_scaling are scalars, not weights.

    # Attention kind.
    rotary_dim = head_dim
    if family in ("deepseek_v2", "deepseek_v3"):
        # Nested sections stay plain dicts so that ModelSpec validation reports their errors.
        mla = {
            "kv_lora_rank": _int(config, "kv_lora_rank", source),
            "qk_rope_head_dim": _int(config, "qk_rope_head_dim", source),
            "qk_nope_head_dim": _int(config, "qk_nope_head_dim", source),
            "v_head_dim": _int(config, "v_head_dim", source),
            # DeepSeek-V2-Lite projects queries directly (q_lora_rank null); V2/V3 use a low rank.
            "q_lora_rank": _int(config, "q_lora_rank", source, default=0) or None,
        }
        fields["mla"] = mla
        fields["attention_kind"] = "mla"
        fields["num_kv_heads"] = heads
        fields["head_dim"] = mla["qk_nope_head_dim"] + mla["qk_rope_head_dim"]
        rotary_dim = mla["qk_rope_head_dim"]
    elif kv_heads == heads:
        fields["attention_kind"] = "mha"
    elif kv_heads == 1:
        fields["attention_kind"] = "mqa"
    else:
        fields["attention_kind"] = "gqa"
    # MiniMax-M2 states its rotary width outright (rotary_dim 64 of head_dim 128).
    rotary_dim = _int(config, "rotary_dim", source, default=0) or int(
        rotary_dim * (_number(config, "partial_rotary_factor", source, 1.0) or 1.0))

    # Sliding windows: which layers use them. An explicit layer_types list (gpt-oss, newer
    # transformers configs) wins over each family's fixed pattern.
    window = _dim(config, ("sliding_window",), 0, source)
    layer_types = config.get("layer_types") if isinstance(config.get("layer_types"), list) else None
    if window and layer_types:
        sliding = sum(1 for t in layer_types if t == "sliding_attention")
        if sliding:
            fields["sliding_window"] = int(window)
            fields["num_sliding_layers"] = sliding
    elif window and family == "gemma2":
        # Even layers (0, 2, ...) slide, odd layers attend globally.
        fields["sliding_window"] = int(window)
        fields["num_sliding_layers"] = (num_layers + 1) // 2
    elif window and family == "gemma3":
        # Every sliding_window_pattern-th layer is global (5 local : 1 global).
        pattern = _dim(config, ("sliding_window_pattern",), 6, source)
        fields["sliding_window"] = int(window)
        fields["num_sliding_layers"] = num_layers - num_layers // pattern
    elif window and family == "gpt_oss":
        fields["sliding_window"] = int(window)
        fields["num_sliding_layers"] = (num_layers + 1) // 2
    elif window and family in ("mistral", "qwen2", "qwen3", "qwen3_moe", "phi3"):
        # Qwen ships sliding_window = max positions with use_sliding_window false: not a window.
        enabled = config.get("use_sliding_window", family not in ("qwen2", "qwen3", "qwen3_moe"))
        if enabled and int(window) < positions:
            fields["sliding_window"] = int(window)
            fields["num_sliding_layers"] = num_layers
    fields["rope_cache_values"] = _rope_cache_values(
        config, family, rotary_dim, positions, bool(fields.get("num_sliding_layers")), source
    )

    # Mixture of experts.
    if family == "mixtral":
        fields["moe"] = {
            "num_experts": _int(config, "num_local_experts", source),
            "experts_per_token": _int(config, "num_experts_per_tok", source),
            "expert_intermediate_size": fields["intermediate_size"],
        }
    elif family == "qwen3_moe":
        fields["moe"] = {
            "num_experts": _int(config, "num_experts", source),
            "experts_per_token": _int(config, "num_experts_per_tok", source),
            "expert_intermediate_size": _int(config, "moe_intermediate_size", source),
            "num_dense_layers": len(config.get("mlp_only_layers") or []),
        }
    elif family in ("deepseek_v2", "deepseek_v3") and config.get("n_routed_experts"):
        fields["moe"] = {
            "num_experts": _int(config, "n_routed_experts", source),
            "experts_per_token": _int(config, "num_experts_per_tok", source),
            "expert_intermediate_size": _int(config, "moe_intermediate_size", source),
            "num_shared_experts": _int(config, "n_shared_experts", source, default=0),
            "shared_expert_intermediate_size": _int(config, "moe_intermediate_size", source),
            "num_dense_layers": _int(config, "first_k_dense_replace", source, default=0),
            # DeepSeek-V3's aux-loss-free routing keeps a per-expert score-correction bias.
            "router_bias": config.get("topk_method") == "noaux_tc",
        }
    elif family == "minimax_m2":
        # Every layer is MoE (vLLM's MiniMaxM2SparseMoeBlock): sigmoid scores plus a per-expert
        # routing bias (use_routing_bias); shared_intermediate_size 0 means no shared expert. The
        # checkpoint's MTP modules (num_mtp_modules) are not loaded by vLLM's MiniMaxM2ForCausalLM.
        shared = _int(config, "shared_intermediate_size", source, default=0)
        fields["moe"] = {
            "num_experts": _int(config, "num_local_experts", source),
            "experts_per_token": _int(config, "num_experts_per_tok", source),
            "expert_intermediate_size": fields["intermediate_size"],
            "num_shared_experts": 1 if shared else 0,
            "shared_expert_intermediate_size": shared,
            "router_bias": bool(config.get("use_routing_bias", False)),
        }
    elif family == "gpt_oss":
        # gpt-oss configs carry both spellings; older exports only experts_per_token.
        per_token_key = "num_experts_per_tok" if config.get("num_experts_per_tok") is not None else "experts_per_token"
        fields["moe"] = {
            "num_experts": _int(config, "num_local_experts", source),
            "experts_per_token": _int(config, per_token_key, source),
            "expert_intermediate_size": fields["intermediate_size"],
            "router_bias": True,
            "expert_bias": True,
        }

    # DeepSeek-V3 (and GLM-4.5+, MiMo) ship MTP modules that vLLM's "mtp" speculation drafts with.
    fields["num_mtp_layers"] = _int(config, "num_nextn_predict_layers", source, default=0)
    fields["checkpoint"] = checkpoint_format(config.get("quantization_config"), hf_quant_config, source, family)
    fields["rope_type"] = _rope_type(config)
    fields.update(extra)
    return validate_spec(ModelSpec, fields, source)


def load_hf_config(path: str | Path, **extra: Any) -> ModelSpec:
    """Read a local Hugging Face ``config.json`` (or a folder holding one, with its
    ``hf_quant_config.json`` when there is one). No network."""
    fetched = model_sources.read_local(path)
    config = fetched.config
    folder = Path(path) if Path(path).is_dir() else Path(path).parent
    name = extra.pop("name", None) or config.get("_name_or_path") or folder.name
    # A display name only (vLLM loads the folder): one line, so that no report or printed line it
    # reaches gets a line break or escape code from the file.
    return spec_from_hf_config(config, one_line(str(name)), source=str(path), hf_quant_config=fetched.hf_quant_config,
                               **extra)


# ---------------------------------------------------------------------------------------------
# The shipped catalog and name resolution
# ---------------------------------------------------------------------------------------------

def _catalog_source(entry_name: str, meta: dict) -> str:
    """Where a shipped config was read, as a resolution reports it."""
    where = str(meta.get("source") or "").strip()
    return f"shipped catalog entry {meta['hf_id']} ({where or entry_name})"


@lru_cache(maxsize=1)
def _preset_files() -> dict[str, tuple[str, dict, dict]]:
    """Every shipped config as stored: canonical Hugging Face id -> (file name, config, servopt's
    metadata), in file-name order."""
    folder = resources.files(__package__).joinpath("data/models")
    files = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            stored = json.loads(entry.read_text())
            meta = stored.pop("_servopt")
            files[meta["hf_id"]] = (entry.name, stored, meta)
    return files


@lru_cache(maxsize=None)
def _preset(hf_id: str) -> ModelSpec:
    """One shipped config's spec, built when first asked for (a command resolving one model does not
    build all of them)."""
    file_name, stored, meta = _preset_files()[hf_id]
    extra: dict[str, Any] = {
        "aliases": tuple(meta.get("aliases", ())),
        "published_params_b": meta.get("published_params_b"),
        "published_params_rounding_b": meta.get("published_params_rounding_b"),
        "config_source": _catalog_source(file_name, meta),
    }
    # An explicit size wins over the reader's estimate from vision_config (Gemma 3).
    if "extra_params" in meta:
        extra["extra_params"] = int(meta["extra_params"])
    return spec_from_hf_config(stored, hf_id, source=f"shipped config {file_name}",
                               hf_quant_config=meta.get("hf_quant_config"), **extra)


@lru_cache(maxsize=1)
def preset_models() -> dict[str, ModelSpec]:
    """Every shipped config, keyed by canonical Hugging Face id."""
    return {hf_id: _preset(hf_id) for hf_id in _preset_files()}


@dataclass(frozen=True)
class Derivative:
    """An id served with a catalogued model's config, because the catalog states the two agree in
    everything servopt reads (layers, widths, heads, context and RoPE scaling, vocabulary, dtype),
    and how that is known (``evidence``)."""

    id: str
    config_of: str
    evidence: str


@lru_cache(maxsize=1)
def derivatives() -> dict[str, Derivative]:
    """Lower-cased id -> the statement that it has a catalogued model's config: the entries of
    ``data/derivatives.yaml`` and the Hugging Face ids the model catalog lists as aliases."""
    found: dict[str, Derivative] = {}
    for spec in preset_models().values():
        for alias in spec.aliases:
            if "/" in alias:
                found[_key(alias)] = Derivative(alias, spec.name, "listed as an alias of it in the model catalog")
    raw = parse_shipped_yaml(resources.files(__package__).joinpath("data/derivatives.yaml").read_text())
    for item in raw["derivatives"]:
        found[_key(item["id"])] = Derivative(item["id"], item["config_of"], item["evidence"])
    return found


@dataclass(frozen=True)
class ResolvedModel:
    """A model name resolved to its architecture and checkpoint format, and where they came from.

    ``quantization`` is the scheme the checkpoint ships in (None for 16-bit weights); ``origin``
    says which configuration was used: a local file, the Hugging Face cache (with its revision) or
    Hub, a shipped catalog entry (with the public repository@commit it was read from), or a
    catalogued model whose config the catalog states the id shares ("derived from X by name").
    The spec carries the same text as ``config_source``.
    """

    spec: ModelSpec
    quantization: str | None
    requested: str
    origin: str = ""

    @property
    def checkpoint(self) -> CheckpointFormat | None:
        return self.spec.checkpoint


def _key(name: str) -> str:
    return name.strip().lower()


@lru_cache(maxsize=1)
def _preset_index() -> dict[str, str]:
    """Lower-cased id, id's name or short alias -> canonical id (Hugging Face id aliases are
    :func:`derivatives`, which say so)."""
    index: dict[str, str] = {}
    for hf_id, (_, _, meta) in _preset_files().items():
        index[_key(hf_id)] = hf_id
        index[_key(hf_id.split("/", 1)[-1])] = hf_id
        for alias in meta.get("aliases", ()):
            if "/" not in alias:
                index[_key(alias)] = hf_id
    return index


def known_model_names() -> list[str]:
    """Every id and alias resolution accepts offline: catalog ids and aliases, derivatives,
    catalogued checkpoints (what a "did you mean" is drawn from)."""
    names = set(preset_models())
    names.update(alias for spec in preset_models().values() for alias in spec.aliases)
    names.update(d.id for d in derivatives().values())
    names.update(c.id for c in checkpoint_catalog())
    return sorted(names)


# Suffixes that derivative checkpoints add to a base id, stripped one at a time: quantized
# re-uploads (-FP8-dynamic, -quantized.w8a8, -AWQ, -GPTQ-Int4), post-trained releases (-Instruct,
# -Chat, -it, -Thinking), pre-trained ones (-Base, -pt, -hf) and version or date tags (-v0.1, -2501).
# Used only to say which catalogued model an unknown id looks derived from, never to serve it.
_DERIVATIVE_SUFFIXES = (
    r"[-_.]quantized[-_.]w\d+a\d+$", r"[-_.]fp8[-_.](?:dynamic|static|block)$", r"[-_.](?:fp8|nvfp4|fp4)$",
    r"[-_.]w\d+a\d+$", r"[-_.]int[48]$", r"[-_.]awq$", r"[-_.]gptq$", r"[-_.]instruct(?:[-_.]?\d+)?$", r"[-_.]chat$",
    r"[-_.]it$", r"[-_.]thinking$", r"[-_.]base$", r"[-_.]pt$", r"[-_.]hf$", r"[-_.]v\d+(?:\.\d+)?$", r"[-_.]\d{4}$",
)


def _strip_suffix(name: str) -> str:
    for pattern in _DERIVATIVE_SUFFIXES:
        new = re.sub(pattern, "", name)
        if new != name:
            return new
    return name


def looks_derived_from(model_id: str) -> str | None:
    """The catalogued model an unknown id's name suggests it derives from (dropping suffixes such as
    ``-Instruct`` or ``-AWQ``, the org and Meta's "Meta-" prefix), or None. A name says nothing
    about the config (Qwen2.5-7B-Instruct has 32,768 positions, Qwen2.5-7B 131,072): this only
    names the model in an error message.

    >>> looks_derived_from("Qwen/Qwen3-8B-Base")
    'Qwen/Qwen3-8B'
    """
    index = _preset_index()
    base = _key(model_id).split("/", 1)[-1]
    candidates = [base, re.sub(r"^meta-", "", base)]
    for _ in range(8):
        for candidate in candidates:
            if candidate in index:
                return index[candidate]
        stripped = [_strip_suffix(c) for c in candidates]
        if stripped == candidates:
            return None
        candidates = stripped
    return None


def _labelled(spec: ModelSpec, origin: str) -> ModelSpec:
    return spec.model_copy(update={"config_source": origin})


def _with_format(spec: ModelSpec, fmt: CheckpointFormat | None) -> ModelSpec:
    return spec if fmt is None else spec.model_copy(update={"checkpoint": fmt})


def _resolved(spec: ModelSpec, requested: str, origin: str) -> ResolvedModel:
    spec = _labelled(spec, origin)
    return ResolvedModel(spec, spec.native_quantization, requested, origin)


def _from_catalog(text: str) -> ResolvedModel | None:
    """A shipped config (by id, name or short alias), a derivative the catalog states shares one,
    or a catalogued checkpoint whose card states it keeps its base's architecture."""
    index = _preset_index()
    if _key(text) in index:
        spec = _preset(index[_key(text)])
        return _resolved(spec, text, spec.config_source)
    derivative = derivatives().get(_key(text))
    if derivative is not None:
        base = preset_models().get(derivative.config_of)
        if base is None:
            raise InputError(f"model '{text}': the catalog states it has {derivative.config_of}'s config, which is "
                             "not shipped; pass a local config.json")
        return _resolved(base, text, f"derived from {base.name} by name (the catalog states {derivative.id} has its "
                                     f"config); config: {base.config_source}")
    entry = catalog_entry(text)
    if entry is not None:
        base = next((found for b in entry.bases if (found := _from_catalog(b)) is not None), None)
        if base is None:
            raise InputError(f"model '{text}': catalogued checkpoint of {entry.bases[0]}, whose config is not shipped; "
                             "pass a local config.json")
        root = preset_models()[base.spec.name]
        via = "" if base.spec.name == base.requested else f", which has {root.name}'s config"
        card = entry.format.source.removeprefix("checkpoint catalog (").removesuffix(")")
        origin = (f"derived from {root.name} by name: the checkpoint catalog lists {entry.id} as a checkpoint of "
                  f"{base.requested}{via} (format from its {card}); config: {root.config_source}")
        return _resolved(_with_format(base.spec, entry.format), text, origin)
    return None


def resolve_model(name_or_path: str) -> ResolvedModel:
    """Resolve a model name to its configuration, saying which one was used, or refuse it.

    In this order: a local ``config.json`` (or folder); the Hugging Face cache (the revision
    ``refs/main`` names); the shipped catalog (ids, short aliases, ids the catalog states share a
    catalogued config, catalogued checkpoints); the Hub through ``huggingface_hub`` when it is
    installed, ``HF_HUB_OFFLINE`` is not set and the Hub answers within a few seconds. A name is
    never read as a config: an id in none of these is one :class:`InputError` that says how to
    provide its config (and which catalog ids are close, or which model it looks derived from).
    """
    text = model_sources.check_model_id(str(name_or_path).strip(), "model")
    path = Path(text)
    if text.endswith(".json") or path.is_dir():
        spec = load_hf_config(path)
        kind = "folder" if path.is_dir() else "file"
        return _resolved(spec, text, f"local {kind} {path}")
    if "/" in text:
        cached = model_sources.from_cache(text)
        if cached is not None:
            spec = spec_from_hf_config(cached.config, text, source=f"{cached.origin} ({text})",
                                       hf_quant_config=cached.hf_quant_config)
            return _resolved(spec, text, cached.origin)
    found = _from_catalog(text)
    if found is not None:
        return found
    hub_error: InputError | None = None
    if "/" in text and model_sources.hub_status() is None:
        try:
            fetched = model_sources.from_hub(text)
        except InputError as err:
            hub_error = err
        else:
            spec = spec_from_hf_config(fetched.config, text, source=f"Hugging Face Hub ({text})",
                                       hf_quant_config=fetched.hf_quant_config)
            return _resolved(spec, text, fetched.origin)
    hint = did_you_mean(text, known_model_names())
    if "/" not in text:
        raise InputError(f"unknown model '{text}'{hint}: not a catalog alias nor a Hugging Face org/name id; "
                         "`servopt models` lists the catalog, or pass a local config.json path")
    why = str(hub_error).removeprefix(f"model '{text}': ") if hub_error else (
        f"the Hugging Face Hub cannot be asked: {model_sources.hub_status()}")
    looks = looks_derived_from(text)
    derived = (f" Its name suggests a derivative of {looks}, but servopt does not know that their configs agree "
               "(context, RoPE scaling, vocabulary), so it does not serve it as one." if looks else "")
    raise InputError(
        f"unknown model '{text}'{hint}: not in the Hugging Face cache ({model_sources.hub_cache_dir()}) nor in "
        f"servopt's catalog, and {why}.{derived} Provide its config: download it once where the Hub is reachable "
        f"(huggingface-cli download {text} config.json), or pass the path of its config.json (HF_HUB_OFFLINE=1 "
        "skips the Hub); `servopt models` lists the catalog")


@dataclass(frozen=True)
class ConfigFiles:
    """The files vLLM would read for a model, as far as servopt has them: ``config.json`` (and
    ModelOpt's ``hf_quant_config.json``), and where their quantization metadata comes from:
    ``"config"`` (the checkpoint's own), ``"card"`` (a catalogued checkpoint whose format is its
    card's: its base's config with the metadata the card's quantizer writes,
    :meth:`~servopt.costmodels.checkpoints.CheckpointFormat.metadata`) or None (16-bit weights)."""

    config: dict
    hf_quant_config: dict | None
    quantization_from: str | None


def _stored_config(hf_id: str) -> tuple[dict, dict | None]:
    stored = json.loads(resources.files(__package__).joinpath(f"data/models/{hf_id.replace('/', '--')}.json").read_text())
    meta = stored.pop("_servopt")
    return stored, meta.get("hf_quant_config")


def config_files(name_or_path: str) -> ConfigFiles | None:
    """The config files behind :func:`resolve_model`'s answer for ``name_or_path`` (None when it
    came from the Hub without a cached copy), so that vLLM's own code can read them
    (``servopt export --check``)."""
    text = model_sources.check_model_id(str(name_or_path).strip(), "model")
    path = Path(text)
    fetched = None
    if text.endswith(".json") or path.is_dir():
        fetched = model_sources.read_local(path)
    elif "/" in text:
        fetched = model_sources.from_cache(text)
    if fetched is not None:
        return _files(fetched.config, fetched.hf_quant_config)
    if _key(text) in _preset_index():
        return _files(*_stored_config(_preset_index()[_key(text)]))
    if (derivative := derivatives().get(_key(text))) is not None:
        return _files(*_stored_config(derivative.config_of))
    if (entry := catalog_entry(text)) is not None:
        base = next((found for b in entry.bases if (found := config_files(b)) is not None), None)
        if base is None:
            return None
        quant, hf_quant = entry.format.metadata()
        config = {k: v for k, v in base.config.items() if k != "quantization_config"}
        return ConfigFiles({**config, **({"quantization_config": quant} if quant else {})}, hf_quant, "card")
    return None


def _files(config: dict, hf_quant: dict | None) -> ConfigFiles:
    quantized = bool(config.get("quantization_config") or hf_quant)
    return ConfigFiles(config, hf_quant, "config" if quantized else None)


def get_model(name_or_path: str) -> ModelSpec:
    """The architecture for a catalog alias, Hugging Face id or local config path."""
    return resolve_model(name_or_path).spec


# ---------------------------------------------------------------------------------------------
# Contexts beyond a config's limit
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ContextExtension:
    """A longer context a model's card documents through RoPE scaling (``data/context_extensions.yaml``)."""

    rope_parameters: dict
    max_model_len: int
    source: str

    def hf_overrides(self) -> str:
        """The JSON of vLLM 0.33's ``--hf-overrides`` that serves it."""
        return json.dumps({"rope_parameters": self.rope_parameters, "max_position_embeddings": self.max_model_len},
                          separators=(",", ":"))


@lru_cache(maxsize=1)
def _context_extensions() -> dict[str, ContextExtension]:
    raw = parse_shipped_yaml(resources.files(__package__).joinpath("data/context_extensions.yaml").read_text())
    found = {}
    for item in raw["extensions"]:
        extension = ContextExtension(dict(item["rope_parameters"]), int(item["max_model_len"]), item["source"])
        for model in item["models"]:
            found[_key(model)] = extension
    return found


def context_extension(*model_ids: str) -> ContextExtension | None:
    """The documented RoPE extension of the first of ``model_ids`` (served id, architecture) that has one."""
    return next((e for m in model_ids if (e := _context_extensions().get(_key(m))) is not None), None)


def longer_context_fix(spec: ModelSpec, served_id: str, needed_tokens: int) -> str:
    """What to do when requests need ``needed_tokens`` but vLLM caps ``served_id`` at its config's
    limit: the RoPE scaling its card documents (as the ``--hf-overrides`` vLLM 0.33 takes), and
    catalogued models of the family with a long enough context.

    >>> print(longer_context_fix(get_model("Qwen/Qwen2.5-7B-Instruct"), "Qwen/Qwen2.5-7B-Instruct", 60000)[:96])
    Qwen/Qwen2.5-7B-Instruct's config allows 32,768 tokens (vLLM refuses a longer --max-model-len);
    """
    parts = [f"{served_id}'s config allows {spec.max_context:,} tokens (vLLM refuses a longer --max-model-len)"]
    extension = context_extension(served_id, spec.name)
    if extension is not None and extension.max_model_len >= needed_tokens:
        parts.append(f"its card documents RoPE scaling to {extension.max_model_len:,} ({extension.source}): serve it "
                     f"with vllm serve --hf-overrides '{extension.hf_overrides()}', and plan it by passing a copy of "
                     "its config.json with those two fields set")
    longer = sorted((s for s in preset_models().values() if s.family == spec.family and s.max_context >= needed_tokens
                     and s.checkpoint is None), key=lambda s: abs(math.log(s.num_params / spec.num_params)))
    if longer:
        parts.append("or choose a model with a longer context: " + ", ".join(
            f"{s.name} ({s.max_context:,})" for s in longer[:3]))
    elif extension is None:
        parts.append("choose a model with a longer context (`servopt models` lists each one's)")
    return "; ".join(parts)
