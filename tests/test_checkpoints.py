"""Model sources (local, HF cache, Hub, catalog), checkpoint formats and what kv_cache_dtype auto means."""

import json
from pathlib import Path

import pytest

from servopt.costmodels.architectures import resolve_model
from servopt.costmodels.checkpoints import (
    catalog_entry,
    checkpoint_catalog,
    checkpoint_format,
    checkpoints_of,
)
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.memory import kv_bytes_per_token, plan_memory, weight_bytes
from servopt.costmodels.model_sources import check_model_id

LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
            "vocab_size": 128256, "max_position_embeddings": 131072, "tie_word_embeddings": False,
            "torch_dtype": "bfloat16"}


def _group(bits, kind, activations, **weights):
    return {"targets": ["Linear"], "weights": {"num_bits": bits, "type": kind, "symmetric": True, **weights},
            "input_activations": {"num_bits": bits, "type": kind, "dynamic": True} if activations else None}


def compressed(bits, kind, activations, kv=None, **weights):
    return {"quant_method": "compressed-tensors", "format": "pack-quantized" if bits == 4 else "naive-quantized",
            "config_groups": {"group_0": _group(bits, kind, activations, **weights)}, "kv_cache_scheme": kv}


FP8_KV = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True}


@pytest.mark.parametrize(("quant", "hf_quant", "scheme", "method", "kv", "bytes_per_param"), [
    (compressed(8, "int", True), None, "int8", "compressed-tensors", None, 1.0),
    (compressed(8, "float", True), None, "fp8", "compressed-tensors", None, 1.0),
    (compressed(8, "float", True, kv=FP8_KV), None, "fp8", "compressed-tensors", "fp8", 1.0),
    (compressed(4, "int", False, strategy="group", group_size=128), None, "gptq", "compressed-tensors", None,
     0.5 + 2 / 128),
    (compressed(8, "int", False, strategy="channel"), None, "w8a16", "compressed-tensors", None, 1.0),
    (compressed(4, "float", True, strategy="tensor_group", group_size=16), None, "nvfp4", "compressed-tensors", None,
     0.5 + 1 / 16),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}, None, "awq",
     "auto_awq", None, 0.5 + 2.5 / 128),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}, None, "gptq", "auto_gptq", None,
     0.5 + 2 / 128),
    ({"quant_method": "gptq", "bits": 8, "group_size": 128, "sym": True}, None, "w8a16", "auto_gptq", None,
     1 + 2 / 128),
    ({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, None, "fp8", "fp8",
     None, 1.0 + 4 / 128**2),
    ({"quant_method": "fp8", "activation_scheme": "static"}, None, "fp8", "fp8", None, 1.0),
    ({"quant_method": "mxfp4"}, None, "mxfp4", "mxfp4", None, 0.5 + 1 / 32),
    (None, {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}},
     "fp8", "modelopt", "fp8", 1.0),
    (None, {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16,
                                                               "kv_cache_quant_algo": "FP8"}},
     "nvfp4", "modelopt_fp4", "fp8", 0.5 + 1 / 16),
    ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": FP8_KV}, None, "fp8", "modelopt", "fp8", 1.0),
])
def test_checkpoint_formats(quant, hf_quant, scheme, method, kv, bytes_per_param):
    fmt = checkpoint_format(quant, hf_quant)
    assert (fmt.scheme, fmt.method, fmt.kv_cache_dtype) == (scheme, method, kv)
    assert fmt.weight_bytes_per_param == pytest.approx(bytes_per_param)


def test_unknown_quantization_is_an_error_not_16_bit_weights():
    with pytest.raises(InputError, match="quant_method 'bitsandbytes' is not modelled"):
        checkpoint_format({"quant_method": "bitsandbytes"})
    assert checkpoint_format(None) is None


def test_kv_cache_auto_follows_the_checkpoint():
    """vLLM gives a checkpoint with FP8 KV scales an fp8 cache under --kv-cache-dtype auto."""
    base = resolve_model("meta-llama/Llama-3.1-70B-Instruct").spec
    modelopt = resolve_model("nvidia/Llama-3.1-70B-Instruct-FP8").spec
    assert modelopt.kv_cache_dtype("auto") == "fp8" and base.kv_cache_dtype("auto") == "auto"
    assert kv_bytes_per_token(modelopt, "auto") == kv_bytes_per_token(base, "auto") / 2
    h100 = get_gpu("h100")
    with_scales = plan_memory(modelopt, h100, tp=2, kv_cache_dtype="auto")
    assert with_scales.quantization == "fp8"
    assert with_scales.kv_capacity_tokens > 1.9 * plan_memory(base, h100, tp=2, quantization="fp8").kv_capacity_tokens


