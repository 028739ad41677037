"""Layers a pre-quantized checkpoint leaves in the model dtype, read from its own metadata."""

from __future__ import annotations

import numpy as np
import pytest

from servopt.costmodels.architectures import get_model, resolve_model
from servopt.costmodels.checkpoints import checkpoint_format
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.memory import weight_bytes
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.roofline import StepCostModel

def test_modelopt_exclude_modules_match_as_wildcards_substrings_and_names() -> None:
    fmt = checkpoint_format({}, {"producer": {"name": "modelopt"}, "quantization": {
        "quant_algo": "NVFP4", "exclude_modules": ["lm_head", "model.layers.3.self_attn*", "mlp.shared_experts"]}})
    assert fmt.ignore_match == "modelopt"
    assert fmt.keeps_unquantized("model.layers.3.self_attn.o_proj")
    assert not fmt.keeps_unquantized("model.layers.4.self_attn.o_proj")
    assert fmt.keeps_unquantized("model.layers.9.mlp.shared_experts.down_proj")  # a listed name inside it


def test_compressed_tensors_ignore_reads_re_patterns_from_the_start() -> None:
    fmt = checkpoint_format({"quant_method": "compressed-tensors", "ignore": ["lm_head", "re:.*self_attn.*"],
                             "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                                 "group_size": 32}}}})
    assert fmt.scheme == "gptq" and fmt.ignore_match == "compressed-tensors"
    assert fmt.keeps_unquantized("model.layers.0.self_attn.q_a_proj")
    assert not fmt.keeps_unquantized("model.layers.0.mlp.experts.3.gate_proj")
    # A plain name is matched whole, never as a part of another.
    assert fmt.keeps_unquantized("lm_head") and not fmt.keeps_unquantized("model.lm_head_extra")


def test_fp8_modules_to_not_convert_are_exact_names() -> None:
    fmt = checkpoint_format({"quant_method": "fp8", "weight_block_size": [128, 128],
                             "modules_to_not_convert": ["gate", "lm_head"]})
    assert fmt.keeps_unquantized("gate")
    assert not fmt.keeps_unquantized("model.layers.0.block_sparse_moe.gate")


def test_nvidia_nvfp4_releases_keep_attention_in_bf16() -> None:
    spec = resolve_model("nvidia/MiniMax-M2.5-NVFP4").spec
    assert spec.unquantized_layers("nvfp4") == {"qkv_proj": spec.num_layers, "o_proj": spec.num_layers}
    # The official FP8 release quantizes its attention: nothing stays 16-bit.
    assert resolve_model("MiniMaxAI/MiniMax-M2.5").spec.unquantized_layers("fp8") == {}


def test_kimi_k25_int4_keeps_attention_shared_experts_and_dense_mlp_unquantized() -> None:
    spec = resolve_model("moonshotai/Kimi-K2.5").spec
    kept = spec.unquantized_layers(spec.native_quantization)
    assert kept["o_proj"] == spec.num_layers and kept["kv_a_proj"] == spec.num_layers
    assert kept["shared_gate_up"] == spec.num_moe_layers and kept["gate_up_proj"] == spec.num_dense_mlp_layers


def test_mxfp4_quantizes_only_the_experts() -> None:
    spec = get_model("openai/gpt-oss-120b")
    assert spec.unquantized_layers("mxfp4") == {"qkv_proj": spec.num_layers, "o_proj": spec.num_layers}


def test_serving_a_checkpoint_in_another_scheme_quantizes_every_linear_layer() -> None:
    spec = resolve_model("nvidia/MiniMax-M2.5-NVFP4").spec
    assert spec.unquantized_layers("fp8") == {}


def test_bf16_attention_adds_its_bytes_to_the_weights() -> None:
    spec = resolve_model("nvidia/MiniMax-M2.5-NVFP4").spec
    all_fp4 = spec.model_copy(update={"checkpoint": spec.checkpoint.model_copy(update={"ignore": ()})})
    h = spec.hidden_size
    attention = spec.num_layers * (h * (spec.q_dim + 2 * spec.kv_dim) + spec.attn_out_dim * h)
    extra = weight_bytes(spec, "nvfp4").total_bytes - weight_bytes(all_fp4, "nvfp4").total_bytes
    assert extra == pytest.approx(attention * (2.0 - spec.weight_scheme("nvfp4").weight_bytes_per_param), rel=1e-9)


def test_bf16_attention_projections_cost_more_than_fp4_ones_in_prefill() -> None:
    spec = resolve_model("nvidia/MiniMax-M2.5-NVFP4").spec
    all_fp4 = spec.model_copy(update={"checkpoint": spec.checkpoint.model_copy(update={"ignore": ()})})
    gpu = get_gpu("b200")
    profile = PerformanceProfile.spec_default(gpu)
    tokens = np.array([8192.0])
    kept, fp4 = (StepCostModel(m, gpu, profile, quantization="nvfp4", tp=2)._token_ops(tokens) for m in (spec, all_fp4))
    assert kept["qkv_proj"].time_s[0] > fp4["qkv_proj"].time_s[0]
    assert kept["qkv_proj"].bytes_moved[0] > fp4["qkv_proj"].bytes_moved[0]
    assert kept["moe_experts"].time_s[0] == fp4["moe_experts"].time_s[0]
