"""``servopt diagnose``: measured runs called healthy or not, metrics scrapes, remedies, seeded jobs, bad input."""

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from servopt.calibration.bottleneck import Evidence, decide
from servopt.calibration.diagnose import PUBLIC_RUNS
from servopt.calibration.prometheus import parse_vllm_metrics, read_vllm_metrics
from servopt.calibration.vllm_bench import read_bench_result
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.errors import InputError
from servopt.optimizer.cli import main
from servopt.optimizer.workload import load_workload

DATA = Path(__file__).parent / "data" / "diagnose"
SHARED_RUNS = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "measured" / "e2e" / "vllm_bench_runs"
# Public runs shipped in calibration/measured (crusoecloud/crusoe-cookbook, Apache-2.0): Llama-3.1 on L40S, vLLM 0.5.5.
LIGHT_8B = PUBLIC_RUNS / "crusoe_l40s__vllm-1.0qps-Meta-Llama-3.1-8B-Instruct-20240829-161828.json"
BUSY_70B = PUBLIC_RUNS / "crusoe_l40s__vllm-9.0qps-Meta-Llama-3.1-70B-Instruct-20240829-165245.json"
L40S = {"gpu": "l40s", "vllm_version": "0.5.5", "enable_chunked_prefill": True, "max_model_len": 8192}


def deployment_file(tmp_path, **fields) -> Path:
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump({**L40S, **fields}))
    return path


def diagnose_json(capsys, *args) -> dict:
    assert main(["diagnose", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_light_public_run_is_healthy_and_a_saturated_one_is_not(tmp_path, capsys):
    light = diagnose_json(capsys, LIGHT_8B, "--deployment", deployment_file(tmp_path))
    assert light["bottleneck"] == "none" and light["recommendations"] == []
    busy = diagnose_json(capsys, BUSY_70B, "--deployment", deployment_file(tmp_path, tp=8))
    assert busy["bottleneck"] == "saturated"
    run = busy["runs"][0]
    # Measured and predicted side by side; the queue shows in both (P99 TTFT of minutes).
    assert run["measured"]["ttft_s"]["p99"] > 60 and run["predicted"]["ttft_s"]["p99"] > 60
    queue = next(f for f in run["symptoms"] if f["name"] == "queue")
    assert queue["holds"] and "measured" in queue["evidence"]
    # Each recommendation was simulated; more replicas end the saturation.
    best = busy["recommendations"][0]
    assert best["improves"] and best["change"].startswith("replicas") and not best["predicted"]["saturated"]
    assert best["predicted"]["ttft_s"]["p99"] < 0.1 * run["predicted"]["ttft_s"]["p99"]


def test_a_batch_cap_under_a_queue_is_under_batching(tmp_path, capsys):
    # The same measured queue, told the server ran max_num_seqs 32: the cap, not the GPU, limits it.
    doc = diagnose_json(capsys, BUSY_70B, "--deployment", deployment_file(tmp_path, tp=8, max_num_seqs=32))
    assert doc["bottleneck"] == "under_batching"
    activity = doc["runs"][0]["activity"]
    assert activity["seq_cap_share"] > 0.5 and activity["kv_peak"] < 0.7
    best = doc["recommendations"][0]
    assert best["improves"] and best["change"].startswith("--max-num-seqs") and best["num_gpus"] == 8


def test_text_output_lists_measured_and_predicted_percentiles(tmp_path, capsys):
    assert main(["diagnose", str(BUSY_70B), "--deployment", str(deployment_file(tmp_path, tp=8))]) == 0
    out = capsys.readouterr().out
    assert "measured P50" in out and "predicted P99" in out
    for metric in ("TTFT", "TPOT", "ITL", "E2E"):
        assert f"\n  {metric}" in out
    assert "bottleneck: saturated" in out and "changes, each simulated" in out


@pytest.mark.parametrize("name, expected", [
    ("surajssd_70b_tp8_qps01", "none"),      # Llama-3.3-70B TP8 on A100-40GB at 1 req/s
    ("dennislee22_qwen2_7b_n1", "none"),     # one prompt alone
    ("dennislee22_qwen2_7b_n1000", "kv_pressure"),  # 1000 prompts at once into a 5 GiB KV cache
])
def test_shared_runs_saved_without_per_request_data(name, expected, capsys):
    doc = diagnose_json(capsys, DATA / f"{name}.json", "--deployment", DATA / f"{name}.deployment.yaml")
    assert doc["bottleneck"] == expected
    assert any("without --save-detailed" in note for note in doc["runs"][0]["notes"])
    if expected == "kv_pressure":
        run = doc["runs"][0]
        assert run["measured"]["ttft_s"]["p99"] > 300 and run["predicted"]["ttft_s"]["p99"] > 300
        improving = [r["change"] for r in doc["recommendations"] if r["improves"]]
        assert "--kv-cache-dtype fp8" in improving


@pytest.mark.skipif(not SHARED_RUNS.exists(), reason="../shared is not here")
def test_shared_session_with_per_request_data(tmp_path, capsys):
    runs = sorted(SHARED_RUNS.glob("01_tp8_pp1__*_qps_*.json"))  # 01, 04, 16, inf: the order the script ran them
    dep = tmp_path / "d.yaml"
    dep.write_text("gpu: a100-40gb\ntp: 8\nvllm_version: 0.8.3\n")
    doc = diagnose_json(capsys, *runs, "--deployment", dep)
    assert doc["runs"][0]["bottleneck"] == "none"
    # One session: the later runs hit the prefix cache the earlier ones left, so the burst's P99 TTFT
    # is predicted within a third of what was measured.
    burst = doc["runs"][-1]
    assert burst["client"] == "burst"
    assert abs(burst["predicted"]["ttft_s"]["p99"] / burst["measured"]["ttft_s"]["p99"] - 1) < 0.35


def test_measured_latencies_recomputed_as_the_benchmark_computes_them():
    run = read_bench_result(BUSY_70B)
    recomputed, measured = run.recomputed(), run.measured()
    for metric in ("ttft", "itl"):  # TPOT needs each request's latency, which files before 0.10 lack
        for stat, name in (("p50", "median"), ("p99", "p99"), ("mean", "mean")):
            saved = run.stats_ms[f"{name}_{metric}_ms"] / 1e3
            assert getattr(recomputed[metric], stat) == pytest.approx(saved, rel=2e-3), (metric, stat)
            assert getattr(measured[metric], stat) == saved
    # What the file has no statistic for comes from the per-request data.
    assert measured["ttft"].p90 == recomputed["ttft"].p90 and measured["e2e"].p99 == recomputed["e2e"].p99
    assert run.client() == "open" and run.num_requests == 1080


def test_statistics_only_result_still_diagnosed(tmp_path, capsys):
    data = json.loads(BUSY_70B.read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "errors"):
        data.pop(key, None)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data))
    doc = diagnose_json(capsys, path, "--deployment", deployment_file(tmp_path, tp=8))
    assert doc["bottleneck"] != "none" and not doc["runs"][0]["per_request_data"]


