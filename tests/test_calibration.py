"""Calibration: fitting recovers known parameters, the CPU microbenchmark pipeline, importers, CLI errors."""

import json

import numpy as np
import pandas as pd
import pytest

from servopt.calibration.fit import AllReduceFit, AttentionFit, fit_profile, split_by_shape
from servopt.calibration.importers import import_aiconfigurator, read_vllm_bench
from servopt.calibration.microbench import NumpyBackend, run_microbenchmarks
from servopt.calibration.registry import load_profile, read_profile, shipped_profile
from servopt.calibration.tables import read_kernel_table
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import AttentionEfficiency, CollectiveCurve, GemmEfficiency, PerformanceProfile
from servopt.optimizer.cli import main

H100 = get_gpu("h100")


def synthetic_profile() -> PerformanceProfile:
    base = PerformanceProfile.spec_default(H100)
    gemm = GemmEfficiency(
        log2_m_knots=[0, 6, 9, 14], compute_efficiency=[0.2, 0.5, 0.8, 0.7], memory_efficiency=0.82, overhead_s=5e-6,
        log2_nk_knots=[10, 12, 14], n_compute_factor=[0.8, 1.0, 1.05], k_compute_factor=[0.9, 1.0, 1.0],
        n_memory_factor=[0.7, 1.0, 1.1], k_memory_factor=[1.0, 1.0, 0.95], smoothness=3.0,
    )
    return base.model_copy(update={
        "gemm": {"bf16": gemm},
        "attention_decode": AttentionEfficiency(compute_efficiency=0.3, memory_efficiency=0.85, overhead_s=1.2e-5,
                                                per_seq_overhead_s=5e-8),
        # A latency floor, then the ring's bytes at 60% (2 GPUs) and 80% (8 GPUs) of a 450 GB/s link.
        "allreduce": {"nccl": CollectiveCurve(link_gbps=450.0, points={
            n: [(float(b), lat + b * 2 * (n - 1) / n / (eff * 450e9)) for b in 2.0 ** np.arange(10, 31)]
            for n, lat, eff in ((2, 6e-6, 0.6), (8, 9e-6, 0.8))})},
    })


def test_gemm_fit_recovers_a_known_profile_on_held_out_shapes():
    truth = synthetic_profile()
    m, n, k = [a.ravel().astype(float) for a in np.meshgrid(2.0 ** np.arange(15), [1024, 2048, 4096, 8192, 16384],
                                                             [1024, 4096, 8192, 16384])]
    table = pd.DataFrame({"op": "gemm", "dtype": "bf16", "framework": "torch", "m": m, "n": n, "k": k, "gpu": "h100",
                          "latency_ms": truth.gemm_time_s(H100, "bf16", m, n, k, 2.0, 2.0) * 1e3})
    outcome = fit_profile(table, H100, holdout_fraction=0.3)
    held = outcome.report.query("family == 'gemm_bf16' and split == 'held_out'")
    assert held.rows.iloc[0] > 0 and held.median_abs_pct.iloc[0] < 1.5
    fitted = outcome.profile.gemm["bf16"]
    assert fitted.overhead_s == pytest.approx(5e-6, rel=0.1)
    # The bandwidth a large memory-bound GEMM reaches is the product of the efficiency and its factors.
    assert fitted.memory_eff(16384, 16384) == pytest.approx(0.82 * 1.1 * 0.95, rel=0.05)
    assert outcome.profile.calibrated


