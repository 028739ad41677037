"""Fused-MoE kernels: the fit recovers a known efficiency, the step model uses the profile's family,
and the kernel table refuses malformed MoE rows with one line naming the column."""

import io

import numpy as np
import pandas as pd
import pytest

from servopt.calibration.fit import MOE_WEIGHT_BYTES, MoeFit, fit_profile, moe_row_shapes
from servopt.calibration.registry import load_profile
from servopt.calibration.tables import read_kernel_table
from servopt.costmodels.architectures import get_model
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import MoeEfficiency, PerformanceProfile
from servopt.costmodels.roofline import Batch, StepCostModel

H100 = get_gpu("h100")
TRUTH = MoeEfficiency(
    kernel="synthetic", math_dtype="bf16", log2_tokens_per_expert_knots=[0, 2, 4, 6, 8, 10, 12, 14],
    compute_efficiency=[0.05, 0.1, 0.3, 0.6, 0.7, 0.72, 0.74, 0.75], memory_efficiency=0.8, overhead_s=3e-5,
    log2_inter_knots=[7, 9, 11, 13], inter_compute_factor=[0.8, 1.0, 1.0, 1.0], inter_memory_factor=[1.0, 1.0, 1.0, 1.0],
    smoothness=3.0,
)
SHAPES = [(2048, 768, 128, 8), (4096, 1536, 128, 8), (7168, 2048, 256, 8), (2880, 2880, 128, 4), (6144, 2560, 160, 8),
          (4096, 14336, 8, 2)]
HEADER = "op,system,framework,kernel_source,dtype,num_tokens,hidden_size,inter_size,topk,num_experts,moe_tp_size,moe_ep_size,distribution,latency_ms\n"


def synthetic_moe_table(truth: MoeEfficiency) -> pd.DataFrame:
    rows = [{"op": "moe", "system": "h100_sxm", "framework": "vllm", "kernel_source": "synthetic", "dtype": "bf16",
             "num_tokens": t, "hidden_size": h, "inter_size": i, "topk": k, "num_experts": e, "moe_tp_size": tp,
             "moe_ep_size": 1, "distribution": "balanced"}
            for h, i, e, k in SHAPES for tp in (1, 8) for t in 2 ** np.arange(0, 15, 2)]
    table = read_kernel_table(io.StringIO(pd.DataFrame(rows).assign(latency_ms=1.0).to_csv(index=False)), name="synthetic")
    shape = moe_row_shapes(table)
    profile = PerformanceProfile.spec_default(H100).model_copy(update={"moe": {"bf16": truth}})
    latency = profile.moe_time_s(H100, "bf16", shape["pairs"], shape["touched"], shape["hidden"], shape["inter"],
                                 MOE_WEIGHT_BYTES["bf16"]) * 1e3
    return table.assign(latency_ms=latency)


def test_moe_fit_recovers_a_known_efficiency_on_held_out_shapes():
    table = synthetic_moe_table(TRUTH)
    outcome = fit_profile(table, H100, holdout_fraction=0.34)
    report = outcome.report.set_index(["family", "split"])
    assert report.loc[("moe_bf16", "held_out"), "median_abs_pct"] < 2.0
    fitted = outcome.profile.moe["bf16"]
    assert fitted.kernel == "synthetic" and fitted.math_dtype == "bf16"
    assert fitted.overhead_s == pytest.approx(TRUTH.overhead_s, rel=0.15)
    assert fitted.memory_eff(1024) == pytest.approx(0.8, rel=0.1)
    # Compute-bound end: many tokens per expert at full width.
    assert float(fitted.compute_eff(4096, 2048)) == pytest.approx(float(TRUTH.compute_eff(4096, 2048)), rel=0.1)
    assert "moe" not in outcome.profile.notes  # measured, not taken from the base profile


def test_moe_fit_keeps_the_most_measured_kernel_and_balanced_rows():
    table = synthetic_moe_table(TRUTH)
    other = table.head(5).assign(kernel_source="other")
    skewed = table.head(7).assign(distribution="power_law_1.2")
    rows = MoeFit("bf16").select(pd.concat([table, other, skewed]))
    assert set(rows["kernel_source"]) == {"synthetic"} and set(rows["distribution"]) == {"balanced"}


def test_step_model_times_experts_with_the_profiles_moe_family():
    model = get_model("gpt-oss-120b")
    base = load_profile(H100)
    slow = TRUTH.model_copy(update={"overhead_s": 1e-3})
    times = {}
    for name, entry in (("fast", TRUTH), ("slow", slow)):
        profile = base.model_copy(update={"moe": {"mxfp4": entry}})
        cost = StepCostModel(model, H100, profile, quantization="mxfp4", tp=8)
        times[name] = cost.step(Batch(decode_context=[1000] * 4)).operators_s["moe_experts"]
    # 36 MoE layers, each paying the kernel's floor once.
    assert times["slow"] - times["fast"] == pytest.approx(model.num_moe_layers * (1e-3 - 3e-5), rel=1e-6)
    # Without an mxfp4 entry the nearest measured format (int4, then bf16) stands in.
    profile = base.model_copy(update={"moe": {"bf16": slow}})
    cost = StepCostModel(model, H100, profile, quantization="mxfp4", tp=8)
    assert cost.step(Batch(decode_context=[1000] * 4)).operators_s["moe_experts"] == pytest.approx(times["slow"], rel=0.2)