def test_metrics_scrape_is_read_by_name_across_versions():
    loaded = read_vllm_metrics([DATA / "metrics_vllm_0_25_1_loaded.txt"])
    assert (loaded.running, loaded.waiting, loaded.preemptions) == (64.0, 64.0, 0.0)
    assert loaded.kv_cache_usage == pytest.approx(0.1122, abs=1e-4) and loaded.kv_cache_tokens == 400448
    assert loaded.quantile("ttft", 0.5) < loaded.quantile("ttft", 0.99) < 0.5
    assert loaded.mean("itl") == pytest.approx(998.1225105317717 / 164629)
    run = read_vllm_metrics([DATA / "metrics_vllm_0_25_1_idle.txt", DATA / "metrics_vllm_0_25_1_loaded.txt"])
    assert run.counters["generation_tokens"] == loaded.counters["generation_tokens"]  # the idle scrape counted 0
    old = parse_vllm_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
                             'vllm:time_per_output_token_seconds_bucket{le="0.05",model_name="m"} 9\n'
                             'vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="m"} 10\n'
                             'vllm:time_per_output_token_seconds_count{model_name="m"} 10\n'
                             'vllm:time_per_output_token_seconds_sum{model_name="m"} 0.4\n', "v0")
    assert old.kv_cache_usage == 0.5 and old.quantile("itl", 0.5) == pytest.approx(0.05 * 5 / 9)


def test_measured_preemptions_make_kv_pressure(tmp_path, capsys):
    scrape = tmp_path / "metrics.txt"
    scrape.write_text('# TYPE vllm:num_preemptions_total counter\n'
                      'vllm:num_preemptions_total{engine="0",model_name="llama"} 12.0\n')
    doc = diagnose_json(capsys, LIGHT_8B, "--deployment", deployment_file(tmp_path), "--metrics", scrape)
    assert doc["bottleneck"] == "kv_pressure"
    assert "12 preemptions (measured counter)" in json.dumps(doc["runs"][0]["symptoms"])


