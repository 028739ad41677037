"""servopt validate on excerpts of the real measured tables (tests/data, with attribution)."""

import json

import pandas as pd
import pytest

from servopt.optimizer.cli import main


def run_json(argv, capsys):
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_kernel_excerpts_are_predicted_within_the_targets(data_dir, capsys):
    result = run_json(["validate", "--kernels", str(data_dir / "aic_gemm_h100_excerpt.csv"),
                       "--kernels", str(data_dir / "aic_context_attention_h100_excerpt.csv"),
                       "--kernels", str(data_dir / "aic_generation_attention_h100_excerpt.csv")], capsys)
    medians = {row["slice"].split("/")[0]: row["median_abs_pct"] for row in result["summary"]}
    assert medians["gemm"] < 8 and medians["context_attention"] < 12 and medians["generation_attention"] < 12
    assert all(row["calibrated"] for row in result["summary"]) and result["not_predicted"] == []


def test_memory_profiles_kv_tokens_within_3_percent(data_dir, capsys):
    result = run_json(["validate", "--memory", str(data_dir / "vllm_memory_profiles_dev.csv")], capsys)
    errors = [row["median_abs_pct"] for row in result["summary"] if row["metric"] == "kv_cache_tokens"]
    assert len(errors) == 9 and max(errors) < 3


def test_public_kv_logs_are_each_predicted_or_explained(capsys):
    """The repository's public log table: every row has a prediction or a reason, and the chain from a
    logged KV pool to tokens (bytes per token, KV dtype of the checkpoint, TP, block rounding) holds."""
    from pathlib import Path

    table = Path(__file__).resolve().parents[1] / "calibration" / "measured" / "memory" / "vllm_kv_logs_public.csv"
    result = run_json(["validate", "--memory", str(table)], capsys)
    assert result["rows"] == len(pd.read_csv(table))
    assert all(row["reason"] for row in result["not_predicted"])
    from_memory = [row for row in result["overall"] if row["metric"] == "kv_cache_tokens_from_memory"]
    assert from_memory[0]["rows"] >= 10 and from_memory[0]["p90_abs_pct"] < 2