def test_checkpoint_weight_bytes_follow_its_format():
    """A per-channel W4A16 checkpoint is smaller than a group-128 one; both far below bf16."""
    grouped = resolve_model("RedHatAI/Meta-Llama-3.1-70B-Instruct-quantized.w4a16").spec  # per channel (card)
    awq = resolve_model("hugging-quants/Meta-Llama-3.1-70B-Instruct-AWQ-INT4").spec
    bf16 = weight_bytes(resolve_model("meta-llama/Llama-3.1-70B-Instruct").spec, "bf16").total_bytes
    assert weight_bytes(grouped, "gptq").total_bytes < weight_bytes(awq, "awq").total_bytes < 0.3 * bf16


def test_catalog_entries_are_valid_and_distinct():
    ids = [c.id.lower() for c in checkpoint_catalog()]
    assert len(ids) == len(set(ids)) >= 40
    for entry in checkpoint_catalog():
        assert entry.format.method and entry.bases
    llama = checkpoints_of("meta-llama/Llama-3.1-8B-Instruct")
    assert {"fp8", "int8", "gptq", "awq"} <= set(llama)
    assert llama["int8"].recovery_pct == pytest.approx(100.3) and llama["int8"].accuracy_drop_pct == 0.0
    assert checkpoints_of("meta-llama/Llama-3.1-8B") == {}  # the base model is not the instruct model


@pytest.mark.parametrize(("quant", "granularity", "block", "kernel"), [
    ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "block", (128, 128), "fp8_block"),
    ({"quant_method": "fp8", "activation_scheme": "static"}, "tensor", None, "fp8"),
    (compressed(8, "float", True, strategy="channel"), "channel", None, "fp8"),
    (compressed(8, "float", True, strategy="tensor"), "tensor", None, "fp8"),
    (compressed(8, "float", True, strategy="block", block_structure=[128, 128]), "block", (128, 128), "fp8_block"),
])
def test_fp8_layouts_are_told_apart_and_run_their_own_moe_kernel(quant, granularity, block, kernel):
    """Block FP8 (Qwen's, DeepSeek's) is neither per-tensor FP8 nor compressed-tensors channel FP8."""
    from servopt.costmodels.moe import moe_kernel
    from servopt.costmodels.quantization import get_scheme

    fmt = checkpoint_format(quant)
    assert (fmt.granularity, fmt.block_size) == (granularity, block)
    assert moe_kernel(get_scheme("fp8"), "fp8", fmt, get_gpu("h100")) == kernel
    assert ("block-scaled" in fmt.kernels) == (block is not None and fmt.method == "fp8")


def test_gpt_oss_mxfp4_loads_with_its_own_vllm_method():
    """vLLM 0.33 claims mxfp4 checkpoints of model_type gpt_oss as gpt_oss_mxfp4 (mxfp4.py@v0.33.0:129-146)."""
    assert checkpoint_format({"quant_method": "mxfp4"}, model_type="gpt_oss").method == "gpt_oss_mxfp4"
    assert resolve_model("openai/gpt-oss-20b").spec.checkpoint.method == "gpt_oss_mxfp4"


def test_no_format_is_read_from_a_name():
    """An uncatalogued id named like a quantized checkpoint is refused, not served as its name suggests."""
    with pytest.raises(InputError, match="looks|suggests a derivative of meta-llama/Llama-3.1-8B"):
        resolve_model("acme/Meta-Llama-3.1-8B-Instruct-AWQ")


def test_catalog_formats_from_shipped_configs_match_those_configs():
    """A checkpoint whose config the model catalog ships is read from that config, and keeps its base's shape."""
    from servopt.costmodels.architectures import preset_models

    from_config = [c for c in checkpoint_catalog() if c.from_config]
    assert len(from_config) >= 8
    for entry in from_config:
        spec = preset_models()[entry.id]
        # The modules a checkpoint leaves unquantized are read from the shipped config, not the catalog's summary.
        scheme_only = {"source": "", "ignore": (), "ignore_match": "exact"}
        assert entry.format.model_copy(update=scheme_only) == spec.checkpoint.model_copy(update=scheme_only)
        base = resolve_model(entry.bases[0]).spec
        assert (spec.num_layers, spec.hidden_size, spec.max_context, spec.vocab_size) == (
            base.num_layers, base.hidden_size, base.max_context, base.vocab_size)


def test_renamed_checkpoints_resolve_under_their_first_names():
    entry = catalog_entry("neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8-dynamic")
    assert entry is not None and entry.id == "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic"


# --- where configs come from -------------------------------------------------------------------