def test_mxfp4_on_blackwell_runs_bf16_math_on_padded_widths():
    """vLLM's default mxfp4 MoE on Blackwell is FlashInfer's MXFP4 x BF16 kernel, weights padded to 256."""
    b200 = get_gpu("b200")
    entry = TRUTH.model_copy(update={"math_dtype": "bf16", "inter_alignment": 256, "hidden_alignment": 256})
    profile = PerformanceProfile.spec_default(b200).model_copy(update={"moe": {"mxfp4": entry}})
    compute_s, _ = profile.moe_parts_s(b200, entry, 8192 * 4, 128, 2880, 360, 0.53)
    pairs_per_expert = 8192 * 4 / 128
    expected = 6 * 8192 * 4 * 3072 * 512 / (b200.peak_flops("bf16") * float(entry.compute_eff(pairs_per_expert, 512)))
    assert float(compute_s) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("row, column", [
    ("moe,h100_sxm,vllm,k,bf16,8,abc,768,8,128,1,1,balanced,0.05", "hidden_size"),
    ("moe,h100_sxm,vllm,k,bf16,8,2048,768,8,128,1,1,balanced,-1", "latency_ms"),
    ("moe,h100_sxm,vllm,k,bf16,8.5,2048,768,8,128,1,1,balanced,0.05", "num_tokens"),
    ("moe,h100_sxm,vllm,k,bf16,8,2048,768,,128,1,1,balanced,0.05", "topk"),
    ("moe,h100_sxm,vllm,k,bf16,8,2048,768,200,128,1,1,balanced,0.05", "topk"),
    ("moe,h100_sxm,vllm,k,bf16,8,2048,768,8,128,1,3,balanced,0.05", "moe_ep_size"),
    ("moe,h100_sxm,vllm,k,int3,8,2048,768,8,128,1,1,balanced,0.05", "dtype"),
])
def test_kernel_table_refuses_malformed_moe_rows(row, column):
    good = "moe,h100_sxm,vllm,k,bf16,8,2048,768,8,128,1,1,balanced,0.05\n"
    with pytest.raises(InputError) as err:
        read_kernel_table(io.StringIO(HEADER + good + row + "\n"), name="moe.csv")
    message = str(err.value)
    assert "\n" not in message and f"'{column}'" in message and "moe.csv" in message and "line 3" in message


def test_kernel_table_reads_aiconfigurator_moe_rows_and_keeps_block_fp8_apart():
    text = ("framework,version,device,op_name,kernel_source,moe_dtype,num_tokens,hidden_size,inter_size,topk,num_experts,"
            "moe_tp_size,moe_ep_size,distribution,latency\n"
            "VLLM,0.24.0,NVIDIA H100 80GB HBM3,moe,triton,fp8_block,16,7168,2048,8,256,1,1,balanced,0.2\n"
            "VLLM,0.24.0,NVIDIA H100 80GB HBM3,moe,triton,w4a16_mxfp4,16,2880,2880,4,128,8,1,balanced,0.06\n")
    table = read_kernel_table(io.StringIO(text), name="aic")
    assert table["op"].tolist() == ["moe", "moe"] and table["dtype"].tolist() == ["fp8_block", "mxfp4"]
    assert table["gpu"].tolist() == ["h100", "h100"] and table["latency_ms"].tolist() == [0.2, 0.06]


@pytest.mark.parametrize(("gpu", "ep", "version", "kernel"), [
    ("h200", 1, "0.18.0", "fp8_block_triton"),  # from 0.17: Triton without expert parallelism
    ("h200", 8, "0.18.0", "fp8_block"),  # FlashInfer's CUTLASS kernel with it
    ("h100", 1, "0.16.0", "fp8_block"),  # 0.15-0.16: FlashInfer first for every layout
    ("h100", 1, "0.8.3", "fp8_block_triton"),  # before: FlashInfer only on request
    ("b200", 1, "0.18.0", "fp8_block"),  # the rule is Hopper's
])
def test_hopper_block_fp8_experts_run_the_kernel_vllm_picks_for_the_layout(gpu, ep, version, kernel):
    from servopt.costmodels.checkpoints import checkpoint_format
    from servopt.costmodels.moe import moe_kernel
    from servopt.costmodels.quantization import get_scheme
    from servopt.costmodels.engines.vllm import parse_vllm_version

    block = checkpoint_format({"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert moe_kernel(get_scheme("fp8"), "fp8", block, get_gpu(gpu), ep, parse_vllm_version(version)) == kernel


def test_block_fp8_triton_rows_fit_their_own_profile_entry():
    table = synthetic_moe_table(TRUTH).assign(dtype="fp8_block")
    triton = table.assign(kernel_source="vllm_fp8moe_triton_tritonexperts", latency_ms=table["latency_ms"] * 1.5)
    flashinfer = pd.concat([table, table.head(40)]).assign(kernel_source="vllm_fp8moe_flashinfer_cutlass_flashinferexperts")
    fitted = fit_profile(pd.concat([flashinfer, triton]), H100, holdout_fraction=0.0).profile.moe
    assert fitted["fp8_block"].kernel.endswith("flashinfer_cutlass_flashinferexperts")
    assert fitted["fp8_block_triton"].kernel == "vllm_fp8moe_triton_tritonexperts"
    assert fitted["fp8_block_triton"].overhead_s != fitted["fp8_block"].overhead_s


def test_an_h200_tp8_step_of_a_block_fp8_moe_uses_the_triton_entry():
    from servopt.costmodels.architectures import resolve_model

    spec = resolve_model("MiniMaxAI/MiniMax-M2.5").spec
    gpu = get_gpu("h200")
    profile = load_profile(gpu)
    tp_only = StepCostModel(spec, gpu, profile, quantization="fp8", tp=8, vllm_version="0.18.0")
    with_ep = StepCostModel(spec, gpu, profile, quantization="fp8", tp=8, vllm_version="0.18.0", expert_parallel=True)
    assert (tp_only._moe_kernel, with_ep._moe_kernel) == ("fp8_block_triton", "fp8_block")
