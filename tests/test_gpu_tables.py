"""Kernel tables of more GPUs (B200, L40S) extracted from aiconfigurator-core, and the profiles fitted on them.

Needs neither ../shared nor the aiconfigurator wheel: the extracted tables and fitted profiles are in
the repository, and the extraction's selection is checked on synthetic tables.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from servopt.calibration.fit import GemmFit
from servopt.calibration.registry import load_profile, shipped_profile
from servopt.calibration.tables import gpu_name_for, kernel_table_files, read_kernel_table
from servopt.costmodels.hardware import get_gpu

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "calibration" / "measured" / "kernel"
SOURCE_PREFIX = "pypi:aiconfigurator-core==0.12.0:aiconfigurator_core/systems/data/"


def _extract_script():
    spec = importlib.util.spec_from_file_location("extract_aic_kernel_tables", ROOT / "scripts" / "extract_aic_kernel_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, ops", [
    ("gemm", {"gemm"}), ("context_attention", {"context_attention"}),
    ("generation_attention", {"generation_attention"}),
    ("comm", {"all_reduce", "all_gather", "reduce_scatter", "alltoall"}), ("elementwise", {"elementwise"}),
])
def test_extracted_tables_are_read_with_their_gpu_and_source(name, ops):
    path = KERNELS / f"aic_vllm_{name}_perf.csv.gz"
    assert path in kernel_table_files(KERNELS)
    table = read_kernel_table(path)
    assert set(table["gpu"]) == {"b200", "l40s"} and set(table["op"]) == ops
    assert table["source"].str.startswith(SOURCE_PREFIX).all() and (table["latency_ms"] > 0).all()
    assert set(table["framework"]) <= {"vllm", "nccl-tests"}


def test_nvfp4_gemms_are_read_as_fp4_math_with_their_scales():
    table = read_kernel_table(KERNELS / "aic_vllm_gemm_perf.csv.gz")
    dtypes = table.groupby("gpu")["dtype"].unique().map(set)
    assert dtypes["b200"] == {"bf16", "fp8", "fp4"} and dtypes["l40s"] == {"bf16", "fp8"}
    # Weights of 4 bits plus one fp8 scale per 16: the fit times an fp4 GEMM as the cost model does (0.5625 bytes a weight).
    b200, profile = get_gpu("b200"), shipped_profile("b200")
    rows = pd.DataFrame({"m": [1.0], "n": [16384.0], "k": [16384.0]})
    fitted_ms = GemmFit("fp4").predict_ms(profile, b200, rows)[0]
    assert fitted_ms == pytest.approx(float(profile.gemm_time_s(b200, "fp4", 1, 16384, 16384, 0.5625, 2.0)) * 1e3)
    assert fitted_ms > 1.05 * float(profile.gemm_time_s(b200, "fp4", 1, 16384, 16384, 0.5, 2.0)) * 1e3


def test_b200_and_l40s_ship_calibrated_profiles_that_unmeasured_gpus_of_their_generation_borrow():
    for name in ("b200", "l40s"):
        profile = load_profile(get_gpu(name))
        assert profile.calibrated and "extract_aic_kernel_tables.py" in profile.source
        for family in ("gemm_bf16", "gemm_fp8", "attention_prefill", "attention_decode", "elementwise", "all_reduce"):
            assert f"{family}/held_out" in profile.fit_report, (name, family)
        assert profile.fit_report["gemm_bf16/held_out"]["median_abs_pct"] <= 10.0
        assert profile.notes == ""  # every family measured on the GPU itself
    b200 = get_gpu("b200")
    profile = shipped_profile("b200")
    # Blackwell's fp4 tensor cores: a large GEMM in fp4 beats fp8, which beats bf16.
    times = [float(profile.gemm_time_s(b200, d, 8192, 8192, 8192, w, 2.0)) for d, w in (("fp4", 0.5625), ("fp8", 1), ("bf16", 2))]
    assert times[0] < times[1] < times[2]
    l4 = load_profile(get_gpu("l4"))
    assert not l4.calibrated and "L40S" in l4.source


def test_gb200_rows_are_not_taken_for_b200():
    assert gpu_name_for("gb200", "NVIDIA GB200") == "gb200"
    assert gpu_name_for("b200_sxm", "NVIDIA B200") == "b200"


class _FakeWheel:
    """The extraction's view of a wheel: parquet names and frames, here synthetic."""

    def __init__(self, frames: dict[str, pd.DataFrame]):
        self.frames = frames

    def versions(self, system, op, framework, stem):
        script = _extract_script()
        found = [k.split("/")[3] for k in self.frames if k.startswith(f"{system}/{op}/{framework}/") and k.endswith(stem)]
        return sorted(found, key=script._version_key)

    def read(self, system, op, framework, version, stem):
        return self.frames[f"{system}/{op}/{framework}/{version}/{stem}"].assign(system=system, source="test")