def _cache_repo(cache: Path, repo_id: str, config: dict, quant: dict | None = None) -> Path:
    """A Hugging Face hub cache entry as huggingface_hub lays it out (refs/main -> snapshot)."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(config))
    if quant is not None:
        (snapshot / "hf_quant_config.json").write_text(json.dumps(quant))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abc")
    return snapshot


def test_any_cached_hub_id_resolves_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = {**LLAMA_8B, "quantization_config": compressed(8, "float", True, kv=FP8_KV)}
    _cache_repo(tmp_path, "acme/private-llama-fp8kv", config)
    resolved = resolve_model("acme/private-llama-fp8kv")
    assert resolved.origin.startswith("Hugging Face cache") and resolved.quantization == "fp8"
    assert "revision 0123abc" in resolved.origin and resolved.spec.config_source == resolved.origin
    assert resolved.spec.kv_cache_dtype("auto") == "fp8"
    _cache_repo(tmp_path, "acme/modelopt-nvfp4", LLAMA_8B,
                {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}})
    assert resolve_model("acme/modelopt-nvfp4").spec.checkpoint.method == "modelopt_fp4"


def test_cache_beats_the_catalog_and_names(tmp_path, monkeypatch):
    """A cached config is the real one: it wins over a name that merely looks like a catalog model."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    _cache_repo(tmp_path, "acme/Llama-3.1-8B-Instruct-AWQ", {**LLAMA_8B, "num_hidden_layers": 30})
    resolved = resolve_model("acme/Llama-3.1-8B-Instruct-AWQ")
    assert resolved.spec.num_layers == 30 and resolved.quantization is None


def test_unknown_offline_id_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(InputError) as err:
        resolve_model("acme/never-downloaded")
    message = str(err.value)
    assert "\n" not in message and "huggingface-cli download acme/never-downloaded config.json" in message


def test_the_cli_exits_2_for_an_unknown_model(tmp_path, monkeypatch, capsys):
    from servopt.optimizer.cli import main

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert main(["plan", "--model", "acme/never-downloaded", "--gpu", "h100"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'acme/never-downloaded'" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("model_id", ["ibm-granite/granite-3.3-8b-instruct", "mistralai/Mistral-Small-3.1-24B-Instruct-2503",
                                      "Qwen/Qwen2.5-3B-Instruct", "meta-llama/Llama-3.2-3B-Instruct", "moonshotai/Kimi-Dev-72B",
                                      "Qwen/Qwen2.5-VL-7B-Instruct", "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
                                      "microsoft/Phi-4-mini-instruct", "openai/gpt-oss-20b"])
def test_issue_models_resolve_offline(model_id, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert resolve_model(model_id).spec.num_params > 1e9


@pytest.mark.parametrize("bad", ["x$(touch f)/Llama-3.1-8B-Instruct", "org/na me", "org/model\nrm", "org/-x",
                                 "org/x--y", "a/b/c", "`id`", "org/x'y", ""])
def test_model_ids_are_checked_whole(bad):
    with pytest.raises(InputError):
        check_model_id(bad, "model")


def test_existing_local_paths_are_accepted(tmp_path):
    folder = tmp_path / "weird name (v2)"
    folder.mkdir()
    assert check_model_id(str(folder), "model") == str(folder)


def test_an_unreachable_hub_fails_at_once_with_one_line(tmp_path, monkeypatch):
    """With huggingface_hub installed and no network, the Hub is probed once instead of retried."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HTTPS_PROXY", raising=False)
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # loopback, nothing listens: refused at once
    with pytest.raises(InputError) as err:
        resolve_model("acme/never-downloaded")
    message = str(err.value)
    assert "the Hugging Face Hub cannot be reached (127.0.0.1:9:" in message and "HF_HUB_OFFLINE=1" in message
    assert "\n" not in message


def test_a_hub_that_does_not_answer_is_given_up_after_the_probe_timeout(monkeypatch):
    import threading

    from servopt.costmodels import model_sources

    release = threading.Event()

    def hang(*args, **kwargs):  # name resolution that never answers, until the test ends
        release.wait(30)
        raise OSError("gave up")

    monkeypatch.setattr(model_sources.socket, "create_connection", hang)
    try:
        assert "did not answer within 0.2 s" in model_sources.hub_unreachable(timeout_s=0.2)
    finally:
        release.set()


def test_a_card_format_stands_for_metadata_that_reads_back_as_itself():
    """The quantization metadata a card's format implies (what export --check hands vLLM) is read
    back by the same reader as the same scheme, method, layout and KV cache."""
    for entry in checkpoint_catalog():
        fmt = entry.format
        quant, hf_quant = fmt.metadata()
        back = checkpoint_format(quant, hf_quant, model_type="gpt_oss" if fmt.method == "gpt_oss_mxfp4" else None)
        keys = ("scheme", "method", "weight_bits", "granularity", "group_size", "block_size", "kv_cache_dtype")
        assert {k: getattr(back, k) for k in keys} == {k: getattr(fmt, k) for k in keys}, entry.id
