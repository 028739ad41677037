"""Model presets, the Hugging Face config.json reader and model-id resolution."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import pytest

from servopt.costmodels.architectures import (
    ModelSpec,
    get_model,
    load_hf_config,
    preset_models,
    resolve_model,
    spec_from_hf_config,
)
from servopt.costmodels.errors import InputError

GIB = 2**30
PRESETS = preset_models()


# --- parameter counts ------------------------------------------------------------------------

@pytest.mark.parametrize("hf_id", sorted(PRESETS))
def test_preset_params_within_one_percent_of_published(hf_id: str) -> None:
    spec = PRESETS[hf_id]
    assert spec.published_params_b is not None, f"{hf_id} has no published_params_b"
    computed = spec.num_params / 1e9
    step = spec.published_params_rounding_b
    if step is not None:
        # A card that rounds its size ("1T") is checked at its own rounding, no finer.
        assert round(computed / step) * step == spec.published_params_b, (
            f"{hf_id}: {computed:.3f}B computed does not round to the {spec.published_params_b}B published")
        return
    assert computed == pytest.approx(spec.published_params_b, rel=0.01), (
        f"{hf_id}: {computed:.3f}B computed vs {spec.published_params_b}B published"
    )


def test_required_presets_are_shipped() -> None:
    required = {
        "meta-llama/Llama-2-7b-hf", "meta-llama/Llama-2-13b-hf", "meta-llama/Llama-2-70b-hf",
        "meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-70B", "meta-llama/Llama-3.1-405B",
        "meta-llama/Llama-3.3-70B-Instruct", "mistralai/Mistral-7B-v0.1",
        "mistralai/Mistral-Small-24B-Base-2501", "mistralai/Mixtral-8x7B-v0.1", "Qwen/Qwen2.5-7B",
        "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-32B", "Qwen/Qwen2.5-72B", "Qwen/Qwen3-8B", "Qwen/Qwen3-14B",
        "Qwen/Qwen3-32B", "Qwen/Qwen3-30B-A3B", "Qwen/Qwen3-235B-A22B", "google/gemma-2-2b-it",
        "google/gemma-2-9b-it", "google/gemma-2-27b-it", "google/gemma-3-4b-it", "google/gemma-3-12b-it",
        "google/gemma-3-27b-it", "ibm-granite/granite-3.1-8b-instruct", "microsoft/Phi-3-mini-4k-instruct",
        "microsoft/phi-4", "codellama/CodeLlama-7b-hf", "deepseek-ai/DeepSeek-V2-Lite",
        "deepseek-ai/DeepSeek-V3", "openai/gpt-oss-120b",
    }
    assert required <= set(PRESETS)


def test_preset_file_names_match_hf_ids() -> None:
    folder = Path(__file__).resolve().parents[1] / "costmodels" / "data" / "models"
    for path in folder.glob("*.json"):
        meta = json.loads(path.read_text())["_servopt"]
        assert path.stem == meta["hf_id"].replace("/", "--")
        assert meta["source"] and meta["aliases"]


# Active parameters per token as the model cards state them. Cards disagree on whether the input
# embedding table counts (a token only looks up one row): Mixtral and Qwen3 count it, gpt-oss's
# 5.1B and DeepSeek-V2-Lite's 2.4B do not.
ACTIVE = [
    ("mixtral-8x7b", 12.9, "with_embedding"),
    ("qwen3-30b-a3b", 3.3, "with_embedding"),
    ("qwen3-235b-a22b", 22.0, "with_embedding"),
    ("deepseek-v3", 37.0, "with_embedding"),
    ("gpt-oss-120b", 5.1, "without_embedding"),
    ("deepseek-v2-lite", 2.4, "without_embedding"),
]


@pytest.mark.parametrize(("name", "published", "convention"), ACTIVE)
def test_moe_active_params(name: str, published: float, convention: str) -> None:
    spec = get_model(name)
    active = spec.active_params_per_token if convention == "with_embedding" else spec.active_params_excluding_embedding
    assert active / 1e9 == pytest.approx(published, rel=0.03)
    assert spec.active_params_excluding_embedding < spec.active_params_per_token < spec.num_params


def test_dense_active_params_are_the_decoder() -> None:
    spec = get_model("llama-3.1-8b")
    assert spec.active_params_per_token == spec.num_params
    assert spec.active_params_excluding_embedding == spec.num_params - spec.embedding_params
    tied = get_model("gemma-2-9b")  # the tied embedding is read in full as the LM head
    assert tied.active_params_excluding_embedding == tied.active_params_per_token


def test_deepseek_v3_counts_main_layers_only() -> None:
    spec = get_model("deepseek-v3")
    assert spec.num_layers == 61
    assert spec.moe is not None and spec.moe.num_dense_layers == 3 and spec.num_moe_layers == 58
    assert spec.mla is not None and spec.mla.q_lora_rank == 1536
    assert spec.moe.router_bias  # noaux_tc score-correction bias


def test_deepseek_v2_lite_projects_queries_without_lora() -> None:
    spec = get_model("deepseek-v2-lite")
    assert spec.mla is not None and spec.mla.q_lora_rank is None
    assert spec.moe is not None
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.num_shared_experts) == (64, 6, 2)


def test_family_specific_weights() -> None:
    qwen = get_model("qwen2.5-7b")
    h, q, kv = qwen.hidden_size, qwen.q_dim, qwen.kv_dim
    assert qwen.attention_params_per_layer == 2 * h * q + 2 * h * kv + q + 2 * kv  # q/k/v biases
    assert get_model("qwen3-32b").qk_norm and get_model("gemma-3-27b").qk_norm
    assert not get_model("phi-3-mini").attention_bias
    oss = get_model("gpt-oss-120b")
    assert oss.attention_bias and oss.attention_output_bias
    assert oss.moe is not None and oss.moe.expert_bias and oss.moe.router_bias
    assert get_model("granite-3.1-8b").tie_word_embeddings
    assert get_model("gemma-2-27b").tie_word_embeddings
    assert not get_model("llama-3.1-8b").tie_word_embeddings


def test_native_quantization() -> None:
    assert get_model("deepseek-v3").native_quantization == "fp8"
    assert get_model("gpt-oss-120b").native_quantization == "mxfp4"
    assert get_model("llama-3.1-8b").native_quantization is None


# --- KV cache and attention layout ---------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "values", "kind"),
    [
        ("deepseek-v2-lite", 576, "mla"),
        ("deepseek-v3", 576, "mla"),
        ("llama-3.1-8b", 2 * 8 * 128, "gqa"),
        ("llama-2-7b", 2 * 32 * 128, "mha"),
        ("mistral-small-24b", 2 * 8 * 128, "gqa"),
        ("qwen3-30b-a3b", 2 * 4 * 128, "gqa"),
        ("gemma-2-9b", 2 * 8 * 256, "gqa"),
        ("gemma-3-4b", 2 * 4 * 256, "gqa"),
        ("gemma-3-27b", 2 * 16 * 128, "gqa"),
        ("phi-3-mini", 2 * 32 * 96, "mha"),
        ("phi-4", 2 * 10 * 128, "gqa"),
        ("gpt-oss-120b", 2 * 8 * 64, "gqa"),
    ],
)
def test_kv_values_per_token_per_layer(name: str, values: int, kind: str) -> None:
    spec = get_model(name)
    assert spec.kv_values_per_token_per_layer == values
    assert spec.attention_kind == kind


@pytest.mark.parametrize(
    ("name", "window", "sliding_layers"),
    [
        ("gemma-2-2b", 4096, 13),
        ("gemma-2-27b", 4096, 23),
        ("gemma-3-4b", 1024, 29),  # 34 layers, every 6th global
        ("gemma-3-12b", 1024, 40),
        ("gemma-3-27b", 1024, 52),
        ("gpt-oss-120b", 128, 18),  # alternating, from layer_types
        ("mistral-7b", 4096, 32),  # v0.1 slides on every layer
        ("phi-3-mini", 2047, 32),
        ("mistralai/Mistral-7B-Instruct-v0.2", None, 0),
        ("mistralai/Mistral-7B-v0.3", None, 0),
        ("qwen2.5-7b", None, 0),  # sliding_window set but use_sliding_window false
        ("llama-3.1-8b", None, 0),
    ],
)
def test_sliding_windows(name: str, window: int | None, sliding_layers: int) -> None:
    spec = get_model(name)
    assert spec.sliding_window == window
    assert spec.num_sliding_layers == sliding_layers


def test_context_limits() -> None:
    assert get_model("mistral-7b").max_context == 32768
    assert get_model("llama-2-7b").max_context == 4096
    assert get_model("codellama-7b").max_context == 16384
    assert get_model("qwen3-8b").max_context == 40960
    assert get_model("gemma-3-4b").max_context == 131072


def test_mistral_versions_differ_in_vocabulary_only_where_they_should() -> None:
    v1, v2, v3 = (get_model(n) for n in ("mistral-7b", "mistral-7b-v0.2", "mistral-7b-v0.3"))
    assert v1.vocab_size == v2.vocab_size == 32000 and v3.vocab_size == 32768
    assert v1.num_params == v2.num_params < v3.num_params


# --- weights as vLLM loads them ----------------------------------------------------------------

# weight_memory_gib of shared/data/measured/memory/vllm_memory_profiles_dev.csv (vLLM 0.19, bf16,
# single H100), copied here so the check runs without the shared data folder.
MEASURED_WEIGHT_GIB = {
    "codellama/CodeLlama-7b-hf": 12.56,
    "deepseek-ai/DeepSeek-V2-Lite-Chat": 29.43,
    "google/gemma-2-27b-it": 50.72,
    "google/gemma-2-2b-it": 4.90,
    "google/gemma-2-9b-it": 17.22,
    "google/gemma-3-12b-it": 23.31,
    "google/gemma-3-27b-it": 51.45,
    "google/gemma-3-4b-it": 8.58,
    "microsoft/phi-4": 27.39,
}


@pytest.mark.parametrize(("model_id", "measured_gib"), sorted(MEASURED_WEIGHT_GIB.items()))
def test_weights_match_vllm_measurements(model_id: str, measured_gib: float) -> None:
    resolved = resolve_model(model_id)
    assert resolved.quantization is None
    assert resolved.spec.weight_memory_bytes / GIB == pytest.approx(measured_gib, rel=0.015)


def _shared_memory_csv() -> Path | None:
    relative = Path("data/measured/memory/vllm_memory_profiles_dev.csv")
    roots = [os.environ.get("SERVOPT_SHARED_DIR"), Path(__file__).resolve().parents[1] / "shared", "/work/shared"]
    for root in roots:
        if root and (Path(root) / relative).is_file():
            return Path(root) / relative
    return None


def test_weights_match_shared_memory_profiles() -> None:
    path = _shared_memory_csv()
    if path is None:
        pytest.skip("shared/data/measured/memory/vllm_memory_profiles_dev.csv is not available")
    rows = [r for r in csv.DictReader(path.open()) if r.get("status", "ok") == "ok"]
    assert rows
    for row in rows:
        if row.get("quantization") or float(row.get("tp") or 1) != 1 or float(row.get("pp") or 1) != 1:
            continue
        spec = get_model(row["model"])
        measured = float(row["weight_memory_gib"])
        assert spec.weight_memory_bytes / GIB == pytest.approx(measured, rel=0.015), row["model"]


def test_gemma3_rope_table_is_part_of_loaded_weights() -> None:
    # Linear RoPE scaling x8 makes vLLM precompute 1M positions x head_dim 256 for the global
    # layers plus 128k for the local ones: 576 MiB in bf16, 7% of the 4B's loaded weights.
    spec = get_model("gemma-3-4b")
    assert spec.rope_cache_bytes == (131072 * 8 + 131072) * 256 * 2
    assert spec.weight_memory_bytes == spec.num_params * 2 + spec.rope_cache_bytes
    assert get_model("llama-3.1-8b").rope_cache_bytes == 131072 * 128 * 2


@pytest.mark.parametrize("hf_id", ["google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it"])
def test_gemma3_vision_tower_estimate_matches_preset(hf_id: str) -> None:
    folder = Path(__file__).resolve().parents[1] / "costmodels" / "data" / "models"
    stored = json.loads((folder / (hf_id.replace("/", "--") + ".json")).read_text())
    meta = stored.pop("_servopt")
    estimated = spec_from_hf_config(stored, hf_id)  # no extra_params given: read from vision_config
    assert estimated.extra_params == meta["extra_params"]
    assert 0.41e9 < estimated.extra_params < 0.43e9


# --- name resolution -----------------------------------------------------------------------

RESOLUTION = [
    # aliases
    ("llama-2-7b", "meta-llama/Llama-2-7b-hf", None),
    ("llama-3.1-8b", "meta-llama/Llama-3.1-8B", None),
    ("llama-3.1-70b", "meta-llama/Llama-3.1-70B", None),
    ("llama-3.3-70b", "meta-llama/Llama-3.3-70B-Instruct", None),
    ("mistral-7b", "mistralai/Mistral-7B-v0.1", None),
    ("mistral-small-24b", "mistralai/Mistral-Small-24B-Base-2501", None),
    ("mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", None),
    ("qwen2.5-7b", "Qwen/Qwen2.5-7B", None),
    ("qwen3-32b", "Qwen/Qwen3-32B", None),
    ("qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", None),
    ("qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", None),
    ("gemma-2-9b", "google/gemma-2-9b-it", None),
    ("gemma-3-27b", "google/gemma-3-27b-it", None),
    ("granite-3.1-8b", "ibm-granite/granite-3.1-8b-instruct", None),
    ("granite-3.x-8b", "ibm-granite/granite-3.1-8b-instruct", None),
    ("granite-3.0-8b", "ibm-granite/granite-3.1-8b-instruct", None),
    ("phi-3-mini", "microsoft/Phi-3-mini-4k-instruct", None),
    ("phi-4", "microsoft/phi-4", None),
    ("codellama-7b", "codellama/CodeLlama-7b-hf", None),
    ("deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", None),
    ("deepseek-v3", "deepseek-ai/DeepSeek-V3", "fp8"),
    ("gpt-oss-120b", "openai/gpt-oss-120b", "mxfp4"),
    ("  Llama-3.1-8B  ", "meta-llama/Llama-3.1-8B", None),
    # Hugging Face ids, and post-trained releases the catalog states share a catalogued config
    ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf", None),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B", None),
    ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B", None),
    ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct", None),
    ("mistralai/Mistral-7B-Instruct-v0.1", "mistralai/Mistral-7B-v0.1", None),
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistralai/Mistral-7B-Instruct-v0.2", None),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-v0.3", None),
    ("mistralai/Mistral-Small-24B-Instruct-2501", "mistralai/Mistral-Small-24B-Instruct-2501", None),
    ("mistralai/Mistral-Small-3.1-24B-Instruct-2503", "mistralai/Mistral-Small-3.1-24B-Instruct-2503", None),
    ("ibm-granite/granite-3.3-8b-instruct", "ibm-granite/granite-3.3-8b-instruct", None),
    ("meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", None),
    ("Qwen/Qwen2.5-3B-Instruct", "Qwen/Qwen2.5-3B-Instruct", None),
    ("Qwen/Qwen2.5-1.5B", "Qwen/Qwen2.5-1.5B", None),
    ("moonshotai/Kimi-Dev-72B", "moonshotai/Kimi-Dev-72B", None),
    ("Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-8B-Instruct", None),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1", None),
    ("google/gemma-2-9b", "google/gemma-2-9b-it", None),
    ("google/gemma-3-4b-pt", "google/gemma-3-4b-it", None),
    ("ibm-granite/granite-3.1-8b-base", "ibm-granite/granite-3.1-8b-instruct", None),
    ("codellama/CodeLlama-7b-Instruct-hf", "codellama/CodeLlama-7b-hf", None),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "deepseek-ai/DeepSeek-V2-Lite", None),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-ai/DeepSeek-V3", "fp8"),
    # org-prefixed quantized re-uploads
    ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", "meta-llama/Llama-3.1-8B", "fp8"),
    ("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8", "meta-llama/Llama-3.1-8B", "fp8"),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", "meta-llama/Llama-3.1-8B", "gptq"),
    ("RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w8a8", "meta-llama/Llama-3.1-70B", "int8"),
    ("RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic", "meta-llama/Llama-3.3-70B-Instruct", "fp8"),
    ("TheBloke/Llama-2-7B-Chat-AWQ", "meta-llama/Llama-2-7b-hf", "awq"),
    ("TheBloke/Mistral-7B-Instruct-v0.2-AWQ", "mistralai/Mistral-7B-Instruct-v0.2", "awq"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", None),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct", "awq"),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", "Qwen/Qwen2.5-72B-Instruct", "gptq"),
    ("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-32B-FP8", "fp8"),
    ("RedHatAI/gemma-2-9b-it-FP8", "google/gemma-2-9b-it", "fp8"),
]


@pytest.mark.parametrize(("requested", "hf_id", "quantization"), RESOLUTION)
def test_resolve_model(requested: str, hf_id: str, quantization: str | None) -> None:
    resolved = resolve_model(requested)
    assert resolved.spec.name == hf_id
    assert resolved.quantization == quantization
    assert resolved.requested == requested.strip()


# Ids whose configs differ from the catalogued model their names derive from, or that nothing in the
# catalog describes: refused offline (exit 2 at the CLI), never served as the name suggests.
REFUSED = [
    ("Qwen/Qwen3-8B-Base", "Qwen/Qwen3-8B"),  # 32,768 positions; Qwen3-8B has 40,960
    ("Qwen/Qwen3-30B-A3B-Base", "Qwen/Qwen3-30B-A3B"),  # 32,768 positions; Qwen3-30B-A3B has 40,960
    ("Qwen/Qwen2-7B", "Qwen/Qwen2-7B-Instruct"),  # 131,072 positions; its Instruct 32,768
    ("Qwen/Qwen2.5-3B", "Qwen/Qwen2.5-3B-Instruct"),  # no public copy of the base config to compare
    ("meta-llama/Llama-3.1-405B-Instruct-FP8", "meta-llama/Llama-3.1-405B"),  # fbgemm FP8, not catalogued
    ("acme/Qwen2.5-7B-Instruct-AWQ", "Qwen/Qwen2.5-7B-Instruct"),
]


@pytest.mark.parametrize(("requested", "looks_like"), REFUSED)
def test_a_derivative_by_name_is_refused_unless_the_catalog_states_its_config(requested, looks_like, tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(InputError) as err:
        resolve_model(requested)
    message = str(err.value)
    assert f"suggests a derivative of {looks_like}," in message and "\n" not in message
    assert f"huggingface-cli download {requested} config.json" in message and "config.json" in message


def test_the_issue_checkpoint_is_block_fp8_with_its_own_context():
    """Qwen3-30B-A3B-Instruct-2507-FP8: block FP8 (quant_method fp8, 128x128), 262,144 positions."""
    resolved = resolve_model("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8")
    fmt = resolved.spec.checkpoint
    assert (fmt.method, fmt.granularity, fmt.block_size) == ("fp8", "block", (128, 128))
    assert resolved.spec.max_context == 262144 and resolved.spec.name == "Qwen/Qwen3-30B-A3B-Instruct-2507"


def test_instruct_context_is_its_own_not_its_base():
    """Qwen2.5-7B-Instruct's config sets 32,768 positions; Qwen2.5-7B's 131,072."""
    instruct, base = resolve_model("Qwen/Qwen2.5-7B-Instruct"), resolve_model("Qwen/Qwen2.5-7B")
    assert (instruct.spec.max_context, base.spec.max_context) == (32768, 131072)
    assert instruct.spec.name == "Qwen/Qwen2.5-7B-Instruct"
    assert instruct.origin.startswith("shipped catalog entry Qwen/Qwen2.5-7B-Instruct (")


def test_every_resolution_says_which_config_it_used(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(LLAMA_CONFIG))
    assert resolve_model(str(folder)).origin == f"local folder {folder}"
    assert resolve_model(str(folder / "config.json")).origin == f"local file {folder / 'config.json'}"
    shipped = resolve_model("Qwen/Qwen3-32B-FP8")
    assert shipped.origin.startswith("shipped catalog entry Qwen/Qwen3-32B-FP8 (github:ai-dynamo/aiconfigurator@")
    derived = resolve_model("meta-llama/Llama-3.1-8B-Instruct")
    assert derived.origin.startswith("derived from meta-llama/Llama-3.1-8B by name")
    card = resolve_model("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4")
    assert card.origin.startswith("derived from meta-llama/Llama-3.1-8B by name: the checkpoint catalog lists")
    assert "format from its card" in card.origin
    for resolved in (shipped, derived, card):
        assert resolved.spec.config_source == resolved.origin


def test_a_misspelt_id_gets_the_catalog_ids_close_to_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(InputError, match=r"did you mean 'Qwen/Qwen3-30B-A3B-FP8'"):
        resolve_model("Qwen/Qwen3-30B-A3B-FP")
    with pytest.raises(InputError, match=r"did you mean 'llama-3.1-8b'"):
        resolve_model("llama-3.1-8bb")


def _compressed_tensors(num_bits: int, kind: str, activations: bool) -> dict:
    group = {"targets": ["Linear"], "weights": {"num_bits": num_bits, "type": kind, "symmetric": True}}
    group["input_activations"] = {"num_bits": num_bits, "type": kind, "dynamic": True} if activations else None
    return {"quant_method": "compressed-tensors", "format": "naive-quantized", "config_groups": {"group_0": group}}


def test_unknown_model_says_where_it_looked(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(InputError) as err:
        resolve_model("acme/NotAModel-7B")
    message = str(err.value)
    assert "unknown model 'acme/NotAModel-7B': not in the Hugging Face cache" in message and str(tmp_path) in message
    assert "config.json" in message and "servopt models" in message and "\n" not in message


def test_empty_model_name() -> None:
    with pytest.raises(InputError, match="model: empty"):
        resolve_model("   ")


# --- reading config.json files -------------------------------------------------------------

LLAMA_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def _write(folder: Path, config: dict | str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    return path


def test_load_config_from_directory_and_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "my-llama", LLAMA_CONFIG)
    from_dir = load_hf_config(tmp_path / "my-llama")
    from_file = load_hf_config(path)
    assert from_dir == from_file
    assert from_dir.name == "my-llama"
    assert from_dir.num_params == get_model("llama-3.1-8b").num_params
    resolved = resolve_model(str(path))
    assert resolved.spec.num_layers == 32 and resolved.quantization is None
    assert resolve_model(str(tmp_path / "my-llama")).spec == from_dir.model_copy(
        update={"config_source": f"local folder {tmp_path / 'my-llama'}"})


def test_load_compressed_tensors_w8a8_config(tmp_path: Path) -> None:
    config = {**LLAMA_CONFIG, "_name_or_path": "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
              "quantization_config": _compressed_tensors(8, "int", True)}
    path = _write(tmp_path / "w8a8", config)
    spec = load_hf_config(path)
    assert spec.native_quantization == "int8"
    assert spec.name == "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8"
    assert resolve_model(str(path)).quantization == "int8"


def test_load_awq_config(tmp_path: Path) -> None:
    config = {
        "model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
        "num_hidden_layers": 28, "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 32768,
        "sliding_window": 131072, "use_sliding_window": False, "tie_word_embeddings": False,
        "torch_dtype": "float16",
        "quantization_config": {"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm",
                                "zero_point": True},
    }
    resolved = resolve_model(str(_write(tmp_path / "qwen-awq", config)))
    assert resolved.quantization == "awq"
    assert resolved.spec.dtype == "float16"
    assert resolved.spec.sliding_window is None
    assert resolved.spec.num_params == get_model("qwen2.5-7b").num_params


def test_load_sparse_gemma3_multimodal_config(tmp_path: Path) -> None:
    # google/gemma-3-4b-it's config.json as published: most text keys are left to defaults.
    config = {
        "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
        "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                        "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                        "sliding_window": 1024},
        "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                          "model_type": "siglip_vision_model", "num_attention_heads": 16,
                          "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": False},
        "torch_dtype": "bfloat16",
    }
    spec = load_hf_config(_write(tmp_path / "gemma3", config))
    preset = get_model("gemma-3-4b")
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.vocab_size) == (8, 4, 256, 262208)
    assert spec.num_params == preset.num_params
    assert spec.rope_cache_values == preset.rope_cache_values


def test_float32_checkpoint_is_served_in_bf16() -> None:
    spec = spec_from_hf_config({**LLAMA_CONFIG, "torch_dtype": "float32"}, "fp32-llama")
    assert spec.dtype == "bfloat16"


def test_invalid_json_names_the_problem(tmp_path: Path) -> None:
    path = _write(tmp_path / "broken", '{"model_type": "llama", "hidden_size": 4096,')
    with pytest.raises(InputError, match="not valid JSON") as err:
        load_hf_config(path)
    assert str(path) in str(err.value)
    with pytest.raises(InputError, match="not valid JSON"):
        resolve_model(str(path))


def test_missing_num_hidden_layers(tmp_path: Path) -> None:
    config = {k: v for k, v in LLAMA_CONFIG.items() if k != "num_hidden_layers"}
    with pytest.raises(InputError, match="lacks required key 'num_hidden_layers'"):
        load_hf_config(_write(tmp_path / "no-layers", config))


def test_unknown_model_type(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="model_type 'mamba2' is not supported") as err:
        load_hf_config(_write(tmp_path / "mamba", {**LLAMA_CONFIG, "model_type": "mamba2"}))
    assert "llama" in str(err.value) and "deepseek_v3" in str(err.value)


def test_missing_model_type() -> None:
    config = {k: v for k, v in LLAMA_CONFIG.items() if k != "model_type"}
    with pytest.raises(InputError, match="lacks 'model_type'"):
        spec_from_hf_config(config, "x")


def test_non_integer_field_names_the_key() -> None:
    with pytest.raises(InputError, match="'hidden_size' must be an integer"):
        spec_from_hf_config({**LLAMA_CONFIG, "hidden_size": "4096x"}, "x")


def test_inconsistent_heads_is_an_input_error() -> None:
    with pytest.raises(InputError, match="num_attention_heads"):
        spec_from_hf_config({**LLAMA_CONFIG, "num_key_value_heads": 5}, "x")


def test_missing_moe_key_names_it() -> None:
    config = {k: v for k, v in get_model_config("mistralai--Mixtral-8x7B-v0.1").items() if k != "num_local_experts"}
    with pytest.raises(InputError, match="num_local_experts"):
        spec_from_hf_config(config, "x")


def test_unreadable_and_non_object_configs(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot be read"):
        load_hf_config(tmp_path / "missing" / "config.json")
    with pytest.raises(InputError, match="JSON object"):
        load_hf_config(_write(tmp_path / "list", "[1, 2]"))


def get_model_config(stem: str) -> dict:
    """A preset's stored config.json fields, without servopt's metadata."""
    folder = Path(__file__).resolve().parents[1] / "costmodels" / "data" / "models"
    stored = json.loads((folder / f"{stem}.json").read_text())
    stored.pop("_servopt")
    return stored


def test_presets_are_model_specs() -> None:
    assert all(isinstance(spec, ModelSpec) for spec in PRESETS.values())
    summary = get_model("qwen3-30b-a3b").summary()
    assert summary["moe"] == "128x top-8" and summary["params_b"] == pytest.approx(30.53, abs=0.01)


def test_invalid_moe_and_mla_sections_are_input_errors() -> None:
    mixtral = {**get_model_config("mistralai--Mixtral-8x7B-v0.1"), "num_experts_per_tok": 9}
    with pytest.raises(InputError, match="experts_per_token cannot exceed num_experts"):
        spec_from_hf_config(mixtral, "x")
    deepseek = {**get_model_config("deepseek-ai--DeepSeek-V3"), "kv_lora_rank": 0}
    with pytest.raises(InputError, match="kv_lora_rank.* at least 1"):
        spec_from_hf_config(deepseek, "x")


# --- MoE families added for the MiniMax-M2.5 and Kimi-K2.5 rows -----------------------------------

def test_minimax_m2_reads_its_config_fields() -> None:
    spec = resolve_model("MiniMaxAI/MiniMax-M2.5").spec
    assert (spec.family, spec.num_layers, spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads) == (
        "minimax_m2", 62, 3072, 48, 8)
    assert (spec.moe.num_experts, spec.moe.experts_per_token, spec.moe.expert_intermediate_size) == (256, 8, 1536)
    assert spec.moe.num_shared_experts == 0 and spec.moe.router_bias and spec.moe.num_dense_layers == 0
    assert spec.qk_norm and spec.num_mtp_layers == 0  # vLLM's main model skips the MTP modules
    assert spec.checkpoint.scheme == "fp8"


def test_minimax_m2_nvfp4_checkpoint_is_modelopt_nvfp4() -> None:
    resolved = resolve_model("nvidia/MiniMax-M2.5-NVFP4")
    assert resolved.quantization == "nvfp4" and resolved.spec.checkpoint.method == "modelopt_fp4"
    assert resolved.spec.checkpoint.kv_cache_dtype == "fp8"


def test_kimi_k25_reads_its_text_config_and_counts_moonvit() -> None:
    spec = resolve_model("moonshotai/Kimi-K2.5").spec
    assert spec.family == "deepseek_v3" and spec.mla is not None
    assert (spec.num_layers, spec.moe.num_experts, spec.moe.num_shared_experts, spec.moe.num_dense_layers) == (61, 384, 1, 1)
    assert 0.3e9 < spec.extra_params < 0.6e9  # MoonViT (the card: 400M)
    assert spec.checkpoint.scheme == "gptq" and spec.checkpoint.group_size == 32  # INT4 QAT experts


def test_kimi_k25_wrapper_without_text_config_is_refused() -> None:
    with pytest.raises(InputError, match="kimi_k25"):
        spec_from_hf_config({"model_type": "kimi_k25"}, "x")