def test_metrics_kv_pool_is_used_and_queue_time_is_measured(tmp_path, capsys):
    doc = diagnose_json(capsys, LIGHT_8B, "--deployment", deployment_file(tmp_path), "--metrics",
                        DATA / "metrics_vllm_0_25_1_loaded.txt")
    assert any("KV pool from the scrape: 400,448 tokens" in n for n in doc["notes"])
    queue = next(f for f in doc["runs"][0]["symptoms"] if f["name"] == "queue")
    assert "(measured; >= 25%)" in queue["evidence"]


def test_tpot_target_missed_on_memory_bound_decode(tmp_path, capsys):
    doc = diagnose_json(capsys, LIGHT_8B, "--deployment", deployment_file(tmp_path), "--slo", "p99_tpot_s=0.02")
    assert doc["bottleneck"] == "memory_bound_decode" and doc["slo"] == {"tpot": 0.02}
    changes = {r["change"]: r for r in doc["recommendations"]}
    assert changes["--quantization fp8"]["improves"]


def test_seed_job_starts_an_optimize_job_from_the_live_deployment(tmp_path, capsys):
    out = tmp_path / "job"
    doc = diagnose_json(capsys, LIGHT_8B, "--deployment", deployment_file(tmp_path), "--seed-job", out)
    workload = load_workload(doc["seed_job"]["workload"])
    assert workload.traffic.arrival.kind == "poisson" and workload.traffic.arrival.rate_per_s == 1.0
    assert workload.gpus == {"l40s": workload.gpus["l40s"]} and workload.max_model_len == 8192
    # A healthy run: its measured P99s are the targets (deployments at least as fast).
    assert workload.slo.p99_ttft_s == pytest.approx(doc["runs"][0]["measured"]["ttft_s"]["p99"], rel=1e-2)
    deployment = Deployment.model_validate(yaml.safe_load(Path(doc["seed_job"]["deployment"]).read_text()))
    assert deployment.gpu == "l40s" and deployment.vllm_version == "0.5.5"


