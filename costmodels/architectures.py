"""Model architectures: a pydantic spec, a Hugging Face ``config.json`` reader, and shipped presets.

A :class:`ModelSpec` holds what the cost model needs: layer count and widths, the attention kind
(MHA, GQA, MQA or MLA), MoE routing, sliding windows and the context limit. Presets are stored as
the relevant fields of each model's Hugging Face ``config.json`` under ``data/models/`` and read with
the same :func:`spec_from_hf_config` a user's local file goes through, so every family's reader is
exercised by the presets.

Example:
    >>> from servopt.costmodels.architectures import resolve_model
    >>> resolved = resolve_model("meta-llama/Llama-3.1-8B-Instruct-FP8")
    >>> resolved.spec.name, resolved.quantization, round(resolved.spec.num_params / 1e9, 2)
    ('meta-llama/Llama-3.1-8B', 'fp8', 8.03)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cached_property, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .errors import InputError, format_validation_error, unknown_name_error

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
    dtype: ModelDType = "bfloat16"
    gated_mlp: bool = True
    attention_bias: bool = False
    attention_output_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    extra_params: int = Field(default=0, ge=0, description="weights outside the decoder (vision tower)")
    native_quantization: str | None = Field(default=None, description="quantization the release ships in")
    published_params_b: float | None = Field(default=None, description="size the model card states")
    aliases: tuple[str, ...] = ()

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
            params += 2 * self.head_dim
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
    "granite", "phi3", "deepseek_v2", "deepseek_v3", "gpt_oss",
)

_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32", "half": "float16",
           "fp16": "float16", "bf16": "bfloat16", "float": "float32"}


def _require(config: dict, key: str, source: str) -> Any:
    if key not in config or config[key] is None:
        raise InputError(f"{source}: config.json lacks required key '{key}'")
    return config[key]


def spec_from_hf_config(config: dict, name: str, source: str = "config.json", **extra: Any) -> ModelSpec:
    """Build a :class:`ModelSpec` from the dict of a Hugging Face ``config.json``.

    Multimodal configs (Gemma 3) are read through their ``text_config``. ``extra`` sets fields the
    config does not hold (aliases, published size, vision-tower parameters).
    """
    if not isinstance(config, dict):
        raise InputError(f"{source}: config.json must hold a JSON object")
    family = config.get("model_type")
    if family == "gemma3" and isinstance(config.get("text_config"), dict):
        text = {**config["text_config"]}
        text.setdefault("torch_dtype", config.get("torch_dtype"))
        config = {**text, "model_type": "gemma3"}
    if family not in _SUPPORTED_FAMILIES:
        raise InputError(
            f"{source}: model_type '{family}' is not supported; supported: {', '.join(_SUPPORTED_FAMILIES)}"
        )
    family = "gemma3" if family == "gemma3_text" else family
    heads = int(_require(config, "num_attention_heads", source))
    hidden = int(_require(config, "hidden_size", source))
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    dtype = _DTYPES.get(str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"), "bfloat16")
    fields: dict[str, Any] = {
        "name": name,
        "family": family,
        "num_layers": int(_require(config, "num_hidden_layers", source)),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": int(_require(config, "intermediate_size", source)),
        "vocab_size": int(_require(config, "vocab_size", source)),
        "tie_word_embeddings": bool(config.get("tie_word_embeddings", family in ("gemma2", "gemma3"))),
        "max_context": int(config.get("max_position_embeddings") or config.get("max_sequence_length") or 4096),
        "dtype": dtype,
        "attention_bias": bool(config.get("attention_bias", family == "qwen2")),
        "qk_norm": family in ("qwen3", "qwen3_moe", "gemma3"),
    }
    if family == "qwen2":
        fields["attention_output_bias"] = False
    if family == "phi3":
        fields["attention_bias"] = False
    if family == "gpt_oss":
        fields["attention_bias"] = True
        fields["attention_output_bias"] = True

    # Attention kind.
    if family in ("deepseek_v2", "deepseek_v3"):
        fields["mla"] = MLAConfig(
            kv_lora_rank=int(_require(config, "kv_lora_rank", source)),
            qk_rope_head_dim=int(_require(config, "qk_rope_head_dim", source)),
            qk_nope_head_dim=int(_require(config, "qk_nope_head_dim", source)),
            v_head_dim=int(_require(config, "v_head_dim", source)),
            q_lora_rank=config.get("q_lora_rank") or None,
        )
        fields["attention_kind"] = "mla"
        fields["num_kv_heads"] = heads
        fields["head_dim"] = int(config["qk_nope_head_dim"]) + int(config["qk_rope_head_dim"])
    elif kv_heads == heads:
        fields["attention_kind"] = "mha"
    elif kv_heads == 1:
        fields["attention_kind"] = "mqa"
    else:
        fields["attention_kind"] = "gqa"

    # Sliding windows: which layers use them.
    window = config.get("sliding_window")
    if window and family in ("gemma2",):
        fields["sliding_window"] = int(window)
        fields["num_sliding_layers"] = fields["num_layers"] // 2
    elif window and family == "gemma3":
        pattern = int(config.get("sliding_window_pattern") or 6)
        fields["sliding_window"] = int(window)
        fields["num_sliding_layers"] = fields["num_layers"] - fields["num_layers"] // pattern
    elif window and family == "gpt_oss":
        layer_types = config.get("layer_types") or []
        fields["sliding_window"] = int(window)
        fields["num_sliding_layers"] = (
            sum(1 for t in layer_types if t == "sliding_attention") if layer_types else fields["num_layers"] // 2
        )
    elif window and family in ("mistral", "qwen2", "qwen3", "phi3") and config.get("use_sliding_window", family != "qwen2"):
        if int(window) < fields["max_context"]:
            fields["sliding_window"] = int(window)
            fields["num_sliding_layers"] = fields["num_layers"]

    # Mixture of experts.
    if family == "mixtral":
        fields["moe"] = MoEConfig(
            num_experts=int(config["num_local_experts"]),
            experts_per_token=int(config["num_experts_per_tok"]),
            expert_intermediate_size=fields["intermediate_size"],
        )
    elif family == "qwen3_moe":
        fields["moe"] = MoEConfig(
            num_experts=int(config["num_experts"]),
            experts_per_token=int(config["num_experts_per_tok"]),
            expert_intermediate_size=int(config["moe_intermediate_size"]),
            num_dense_layers=len(config.get("mlp_only_layers") or []),
        )
    elif family in ("deepseek_v2", "deepseek_v3") and config.get("n_routed_experts"):
        fields["moe"] = MoEConfig(
            num_experts=int(config["n_routed_experts"]),
            experts_per_token=int(config["num_experts_per_tok"]),
            expert_intermediate_size=int(config["moe_intermediate_size"]),
            num_shared_experts=int(config.get("n_shared_experts") or 0),
            shared_expert_intermediate_size=int(config["moe_intermediate_size"]),
            num_dense_layers=int(config.get("first_k_dense_replace") or 0),
        )
    elif family == "gpt_oss":
        fields["moe"] = MoEConfig(
            num_experts=int(config["num_local_experts"]),
            experts_per_token=int(config.get("num_experts_per_tok") or config.get("experts_per_token")),
            expert_intermediate_size=fields["intermediate_size"],
            router_bias=True,
            expert_bias=True,
        )

    quant = config.get("quantization_config")
    if isinstance(quant, dict):
        fields["native_quantization"] = quantization_from_hf_config(quant)
    fields.update(extra)
    try:
        return ModelSpec.model_validate(fields)
    except ValidationError as err:
        raise InputError(format_validation_error(err, source)) from None


def quantization_from_hf_config(quant: dict) -> str | None:
    """Map a config's ``quantization_config`` to servopt's scheme names (fp8, int8, awq, gptq, mxfp4)."""
    method = str(quant.get("quant_method") or "").lower()
    if method in ("awq", "awq_marlin"):
        return "awq"
    if method in ("gptq", "gptq_marlin"):
        return "gptq"
    if method in ("fp8", "fbgemm_fp8"):
        return "fp8"
    if method == "mxfp4":
        return "mxfp4"
    if method == "compressed-tensors":
        groups = quant.get("config_groups") or {}
        for group in groups.values():
            weights = (group or {}).get("weights") or {}
            activations = (group or {}).get("input_activations") or {}
            bits, kind = weights.get("num_bits"), weights.get("type")
            if kind == "float" and bits == 8:
                return "fp8"
            if kind == "int" and bits == 8:
                return "int8" if activations else "int8"
            if kind == "int" and bits == 4:
                return "gptq"
        return None
    return None


def load_hf_config(path: str | Path, **extra: Any) -> ModelSpec:
    """Read a local Hugging Face ``config.json`` (or a directory holding one). No network."""
    path = Path(path)
    if path.is_dir():
        path = path / "config.json"
    try:
        config = json.loads(path.read_text())
    except OSError as err:
        raise InputError(f"model config '{path}' cannot be read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"model config '{path}' is not valid JSON (line {err.lineno}: {err.msg})") from None
    name = extra.pop("name", None) or config.get("_name_or_path") or path.parent.name
    return spec_from_hf_config(config, str(name), source=str(path), **extra)


# ---------------------------------------------------------------------------------------------
# Presets and name resolution
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def preset_models() -> dict[str, ModelSpec]:
    """All shipped presets keyed by canonical Hugging Face id."""
    folder = resources.files(__package__).joinpath("data/models")
    presets = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        stored = json.loads(entry.read_text())
        meta = stored.pop("_servopt")
        spec = spec_from_hf_config(
            stored,
            meta["hf_id"],
            source=f"preset {entry.name}",
            aliases=tuple(meta.get("aliases", ())),
            published_params_b=meta.get("published_params_b"),
            extra_params=int(meta.get("extra_params", 0)),
        )
        presets[spec.name] = spec
    return presets


# Suffixes that derivative checkpoints add to a base id, stripped one at a time.
_DERIVATIVE_SUFFIXES = (
    r"[-_.]quantized[-_.]w\d+a\d+$", r"[-_.]fp8[-_.](?:dynamic|static)$", r"[-_.]fp8$", r"[-_.]w\d+a\d+$",
    r"[-_.]int[48]$", r"[-_.]awq$", r"[-_.]gptq$", r"[-_.]instruct(?:[-_.]?\d+)?$", r"[-_.]chat$", r"[-_.]it$",
    r"[-_.]base$", r"[-_.]hf$", r"[-_.]v\d+(?:\.\d+)?$", r"[-_.]\d{4}$",
)

# Keywords of a checkpoint id and the quantization they imply, most specific first.
_QUANT_KEYWORDS = (
    (r"awq", "awq"), (r"gptq|w4a16|int4", "gptq"), (r"fp8", "fp8"), (r"w8a8|int8", "int8"),
)


def quantization_from_id(model_id: str) -> str | None:
    """The weight quantization a checkpoint id implies (e.g. ``-AWQ`` -> awq), or None."""
    text = model_id.lower()
    for pattern, scheme in _QUANT_KEYWORDS:
        if re.search(rf"(?:^|[-_./]){pattern}(?:$|[-_./])", text):
            return scheme
    return None


@dataclass(frozen=True)
class ResolvedModel:
    """A model name resolved to its architecture, with the quantization its id implies."""

    spec: ModelSpec
    quantization: str | None
    requested: str


def _key(name: str) -> str:
    return name.strip().lower()


@lru_cache(maxsize=1)
def _preset_index() -> dict[str, str]:
    index: dict[str, str] = {}
    for hf_id, spec in preset_models().items():
        index[_key(hf_id)] = hf_id
        index[_key(hf_id.split("/", 1)[-1])] = hf_id
        for alias in spec.aliases:
            index[_key(alias)] = hf_id
    return index


def _strip_suffix(name: str) -> str:
    for pattern in _DERIVATIVE_SUFFIXES:
        new = re.sub(pattern, "", name)
        if new != name:
            return new
    return name


def resolve_model(name_or_path: str) -> ResolvedModel:
    """Resolve a preset alias, a Hugging Face id (derivatives included) or a local config path."""
    text = str(name_or_path).strip()
    if not text:
        raise InputError("model: empty model name; give a preset alias, a Hugging Face id or a config.json path")
    path = Path(text)
    if text.endswith(".json") or path.is_dir() and (path / "config.json").exists():
        spec = load_hf_config(path)
        return ResolvedModel(spec, spec.native_quantization, text)
    index = _preset_index()
    quant = quantization_from_id(text)
    # Re-uploads change the org (neuralmagic/, RedHatAI/) and add or drop Meta's "Meta-" prefix.
    base = _key(text).split("/", 1)[-1]
    candidates = [_key(text), base, re.sub(r"^meta-", "", base)]
    for _ in range(8):
        for candidate in candidates:
            if candidate in index:
                spec = preset_models()[index[candidate]]
                return ResolvedModel(spec, quant or spec.native_quantization, text)
        stripped = [_strip_suffix(c) for c in candidates]
        if stripped == candidates:
            break
        candidates = stripped
    raise unknown_name_error(
        "model", text, sorted({s.aliases[0] if s.aliases else s.name for s in preset_models().values()}),
        "Or pass the path of a local config.json.",
    )


def get_model(name_or_path: str) -> ModelSpec:
    """The architecture for a preset alias, Hugging Face id or local config path."""
    return resolve_model(name_or_path).spec