def test_e2e_rows_are_each_predicted_or_explained(data_dir, tmp_path, capsys):
    out = tmp_path / "pred.csv"
    assert main(["validate", "--e2e", str(data_dir / "silicon_dense_h100_excerpt.csv"), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    predictions = pd.read_csv(out, keep_default_na=False)
    source = pd.read_csv(data_dir / "silicon_dense_h100_excerpt.csv")
    assert predictions["id"].tolist() == source["id"].tolist()  # one row per input row, in order
    reasons = dict(zip(predictions["id"], predictions["reason"]))
    assert "not modelled" in reasons[source.loc[source.backend == "trtllm", "id"].iloc[0]]
    assert "disaggregated" in reasons[source.loc[source["mode"] == "disagg", "id"].iloc[0]]
    agg = predictions[predictions["id"].str.contains("_vllm_agg_")]
    predicted = agg[agg["reason"] == ""]
    # keep_default_na=False leaves the unpredicted rows' blanks as strings: compare numbers only.
    assert ((pd.to_numeric(predicted["pred_mean_tpot_ms"]) > 0) & (pd.to_numeric(predicted["pred_mean_ttft_ms"]) > 0)).all()
    assert (agg["reason"] != "").sum() + len(predicted) == len(agg)
    assert f"{len(source)} rows" in printed


SILICON_HEAD = ("id,backend,backend_version,model_path,system,precision,mode,isl,osl,gemm_quant_mode,batch_size,"
                "tp_size,pp_size,attention_dp_size,moe_tp_size,moe_ep_size,silicon_ttft_ms,silicon_tpot_ms,silicon_concurrency\n")


def test_e2e_reads_one_and_empty_as_no_parallelism(tmp_path, capsys):
    """attention_dp_size / pp_size / moe_ep_size of 1, 0 or empty all mean "off"; an FP8 ModelOpt
    checkpoint on H100 and H200 is predicted, not refused."""
    path = tmp_path / "rows.csv"
    path.write_text(SILICON_HEAD
                    + "a,vllm,0.12.0,nvidia/Llama-3.1-70B-Instruct-FP8,h200_sxm,fp8,agg,1024,128,fp8,8,4,1,1,1,1,150,20,8\n"
                    + "b,vllm,0.12.0,nvidia/Llama-3.1-70B-Instruct-FP8,h100_sxm,fp8,agg,1024,128,fp8,4,8,,,,0,90,12,4\n"
                    + "c,vllm,0.12.0,nvidia/Llama-3.1-70B-Instruct-FP8,h100_sxm,w3a3,agg,1024,128,,4,8,,,,,90,12,4\n")
    result = run_json(["validate", "--e2e", str(path)], capsys)
    assert result["predicted"] == 2
    assert [row["id"] for row in result["not_predicted"]] == ["c"]
    assert "precision 'w3a3'" in result["not_predicted"][0]["reason"]


def test_e2e_reads_vllm_bench_results_with_tails(tmp_path, capsys):
    """A `vllm bench serve` results table (random dataset, fixed lengths) is simulated request by
    request and scored on every metric it has, P99s included."""
    path = tmp_path / "bench.csv"
    path.write_text("model,gpu,vllm_version,tp,dataset,input_len,output_len,num_prompts,request_rate,"
                    "mean_ttft_ms,p99_ttft_ms,mean_tpot_ms,p99_tpot_ms,p99_itl_ms\n"
                    "meta-llama/Llama-3.1-8B-Instruct,NVIDIA H100 80GB HBM3,0.12.0,1,random,1024,128,50,2.0,"
                    "40,80,8,9,12\n")
    result = run_json(["validate", "--e2e", str(path)], capsys)
    assert result["predicted"] == 1
    metrics = {row["metric"] for row in result["overall"]}
    assert {"mean_ttft_ms", "p99_ttft_ms", "p99_tpot_ms", "p99_itl_ms"} <= metrics


def test_e2e_table_lacking_a_column_names_it(tmp_path, capsys):
    path = tmp_path / "bench.csv"
    path.write_text("model,gpu,tp,mean_ttft_ms\nmeta-llama/Llama-3.1-8B-Instruct,h100,1,40\n")
    assert main(["validate", "--e2e", str(path)]) == 2
    err = capsys.readouterr().err
    assert "vllm_version" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content, message", [
    ("a,b\n1,2\n", "lacks the column"),
    ("", "is empty"),
])
def test_bad_tables_exit_2(tmp_path, capsys, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    assert main(["validate", "--memory", str(path)]) == 2
    assert message in capsys.readouterr().err


BENCH_HEAD = ("model,gpu,vllm_version,tp,dataset,input_len,output_len,num_prompts,request_rate,mean_ttft_ms,"
              "mean_tpot_ms,prefix_cache\n")
BENCH_ROW = "meta-llama/Llama-3.1-8B-Instruct,NVIDIA H100 80GB HBM3,0.12.0,1,random,4096,64,40,4.0,60,8,{}\n"


def test_e2e_prefix_cache_column_says_the_server_saw_the_prompts(tmp_path):
    """A table's prefix_cache column 'warm' says every prompt was served before: its full blocks hit
    the prefix cache, so the predicted TTFT falls well below the cold run's."""
    from servopt.calibration.corpus import predict_run, table_runs
    from servopt.calibration.registry import load_profile
    from servopt.costmodels.hardware import get_gpu

    path = tmp_path / "bench.csv"
    path.write_text(BENCH_HEAD + BENCH_ROW.format("cold") + BENCH_ROW.format("warm"))
    cold, warm = table_runs(path, pd.read_csv(path))
    cached = warm.traffic.arrival.records.cached_tokens
    assert min(cached) >= 4096 - 16 and sum(cold.traffic.arrival.records.cached_tokens) <= 4096  # the test prompt
    profile = load_profile(get_gpu("h100"))
    assert predict_run(warm, profile)["mean_ttft_ms"] < 0.5 * predict_run(cold, profile)["mean_ttft_ms"]


def test_e2e_prefix_cache_column_with_an_unknown_state_exits_2(tmp_path, capsys):
    path = tmp_path / "bench.csv"
    path.write_text(BENCH_HEAD + BENCH_ROW.format("lukewarm"))
    assert main(["validate", "--e2e", str(path)]) == 2
    err = capsys.readouterr().err
    assert "prefix_cache 'lukewarm'" in err and len(err.strip().splitlines()) == 1


def test_explain_splits_each_predicted_mean_into_its_parts(tmp_path, capsys):
    """--explain: client, queueing, kernels, collectives and host add up to each row's predicted mean."""
    path = tmp_path / "bench.csv"
    path.write_text(BENCH_HEAD + BENCH_ROW.format("cold"))
    result = run_json(["validate", "--e2e", str(path), "--explain"], capsys)
    (row,) = result["explained"]
    for metric in ("ttft", "tpot"):
        parts = sum(row[f"{metric}_{p}_ms"] for p in ("client", "queueing", "kernels", "collectives", "host"))
        assert parts == pytest.approx(row[f"pred_mean_{metric}_ms"], rel=1e-6)
    assert row["ttft_client_ms"] > 0 and row["ttft_collectives_ms"] == 0 and row["tpot_client_ms"] == 0