def test_strings_from_files_are_data(tmp_path, capsys):
    data = json.loads(LIGHT_8B.read_text())
    data["model_id"] = "meta-llama/Meta-Llama-3.1-8B-Instruct\n$(touch pwned)\x1b[2J"
    path = tmp_path / "run$(touch x).json"
    path.write_text(json.dumps(data))
    assert main(["diagnose", str(path), "--deployment", str(deployment_file(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err
    # Named with --model, the run is diagnosed; its id and file name are only ever printed, cleaned.
    assert main(["diagnose", str(path), "--deployment", str(deployment_file(tmp_path)), "--model",
                 "meta-llama/Llama-3.1-8B-Instruct", "--seed-job", str(tmp_path / "job $(touch y)")]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "optimize '" in out  # the suggested command quotes the path
    workload = (tmp_path / "job $(touch y)" / "workload.yaml").read_text()
    assert "\x1b" not in workload and "pwned" not in workload
    assert not any((tmp_path / name).exists() for name in ("pwned", "x", "y"))


def _bad(tmp_path):
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "other.json").write_text(json.dumps({"model": "x", "score": 3}))
    (tmp_path / "text.txt").write_text("not json")
    (tmp_path / "metrics.txt").write_text("this is not prometheus\n")
    (tmp_path / "metrics.json").write_text(json.dumps({"vllm:num_requests_running": 1}))
    (tmp_path / "plain.txt").write_text("process_cpu_seconds_total 1.5\n")
    ramp = json.loads(LIGHT_8B.read_text())
    ramp["ramp_up_strategy"] = "linear"
    (tmp_path / "ramp.json").write_text(json.dumps(ramp))


@pytest.mark.parametrize("args, message", [
    (["missing.json"], "cannot be read"),
    (["list.json"], "holds a JSON list"),
    (["other.json"], "lacks 'completed'"),
    (["text.txt"], "is not valid JSON"),
    (["ramp.json"], "ramp_up_strategy"),
    ([str(LIGHT_8B), "--metrics", "metrics.txt"], "is not Prometheus text"),
    ([str(LIGHT_8B), "--metrics", "metrics.json"], "is not Prometheus text"),
    ([str(LIGHT_8B), "--metrics", "plain.txt"], "has no vllm: series"),
    ([str(LIGHT_8B), "--model", "qwen2.5-7b"], "pass --model with the model the server ran"),
    ([str(LIGHT_8B), "--slo", "p99_foo_s=1"], "unknown target"),
    ([str(LIGHT_8B), "--slo", "p99_ttft_s=-1"], "p99_ttft_s"),
])
def test_bad_input_is_one_line_and_exit_code_2(tmp_path, monkeypatch, capsys, args, message):
    _bad(tmp_path)
    monkeypatch.chdir(tmp_path)
    code = main(["diagnose", *args, "--deployment", str(deployment_file(tmp_path))])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_metrics_of_another_model_are_refused(tmp_path, capsys):
    scrape = tmp_path / "m.txt"
    scrape.write_text('vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 3\n')
    assert main(["diagnose", str(LIGHT_8B), "--deployment", str(deployment_file(tmp_path)), "--metrics", str(scrape)]) == 2
    assert "model_name" in capsys.readouterr().err


# --- the rules on their own ---------------------------------------------------------------------------
CALM = dict(queue_growth=0.0, queue_growth_measured=True, saturated=False, wait_share=0.01, preempted=0.0,
            preemption_measured=False, stall=1.3, kv_full=0.2, seq_cap_share=0.0, gpu_wait_share=0.1,
            memory_bound_share=0.95, prefill_tail_share=0.3)


@pytest.mark.parametrize("changes, expected", [
    ({}, "none"),
    ({"queue_growth": 0.5}, "saturated"),
    ({"queue_growth": 0.5, "kv_full": 0.98}, "kv_pressure"),
    ({"preempted": 0.05}, "kv_pressure"),
    ({"queue_growth": 0.5, "gpu_wait_share": 0.4}, "under_batching"),
    ({"queue_growth": 0.5, "seq_cap_share": 0.9, "kv_full": 0.3}, "under_batching"),
    ({"stall": 3.0, "prefill_tail_share": 0.9}, "prefill_interference"),
    ({"slo_misses": {"tpot": (0.03, 0.02)}}, "memory_bound_decode"),
    # Memory-bound steps are smooth: they explain no stall, and no target means no decode problem.
    ({"stall": 3.0}, "none"),
    # A measured flat TTFT trend outweighs the simulation's saturation verdict...
    ({"saturated": True, "queue_growth": 0.0}, "none"),
    # ...which decides when nothing measured the queue (a burst).
    ({"saturated": True, "queue_growth": math.nan, "queue_growth_measured": False}, "saturated"),
])
def test_rules(changes, expected):
    verdict = decide(Evidence(**{**CALM, **changes}))
    assert verdict.bottleneck == expected
    if expected == "none" and changes.get("stall"):
        assert "without a cause" in verdict.note


def test_bench_result_validation(tmp_path):
    path = tmp_path / "zero.json"
    path.write_text(json.dumps({"model_id": "m", "completed": 0, "duration": 1, "request_rate": 1}))
    with pytest.raises(InputError, match="completed is 0"):
        read_bench_result(path)


LIGHT_3QPS = PUBLIC_RUNS / "crusoe_l40s__vllm-3.0qps-Meta-Llama-3.1-8B-Instruct-20240829-162036.json"


def test_a_deployment_file_that_cannot_describe_the_run_is_warned_and_the_table_stays_in_columns(tmp_path, capsys):
    # Issue 29 (8): told the server ran max_num_seqs 1, the simulation queues for minutes where the run
    # measured 96 ms: a gap no model error explains.
    wrong = deployment_file(tmp_path, max_num_seqs=1)
    assert main(["diagnose", str(LIGHT_3QPS), "--deployment", str(wrong)]) == 0
    out = capsys.readouterr().out
    assert "WARNING: the predicted P50 TTFT" in out and "does not describe the server that ran" in out
    rows = [line for line in out.splitlines() if line.strip().startswith(("TTFT", "TPOT", "ITL", "E2E"))]
    assert len(rows) == 4
    for row in rows:  # every cell apart (no "872.28 s+72590%")
        assert not re.search(r"[0-9a-z%][+-][0-9]", row), row
    assert len(re.findall(r" \d+x ", rows[0] + " ")) == 2  # factors, not five-digit percentages
    # A description that fits gives no such warning.
    assert main(["diagnose", str(LIGHT_3QPS), "--deployment", str(deployment_file(tmp_path))]) == 0
    assert "WARNING" not in capsys.readouterr().out
