"""Issue 20: `servopt plan` on public ids, offline, reads each one as its config file says.

For every id: the context vLLM accepts (the config's own max_position_embeddings: none of these
configs has a RoPE type whose factor vLLM multiplies in), the weight bytes, the scheme and the
--quantization vLLM 0.33 picks for the checkpoint's metadata, and the config the plan says it used.
The files read are the shipped ones (costmodels/data/models, each from a public repository@commit
or the Hub page it names); a checkpoint whose format is its card's (AWQ, GPTQ, compressed-tensors
re-uploads: no public copy of their config.json was found) is served with its base's config and
says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servopt.optimizer.cli import main

MODELS = Path(__file__).resolve().parents[1] / "costmodels" / "data" / "models"

# vLLM 0.33's method for a checkpoint's quantization metadata (ModelConfig._verify_quantization,
# vllm/config/model.py@v0.33.0 lines 1383-1462, with the overrides of auto_awq.py, auto_gptq.py,
# modelopt.py, mxfp4.py): what the config file says, mapped as vLLM maps it.
def vllm_method(config: dict, hf_quant: dict | None) -> str | None:
    if hf_quant:
        return {"FP8": "modelopt", "NVFP4": "modelopt_fp4"}[hf_quant["quantization"]["quant_algo"]]
    quant = config.get("quantization_config")
    if not quant:
        return None
    method = quant["quant_method"]
    if method == "mxfp4" and config["model_type"] == "gpt_oss":
        return "gpt_oss_mxfp4"
    return {"awq": "auto_awq", "gptq": "auto_gptq"}.get(method, method)


# (id, tp, the config file read, context, weight bytes, scheme, what the source begins with)
SHIPPED = "shipped catalog entry"
DERIVED = "derived from"
PLANS = [
    # base models, dense and MoE
    ("meta-llama/Llama-3.1-8B", 1, "meta-llama--Llama-3.1-8B", 131072, 16094076928, "bf16", SHIPPED),
    ("Qwen/Qwen3-30B-A3B", 1, "Qwen--Qwen3-30B-A3B", 40960, 61074731008, "bf16", SHIPPED),
    # instruct releases: their own configs, or one the catalog states they share
    ("meta-llama/Llama-3.3-70B-Instruct", 2, "meta-llama--Llama-3.3-70B-Instruct", 131072, 141174521856, "bf16",
     SHIPPED),
    ("Qwen/Qwen2.5-7B-Instruct", 1, "Qwen--Qwen2.5-7B-Instruct", 32768, 15239621632, "bf16", SHIPPED),
    ("Qwen/Qwen3-Coder-480B-A35B-Instruct", 8, "Qwen--Qwen3-Coder-480B-A35B-Instruct", 262144, 960846621696, "bf16",
     SHIPPED),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 2, "mistralai--Mixtral-8x7B-v0.1", 32768, 93422362624, "bf16", DERIVED),
    # block FP8 (quant_method fp8 with weight_block_size), dense and MoE
    ("Qwen/Qwen3-32B-FP8", 1, "Qwen--Qwen3-32B-FP8", 40960, 34336712708, "fp8", SHIPPED),
    ("Qwen/Qwen3-30B-A3B-FP8", 1, "Qwen--Qwen3-30B-A3B-FP8", 40960, 31172439043, "fp8", SHIPPED),
    ("deepseek-ai/DeepSeek-V3", 8, "deepseek-ai--DeepSeek-V3", 163840, 673211803218.125, "fp8", SHIPPED),
    ("moonshotai/Kimi-K2-Instruct", 8, "moonshotai--Kimi-K2-Instruct", 131072, 1029142156372.125, "fp8", SHIPPED),
    # per-tensor / per-channel FP8: ModelOpt (its config), AutoFP8 and llm-compressor (their cards)
    ("nvidia/Llama-3.1-70B-Instruct-FP8", 1, "nvidia--Llama-3.1-70B-Instruct-FP8", 131072, 72689926144, "fp8",
     SHIPPED),
    ("RedHatAI/Mixtral-8x7B-Instruct-v0.1-FP8", 1, "mistralai--Mixtral-8x7B-v0.1", 32768, 46973591552, "fp8", DERIVED),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic", 1, "meta-llama--Llama-3.1-8B", 131072, 9114755072, "fp8",
     DERIVED),
    # AWQ and GPTQ (their cards' formats on their bases' configs)
    ("hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4", 1, "meta-llama--Llama-3.1-8B", 131072, 5761409024, "awq",
     DERIVED),
    ("Qwen/Qwen2.5-7B-Instruct-AWQ", 1, "Qwen--Qwen2.5-7B-Instruct", 32768, 5578944984, "awq", DERIVED),
    ("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", 1, "Qwen--Qwen2.5-72B-Instruct", 32768, 41197679104, "gptq", DERIVED),
    ("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16", 1, "meta-llama--Llama-3.1-8B", 131072, 5734146048, "gptq",
     DERIVED),
    # NVFP4 (ModelOpt hf_quant_config.json), dense and MoE
    ("nvidia/Qwen3-32B-NVFP4", 1, "nvidia--Qwen3-32B-NVFP4", 40960, 20676627456, "nvfp4", SHIPPED),
    ("nvidia/Qwen3-30B-A3B-NVFP4", 1, "nvidia--Qwen3-30B-A3B-NVFP4", 40960, 18079689472, "nvfp4", SHIPPED),
    # Its hf_quant_config.json excludes every self_attn module: MLA's projections stay bf16 (11.4B params).
    ("nvidia/DeepSeek-V3-0324-NVFP4", 4, "nvidia--DeepSeek-V3-0324-NVFP4", 163840, 396608510752, "nvfp4", SHIPPED),
    # mxfp4 (gpt-oss)
    ("openai/gpt-oss-20b", 1, "openai--gpt-oss-20b", 131072, 13768296064, "mxfp4", SHIPPED),
    ("openai/gpt-oss-120b", 1, "openai--gpt-oss-120b", 131072, 65207117440, "mxfp4", SHIPPED),
]
# Bytes per parameter a whole checkpoint of the scheme can take: its quantized weights at the
# format's width, embeddings (and the experts-only formats' attention) at 16 bits.
BYTES_PER_PARAM = {"bf16": (1.99, 2.06), "fp8": (1.0, 1.15), "awq": (0.5, 0.8), "gptq": (0.5, 0.8),
                   "nvfp4": (0.56, 0.8), "mxfp4": (0.5, 0.8)}
# Formats read from the checkpoints' cards (no public copy of their config.json found): id -> vLLM method.
CARD_METHODS = {"RedHatAI/Mixtral-8x7B-Instruct-v0.1-FP8": "fp8",
                "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic": "compressed-tensors",
                "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4": "auto_awq", "Qwen/Qwen2.5-7B-Instruct-AWQ": "auto_awq",
                "Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4": "auto_gptq",
                "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16": "compressed-tensors"}


def plan(model_id: str, tp: int, capsys) -> dict:
    assert main(["plan", "--model", model_id, "--gpu", "b200", "--tp", str(tp), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_twenty_public_ids_cover_every_format_dense_and_moe():
    assert len(PLANS) >= 20
    assert {p[5] for p in PLANS} == {"bf16", "fp8", "awq", "gptq", "nvfp4", "mxfp4"}


@pytest.mark.parametrize(("model_id", "tp", "file", "context", "weights_bytes", "scheme", "source"), PLANS,
                         ids=[p[0] for p in PLANS])
def test_plan_reads_the_checkpoint_as_its_config_says(model_id, tp, file, context, weights_bytes, scheme, source,
                                                      capsys):
    stored = json.loads((MODELS / f"{file}.json").read_text())
    meta = stored.pop("_servopt")
    result = plan(model_id, tp, capsys)
    # Context: the config's own field (vLLM's limit; servopt exports nothing longer).
    assert result["max_context"] == stored["max_position_embeddings"] == context
    # Format and --quantization: the config's quantization metadata as vLLM 0.33 maps it.
    assert result["quantization"] == scheme
    if model_id in CARD_METHODS:
        assert vllm_method(stored, meta.get("hf_quant_config")) is None  # the base config: 16-bit
        assert result["vllm_quantization"] == CARD_METHODS[model_id] and "format from its card" in result["config_source"]
    else:
        assert result["vllm_quantization"] == vllm_method(stored, meta.get("hf_quant_config"))
    # Weight bytes: pinned, and physical for the format against the card's published size.
    assert result["weights_bytes"] == pytest.approx(weights_bytes, rel=1e-9)
    low, high = BYTES_PER_PARAM[scheme]
    assert low <= result["weights_bytes"] / (meta["published_params_b"] * 1e9) <= high
    # Source: the shipped entry (with where its file came from), or the statement it derives by.
    assert result["config_source"].startswith(source)
    assert meta["source"] in result["config_source"]
    if source == SHIPPED:
        assert result["config_source"].startswith(f"{SHIPPED} {model_id} (")


def test_the_plan_prints_the_config_it_used(capsys):
    assert main(["plan", "--model", "Qwen/Qwen3-30B-A3B-FP8", "--gpu", "h100"]) == 0
    text = capsys.readouterr().out
    assert "config                  shipped catalog entry Qwen/Qwen3-30B-A3B-FP8 (github:ai-dynamo/aiconfigurator@" in text
    assert "128x128 blocks; --quantization fp8; kernels: Fp8LinearMethod block-scaled GEMM" in text


def test_block_fp8_moe_steps_faster_than_per_tensor_fp8_on_hopper():
    """The block-FP8 experts run the measured fp8_block fused-MoE kernel, not the per-tensor one."""
    from servopt.calibration.registry import load_profile
    from servopt.costmodels.architectures import get_model
    from servopt.costmodels.hardware import get_gpu
    from servopt.costmodels.roofline import Batch, StepCostModel

    h100 = get_gpu("h100")
    profile = load_profile(h100, None)
    block = get_model("Qwen/Qwen3-30B-A3B-FP8")
    tensor = block.model_copy(update={"checkpoint": block.checkpoint.model_copy(
        update={"block_size": None, "granularity": "tensor"})})
    batch = Batch(decode_context=[2048] * 200)
    steps = [StepCostModel(spec, h100, profile, quantization="fp8").step(batch).time_s for spec in (block, tensor)]
    assert steps[0] < steps[1]