def test_decode_attention_fit_recovers_its_parameters_and_allreduce_curves_interpolate_held_out_sizes():
    truth = synthetic_profile()
    b, step = [a.ravel() for a in np.meshgrid([1, 4, 16, 64, 256], [15, 255, 1023, 4095, 16383])]
    rows = pd.DataFrame({"op": "generation_attention", "dtype": "bf16", "kv_cache_dtype": "bf16", "batch_size": b,
                         "step": step, "isl": 1, "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128})
    rows["latency_ms"] = AttentionFit("decode").predict_ms(truth, H100, rows)
    sizes = 2.0 ** np.arange(10, 28)
    comm = pd.DataFrame({"op": "all_reduce", "dtype": "bf16", "num_gpus": np.repeat([2, 8], len(sizes)),
                         "message_bytes": np.tile(sizes, 2), "kernel_source": "nccl", "implementation": "nccl"})
    comm["latency_ms"] = AllReduceFit().predict_ms(truth, H100, comm)
    table = pd.concat([rows, comm.drop(columns="implementation")], ignore_index=True).assign(gpu="h100", framework="torch")
    outcome = fit_profile(table, H100, holdout_fraction=0.3)
    profile = outcome.profile
    assert profile.attention_decode.memory_efficiency == pytest.approx(0.85, rel=0.05)
    assert profile.attention_decode.overhead_s == pytest.approx(1.2e-5, rel=0.1)
    # Sizes left out of the curve are interpolated between their measured neighbours.
    held = outcome.report.query("family == 'all_reduce' and split == 'held_out'")
    assert held.rows.iloc[0] > 0 and held.median_abs_pct.iloc[0] < 3
    for size in (2.0**11, 2.0**20, 2.0**26):  # measured or interpolated over a held-out gap
        assert float(profile.allreduce_time_s(H100, size, 8)) == pytest.approx(
            float(truth.allreduce_time_s(H100, size, 8)), rel=0.1)


def test_holdout_splits_whole_shapes():
    keys = pd.DataFrame({"n": np.repeat([1, 2, 3, 4, 5, 6], 4), "k": 7})
    held = split_by_shape(keys, 0.34)
    assert held.sum() == 8
    assert keys[held].groupby("n").size().eq(4).all()  # a shape is held out with all its rows


def test_shipped_profiles_are_calibrated_and_attributed():
    for name in ("h100", "h200", "a100-80gb"):
        profile = shipped_profile(name)
        assert profile.calibrated and "aiconfigurator-core" in profile.source and "Vidur" in profile.source
        assert profile.fit_report["gemm_bf16/held_out"]["median_abs_pct"] <= 5.0
    transferred = load_profile(get_gpu("h100-pcie"))
    assert not transferred.calibrated and "uncalibrated" in transferred.source


def test_cpu_microbenchmarks_feed_the_fit_end_to_end(tmp_path):
    table, meta = run_microbenchmarks(NumpyBackend(), quick=True, max_work=3e8, repeats=2)
    assert meta["is_gpu"] is False and meta["statistic"] == "median"
    assert {"gemm", "context_attention", "generation_attention", "memcpy"} <= set(table["op"])
    path = tmp_path / "cpu.csv"
    table.to_csv(path, index=False)
    reread = read_kernel_table(path)
    assert (reread["gpu"] == "cpu").all() and (reread["latency_ms"] > 0).all()
    out = tmp_path / "profile.json"
    assert main(["calibrate", "fit", str(path), "--gpu", "h100", "--out", str(out), "--holdout-fraction", "0"]) == 0
    profile = read_profile(out)
    assert not profile.calibrated and "pipeline test" in profile.notes


def _write_aic(root, fmt):
    base = root / "aiconfigurator_core" / "systems" / "data" / "h200_sxm"
    gemm = pd.DataFrame({"framework": "VLLM", "version": "0.24.0", "device": "NVIDIA H200", "op_name": "gemm",
                         "kernel_source": "torch", "gemm_dtype": "bfloat16", "m": [1, 2, 4], "n": 4096, "k": 4096,
                         "latency": [0.012, 0.012, 0.013]})
    attn = pd.DataFrame({"framework": "VLLM", "version": "0.24.0", "device": "NVIDIA H200", "op_name": "generation_attention",
                         "kernel_source": "fa3", "batch_size": [1, 8], "isl": 1, "num_heads": 32, "num_key_value_heads": 8,
                         "head_dim": 128, "beam_width": 1, "attn_dtype": "bfloat16", "kv_cache_dtype": "bfloat16",
                         "step": [1023, 1023], "window_size": 0, "latency": [0.015, 0.02]})
    comm = pd.DataFrame({"framework": "vLLM", "version": "0.24.0", "device": "NVIDIA H200", "op_name": "all_reduce",
                         "kernel_source": "vLLM_custom_graph", "allreduce_dtype": "bfloat16", "num_gpus": 2,
                         "message_size": [1024, 4096], "latency": [0.004, 0.005], "backend": "vllm_graph"})
    for folder, name, frame in (("gemm/vllm/0.19.0", "gemm_perf", gemm.head(1)), ("gemm/vllm/0.24.0", "gemm_perf", gemm),
                                ("attention/vllm/0.24.0", "generation_attention_perf", attn),
                                ("comm/vllm/0.24.0", "custom_allreduce_perf", comm)):
        (base / folder).mkdir(parents=True)
        if fmt == "parquet":
            frame.to_parquet(base / folder / f"{name}.parquet")
        else:
            frame.to_csv(base / folder / f"{name}.csv", index=False)
    return root / "aiconfigurator_core"


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_aiconfigurator_import_reads_the_newest_version(tmp_path, fmt):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    root = _write_aic(tmp_path, fmt)
    table = import_aiconfigurator(root, "h200_sxm", "vllm")
    assert sorted(table["op"].unique()) == ["all_reduce", "gemm", "generation_attention"]
    assert len(table[table["op"] == "gemm"]) == 3  # 0.24.0, not 0.19.0
    assert (table["gpu"] == "h200").all() and (table["framework"] == "vllm").all()
    assert table.loc[table["op"] == "all_reduce", "message_bytes"].tolist() == [2048, 8192]
    out = tmp_path / "table.csv"
    assert main(["calibrate", "import", "--aiconfigurator", str(root), "--system", "h200_sxm", "--out", str(out)]) == 0
    assert len(read_kernel_table(out)) == len(table)


def test_vllm_bench_result_becomes_traffic(tmp_path):
    path = tmp_path / "r.json"
    run_json = {"model_id": "meta-llama/Llama-3.3-70B-Instruct", "request_rate": "inf", "max_concurrency": 16,
                "completed": 3, "duration": 1.0, "total_input_tokens": 50, "total_output_tokens": 19,
                "input_lens": [10, 10, 30], "output_lens": [5, 7, 7], "ttfts": [0.1] * 3,
                "itls": [[0.02] * 4, [0.02] * 6, [0.02] * 6], "median_tpot_ms": 25.0}
    path.write_text(json.dumps(run_json))
    run = read_vllm_bench(path)
    assert run.traffic.arrival.kind == "closed_loop" and run.traffic.arrival.concurrency == 16
    assert run.traffic.input_tokens.values == [10, 30] and run.traffic.input_tokens.weights == [2.0, 1.0]
    path.write_text(json.dumps({**run_json, "output_lens": None}))
    with pytest.raises(InputError, match="output_lens"):
        read_vllm_bench(path)


@pytest.mark.parametrize("argv, message", [
    (["calibrate", "fit", "missing.csv"], "does not exist"),
    (["calibrate", "import", "--aiconfigurator", "."], "--system"),
    (["calibrate", "import", "--aiconfigurator", ".", "--system", "h200_sxm"], "no systems/data"),
    (["calibrate", "import", "--vllm-bench", "r.json"], "--deployment"),
    (["validate"], "give at least one table"),
    (["validate", "--e2e", "missing.csv"], "does not exist"),
])
def test_cli_errors_exit_2_with_one_line(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_public_collective_rows_count_for_each_named_gpu_of_one_architecture():
    """A public row measured on "H100 or H200" counts for both; a guessed GPU, or two GPUs of two
    architectures, for neither."""
    import io

    text = ("source,gpu,num_gpus,collective,implementation,cuda_graph,dtype,message_bytes,latency_ms\n"
            "vllm-project/vllm PR,H100 or H200 (SM 9.0),8,all_reduce,symm_mem_multimem,true,bfloat16,16777216,0.087\n"
            "vllm-project/vllm PR,unknown (likely B200),4,all_reduce,symm_mem_multimem,true,bfloat16,16777216,0.05\n"
            "vllm-project/vllm PR,unknown (H100 or B200),6,all_reduce,pynccl,true,bfloat16,16777216,0.1\n"
            "vllm-project/vllm PR,H100 or B200,6,all_reduce,pynccl,true,bfloat16,16777216,0.1\n")
    table = read_kernel_table(io.StringIO(text), "public.csv")
    assert sorted(table["gpu"]) == ["h100", "h200"]
    assert set(table["framework"]) == {"vllm"} and set(table["dtype"]) == {"bf16"}


def test_symmetric_memory_curve_is_the_kernel_vllm_runs_at_that_gpu_count():
    """vLLM runs multimem on Hopper at 4, 6 and 8 GPUs and two-shot at 2: the fitted symm_mem curve
    takes each GPU count's own kernel, never the other one's timings."""
    rows = []
    for n, variant, us in ((8, "multimem", 87.0), (8, "two_shot", 125.0), (2, "multimem", 40.0), (2, "two_shot", 60.0)):
        for size in (2**22, 2**24):
            rows.append({"system": "h100", "device": "h100", "framework": "vllm", "kernel_source": f"symm_mem_{variant}",
                         "op": "all_reduce", "dtype": "bf16", "num_gpus": n, "message_bytes": size,
                         "latency_ms": us / 1e3 * size / 2**24})
    table = read_kernel_table(io_csv(pd.DataFrame(rows)), "symm.csv")
    fit = AllReduceFit()
    selected = fit.select(table)
    profile = fit.fit(PerformanceProfile.spec_default(H100), H100, selected)
    curve = profile.allreduce["symm_mem"]
    assert float(curve.time_s(2**24, 8)) == pytest.approx(87e-6)
    assert float(curve.time_s(2**24, 2)) == pytest.approx(60e-6)


def io_csv(frame: pd.DataFrame):
    import io

    return io.StringIO(frame.to_csv(index=False))


# --- MoE silicon rows: fp4 formats, catalog releases, nightly images ----------------------------

MOE_SILICON_HEAD = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,mode,isl,osl,"
                    "gemm_quant_mode,moe_quant_mode,batch_size,tp_size,pp_size,attention_dp_size,moe_tp_size,"
                    "moe_ep_size,silicon_ttft_ms,silicon_tpot_ms,silicon_concurrency\n")


def _moe_rows(tmp_path, *lines):
    from servopt.calibration.corpus import silicon_runs

    path = tmp_path / "silicon_moe.csv"
    path.write_text(MOE_SILICON_HEAD + "".join(line + "\n" for line in lines))
    return silicon_runs(path)


def test_fp4_rows_run_the_catalog_nvfp4_release_of_their_model(tmp_path):
    runs = _moe_rows(
        tmp_path,
        "a,measured=2026-04-03,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp4,agg,1024,1024,nvfp4,nvfp4,8,2,1,2,1,4,90,8,16",
        "b,measured=2026-04-03,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b300_sxm,fp8,agg,1024,1024,fp8,fp8,8,4,1,1,4,1,90,8,8",
        "c,measured=2026-04-03,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp4,agg,1024,1024,,,8,4,1,1,4,1,90,8,8")
    nvfp4, fp8, unnamed = runs
    assert (nvfp4.model, nvfp4.dtype, nvfp4.deployment.quantization) == ("nvidia/MiniMax-M2.5-NVFP4", "nvfp4", "nvfp4")
    assert (nvfp4.deployment.data_parallel_size, nvfp4.deployment.enable_expert_parallel) == (2, True)
    assert (fp8.model, fp8.gpu, fp8.dtype) == ("MiniMaxAI/MiniMax-M2.5", "b300", "fp8")
    assert "moe_quant_mode or gemm_quant_mode" in unnamed.skip


def test_a_nightly_image_reads_as_the_newest_release_run_by_that_date(tmp_path):
    runs = _moe_rows(
        tmp_path,
        "a,measured=2026-03-11,vllm,0.17.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,8,4,1,1,4,1,90,8,8",
        "b,measured=2026-04-03,vllm,0.19.0,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,8,4,1,1,4,1,90,8,8",
        "c,measured=2026-04-03,vllm,nightly-5b8c30d6,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,8,4,1,1,4,1,90,8,8",
        "d,measured=2026-03-01,vllm,nightly-0000,MiniMaxAI/MiniMax-M2.5,b200_sxm,fp8,agg,1024,1024,fp8,fp8,8,4,1,1,4,1,90,8,8")
    assert runs[2].vllm_version == "0.19.0" and runs[2].deployment.vllm_version == "0.19.0"
    assert "nightly image" in runs[3].skip