def _synthetic_wheel() -> _FakeWheel:
    device = {"framework": "VLLM", "device": "NVIDIA B200"}
    gemm = pd.DataFrame([{**device, "version": "0.24.0", "kernel_source": ks, "gemm_dtype": dt, "m": m, "n": n, "k": 4096,
                          "latency": 0.01}
                         for ks, dt in (("torch", "bfloat16"), ("cutlass", "fp8"), ("deepgemm", "fp8_block"), ("cute", "nvfp4"))
                         for m in (1, 3, 32768) for n in (4096, 5120)])
    old_gemm = gemm.assign(version="0.9.0", latency=1.0)
    attention = pd.DataFrame([{**device, "version": "0.24.0", "kernel_source": "fi", "attn_dtype": "bfloat16",
                               "kv_cache_dtype": "bfloat16", "batch_size": 1, "isl": 1, "step": 1023, "num_heads": h,
                               "num_key_value_heads": kv, "head_dim": d, "window_size": w, "beam_width": 1, "latency": 0.02}
                              for h, kv, d, w in ((8, 1, 128, 0), (96, 8, 128, 0), (8, 1, 64, 0), (8, 1, 128, 128))])
    custom = pd.DataFrame({"framework": "vLLM", "device": "NVIDIA B200", "version": "0.24.0", "op_name": "all_reduce",
                           "kernel_source": "vLLM_custom_graph", "allreduce_dtype": "bfloat16", "num_gpus": 2,
                           "message_size": [1024, 2048], "latency": [0.004, 0.005], "backend": "vllm_graph"})
    nccl = pd.DataFrame({"framework": "TRTLLM", "device": "NVIDIA B200", "version": "2.29.2", "op_name": "all_reduce",
                         "kernel_source": "NCCL", "nccl_dtype": ["half", "int8"], "num_gpus": 8, "message_size": 256,
                         "latency": 0.01})
    legacy = nccl.drop(columns=["framework", "device", "version"])
    quant = pd.DataFrame({**device, "version": "0.24.0", "op_name": "scale_matrix", "kernel_source": "static_scaled_fp8_quant",
                          "m": [1, 32768], "k": 4096, "quant_dtype": "fp8", "latency": [0.002, 0.07]})
    return _FakeWheel({
        "b200_sxm/gemm/vllm/0.24.0/gemm_perf": gemm, "b200_sxm/gemm/vllm/0.9.0/gemm_perf": old_gemm,
        "b200_sxm/attention/vllm/0.24.0/generation_attention_perf": attention,
        "b200_sxm/comm/vllm/0.19.0/custom_allreduce_perf": custom.assign(version="0.19.0", latency=9.0),
        "b200_sxm/comm/vllm/0.24.0/custom_allreduce_perf": custom,
        "b200_sxm/comm/nccl/2.27.3/nccl_perf": nccl, "b200_sxm/comm/nccl/2.29.2/nccl_perf": nccl,
        "b200_sxm/comm/nccl/2.23/nccl_perf": legacy,
        "b200_sxm/quantize/vllm/0.24.0/scale_matrix_perf": quant,
    })


def test_extraction_takes_shared_subset_of_the_newest_vllm_and_every_nccl_version():
    script = _extract_script()
    tables = script.extract(_synthetic_wheel(), ["b200_sxm"])
    gemm = tables["gemm"]
    # Newest vLLM folder only (0.24.0 over 0.9.0), power-of-two m, projection n, no block-scaled fp8.
    assert set(gemm["version"]) == {"0.24.0"} and set(gemm["m"]) == {1, 32768} and set(gemm["n"]) == {4096}
    assert sorted(gemm["gemm_dtype"]) == sorted(["bfloat16", "fp8", "nvfp4"] * 2)
    assert np.allclose(gemm["tflops"], 2 * gemm["m"] * 4096 * 4096 / 1e-5 / 1e12)
    attention = tables["generation_attention"]
    assert attention[["num_heads", "num_key_value_heads", "head_dim", "window_size"]].values.tolist() == [[8, 1, 128, 0]]
    comm = tables["comm"]
    custom = comm[comm["framework"] == "vllm"]
    assert set(custom["version"]) == {"0.24.0"} and custom["message_bytes"].tolist() == [2048, 4096]
    nccl = comm[comm["framework"] == "nccl-tests"]
    assert sorted(nccl["dir_version"].unique()) == ["2.27.3", "2.29.2"]  # the legacy 2.23 layout is left out
    assert sorted(nccl["message_bytes"]) == [256, 256, 512, 512]  # int8 and half elements
    elementwise = tables["elementwise"]
    assert elementwise["message_bytes"].tolist() == [3 * 4096, 3 * 32768 * 4096]
    assert list(gemm.columns) == script.TABLES["gemm"][2] and list(attention.columns) == script.ATTENTION_COLUMNS


def test_pcie_gpu_counts_held_down_by_their_host_are_left_out_of_the_allreduce_curve():
    """A ring all-reduce loads each GPU's own link alike at 2 and 8 GPUs; on a PCIe GPU a count far
    slower than that measured its server's fabric. NVLink GPUs keep every count."""
    from servopt.calibration.fit import AllReduceFit

    sizes = 2.0 ** np.arange(20, 28)
    rows = []
    for gpu in ("l40s", "h100"):
        for n, busbw_gbps in ((2, 20.0), (8, 2.0)):
            for size in sizes:
                rows.append({"gpu": gpu, "framework": "nccl-tests", "kernel_source": "NCCL", "op": "all_reduce",
                             "dtype": "fp16", "num_gpus": n, "message_bytes": size,
                             "latency_ms": size * 2 * (n - 1) / n / (busbw_gbps * 1e9) * 1e3})
    selected = AllReduceFit().select(pd.DataFrame(rows))
    counts = selected.groupby("gpu")["num_gpus"].unique().map(sorted)
    assert counts["l40s"] == [2] and counts["h100"] == [2, 8]
