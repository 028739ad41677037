"""Issue 10: every case of malformed input found by the first fuzzer, run as a user runs it.

Each bad file must give exit code 2 and one line naming the field (or the line and column), never a
traceback, a hang or a silent misreading; each good file in a format real tools write must be read.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from servopt.costmodels.errors import MAX_TOKENS, InputError
from servopt.costmodels.serving.simulator import MIN_PLANS, PLANS_PER_REQUEST
from servopt.costmodels.serving.traffic import Traffic
from servopt.costmodels.userfiles import read_csv_table, read_json, read_yaml_mapping
from servopt.optimizer.cli import main

WORKLOAD = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 4.0},
                "input_tokens": {"kind": "fixed", "value": 512},
                "output_tokens": {"kind": "fixed", "value": 64}},
    "slo": {"p99_ttft_s": 2.0},
}
DEPLOYMENT = {"gpu": "h100", "max_num_seqs": 128, "max_num_batched_tokens": 8192, "max_model_len": 16384}
DEEP = 1000


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, err


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.fixture
def files(tmp_path):
    write(tmp_path / "w.yaml", WORKLOAD)
    write(tmp_path / "d.yaml", DEPLOYMENT)
    return tmp_path


def predict(capsys, folder: Path, *extra) -> tuple[int, str, str]:
    return cli(capsys, "predict", folder / "w.yaml", "--deployment", folder / "d.yaml", "--analytic", *extra)


# --- tracebacks -----------------------------------------------------------------------------------
def test_thousand_deep_yaml_is_a_clean_error_in_every_yaml_reader(files, capsys):
    deep = "a: " + "[" * DEEP + "]" * DEEP + "\n"
    for name in ("w.yaml", "d.yaml"):
        write(files / name, deep)
        assert_one_line_error(*predict(capsys, files)[::2], "nested more than 32 levels")
        write(files / name, WORKLOAD if name == "w.yaml" else DEPLOYMENT)
    write(files / "hw.yaml", "gpus: " + "{a: " * DEEP + "1" + "}" * DEEP)
    assert_one_line_error(*predict(capsys, files, "--hardware", files / "hw.yaml")[::2], "hw.yaml", "nested")


def test_thousand_deep_json_is_a_clean_error_in_every_json_reader(files, capsys):
    deep = '{"a": ' * DEEP + "1" + "}" * DEEP
    (files / "p.json").write_text(deep)
    assert_one_line_error(*predict(capsys, files, "--profile", files / "p.json")[::2], "p.json", "nested")
    (files / "r.json").write_text("[" * DEEP + "]" * DEEP)
    code, _, err = cli(capsys, "calibrate", "import", "--vllm-bench", files / "r.json", "--deployment", files / "d.yaml")
    assert_one_line_error(code, err, "r.json", "nested")
    (files / "t.jsonl").write_text(deep + "\n")
    with pytest.raises(InputError, match="nested"):
        Traffic.model_validate({"arrival": {"kind": "trace", "path": str(files / "t.jsonl")}}).read_trace()
    job = files / "job"
    job.mkdir()
    (job / "job.json").write_text(deep)
    assert_one_line_error(*cli(capsys, "report", job)[::2], "job.json", "nested")


@pytest.mark.parametrize("content, needle", [
    ("arrival_s,input_tokens,output_tokens\n", "has a header but no rows"),
    ("arrival_s,input_tokens,output_tokens\n0,10,5\n1,10,5,7\n", "line 3 has 4 fields but the header has 3"),
    ("arrival_s,input_tokens,output_tokens\n0,10\n", "line 2 has 2 fields"),
    ("arrival_s,input_tokens,output_tokens\n0,10,5\n" + ",".join(["1"] * 100_000) + "\n", "line 3 has 100,000 fields"),
])
def test_header_only_ragged_and_100k_field_traces_name_the_line(files, capsys, content, needle):
    (files / "t.csv").write_text(content)
    write(files / "w.yaml", {**WORKLOAD, "traffic": {"arrival": {"kind": "trace", "path": "t.csv"}}})
    start = time.perf_counter()
    code, _, err = cli(capsys, "predict", files / "w.yaml", "--deployment", files / "d.yaml")
    assert_one_line_error(code, err, "t.csv", needle)
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("content", ["[1, 2, 3]", '"a string"', "42", "null"])
def test_a_vllm_bench_file_that_is_not_an_object(files, capsys, content):
    (files / "r.json").write_text(content)
    code, _, err = cli(capsys, "calibrate", "import", "--vllm-bench", files / "r.json", "--deployment", files / "d.yaml")
    assert_one_line_error(code, err, "r.json", "not the object `vllm bench serve` writes")


MEMORY_HEADER = "model,gpu,tp,pp,max_model_len,gpu_memory_utilization,kv_cache_tokens\n"


@pytest.mark.parametrize("cell, needle", [
    ("1.5", "column 'tp': '1.5' is not a whole number"),
    ("1e400", "column 'tp': '1e400' is not a finite number"),
    ("99999999999999999999999", "is not a whole number"),
    ("true", "column 'tp': 'true' is not a number"),
    ("nan", "is not a number"),
])
def test_bad_integer_cells_name_line_and_column(tmp_path, capsys, cell, needle):
    path = tmp_path / "m.csv"
    path.write_text(MEMORY_HEADER + f"meta-llama/Llama-3.1-8B,H100-80GB,{cell},1,8192,0.9,100000\n")
    assert_one_line_error(*cli(capsys, "validate", "--memory", path)[::2], "m.csv", "line 2", needle)


def test_whole_numbers_written_as_floats_are_read(tmp_path, capsys):
    # pandas writes integer columns with gaps as 1.0; that is a whole number, not an error.
    path = tmp_path / "m.csv"
    path.write_text(MEMORY_HEADER + "meta-llama/Llama-3.1-8B,H100-80GB,1.0,1.0,8192.0,0.9,100000.0\n")
    code, out, err = cli(capsys, "validate", "--memory", path, "--json")
    assert code == 0, err
    assert json.loads(out)["predicted"] == 1


@pytest.mark.parametrize("knots", [[0, float("nan"), 7], [0, 4, float("inf")]])
def test_nan_or_inf_in_profile_knots_is_refused(files, capsys, knots):
    profile = json.loads((Path(__file__).parents[1] / "calibration/profiles/h100.json").read_text())
    profile["gemm"]["bf16"]["log2_m_knots"][:3] = knots
    (files / "p.json").write_text(json.dumps(profile))
    assert_one_line_error(*predict(capsys, files, "--profile", files / "p.json")[::2], "p.json",
                          "gemm.bf16.log2_m_knots", "finite number")


@pytest.mark.parametrize("field, value, needle", [
    ("memory_gib", 1e308, "memory_gib"),
    ("memory_gib", float("nan"), "memory_gib"),
    ("price_per_gpu_hour", float("inf"), "price_per_gpu_hour"),
    ("memory_bandwidth_tbps", -1.0, "memory_bandwidth_tbps"),
])
def test_absurd_hardware_values_are_refused(files, capsys, field, value, needle):
    write(files / "hw.yaml", {"gpus": {"h100-lab": {"base": "h100", field: value}}})
    write(files / "d.yaml", {**DEPLOYMENT, "gpu": "h100-lab"})
    assert_one_line_error(*predict(capsys, files, "--hardware", files / "hw.yaml")[::2], "hw.yaml", needle)


@pytest.mark.parametrize("arrival, needle", [
    ({"kind": "gamma", "rate_per_s": 4.0, "cv": 1e-300}, "traffic.arrival.gamma.cv"),
    ({"kind": "poisson", "rate_per_s": 1e-300}, "traffic.arrival.poisson.rate_per_s"),
])
def test_vanishing_arrival_parameters_are_refused(files, capsys, arrival, needle):
    write(files / "w.yaml", {**WORKLOAD, "traffic": {**WORKLOAD["traffic"], "arrival": arrival}})
    assert_one_line_error(*predict(capsys, files)[::2], needle)


def test_infinite_slo_is_refused(files, capsys):
    (files / "w.yaml").write_text(yaml.safe_dump(WORKLOAD).replace("p99_ttft_s: 2.0", "p99_ttft_s: .inf"))
    assert_one_line_error(*predict(capsys, files)[::2], "slo.p99_ttft_s", "finite number")


def test_very_long_paths_are_clean_errors(files, capsys, monkeypatch):
    long = "x" * 5000
    assert_one_line_error(*cli(capsys, "predict", files / f"{long}.yaml", "--deployment", files / "d.yaml")[::2],
                          "workload file", "cannot be read")
    write(files / "w.yaml", {**WORKLOAD, "traffic": {"arrival": {"kind": "trace", "path": f"{long}.csv"}}})
    assert_one_line_error(*cli(capsys, "predict", files / "w.yaml", "--deployment", files / "d.yaml")[::2], "trace")
    write(files / "w.yaml", WORKLOAD)
    monkeypatch.chdir(files)
    code, _, err = cli(capsys, "optimize", files / "w.yaml", "--out", files / long / long, "--no-progress")
    assert_one_line_error(code, err, "cannot create folder")


def test_truncated_or_damaged_job_json_is_explained_on_every_rerun(files, capsys):
    # With the folder's study.db the job is rebuilt from the study (optimizer/job.py); without it,
    # every rerun says what is wrong and what to do, in one line.
    job = files / "job"
    job.mkdir()
    damaged = ['{"study": "w", "storage": "sqlite:///x.db", "workl', '{"a": ' * DEEP + "1" + "}" * DEEP,
               '{"study": "w", "study": "v", "storage": "s", "workload": {}}',
               json.dumps({"study": "w", "storage": 5, "workload": {}})]
    for text in damaged:
        (job / "job.json").write_text(text)
        for _ in range(2):
            assert_one_line_error(*cli(capsys, "report", job)[::2], "job.json is unreadable", "rerun servopt optimize")


def test_yaml_syntax_errors_are_one_line(files, capsys):
    (files / "w.yaml").write_text("model: llama-3.1-8b\ntraffic:\n  arrival: {kind: poisson\n  rate_per_s: [1\n")
    assert_one_line_error(*predict(capsys, files)[::2], "w.yaml", "is not valid YAML at line")


# --- a valid workload that crashed ----------------------------------------------------------------
def test_one_output_token_does_not_crash_the_estimate(files, capsys):
    write(files / "w.yaml", {**WORKLOAD, "traffic": {**WORKLOAD["traffic"], "output_tokens": {"kind": "fixed", "value": 1}}})
    write(files / "d.yaml", {"gpu": "h100", "disaggregation": {"prefill_instances": 1, "decode_instances": 1}})
    code, out, err = predict(capsys, files, "--json")
    assert code == 0, err
    assert json.loads(out)["ttft_s"]["p99"] > 0
    # ... but a TPOT target cannot be scored when no request has a second token
    write(files / "w.yaml", {**WORKLOAD, "slo": {"p99_tpot_s": 0.05},
                             "traffic": {**WORKLOAD["traffic"], "output_tokens": {"kind": "fixed", "value": 1}}})
    assert_one_line_error(*predict(capsys, files)[::2], "p99_tpot_s")


# --- hangs ----------------------------------------------------------------------------------------
def test_one_arrival_at_1e300_is_refused_quickly(files, capsys):
    (files / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n0,100,10\n1,100,10\n1e300,100,10\n")
    write(files / "w.yaml", {**WORKLOAD, "traffic": {"arrival": {"kind": "trace", "path": "t.csv"}}})
    start = time.perf_counter()
    code, _, err = cli(capsys, "predict", files / "w.yaml", "--deployment", files / "d.yaml")
    assert_one_line_error(code, err, "t.csv", "spans", "line 4")
    assert time.perf_counter() - start < 10


def test_predict_with_100k_token_outputs_stops_early_and_says_why(files, capsys):
    write(files / "w.yaml", {**WORKLOAD, "traffic": {**WORKLOAD["traffic"],
                                                     "output_tokens": {"kind": "fixed", "value": 100_000}}})
    write(files / "d.yaml", {"gpu": "h100"})
    code, _, err = cli(capsys, "predict", files / "w.yaml", "--deployment", files / "d.yaml")
    assert_one_line_error(code, err, "stopped early", "cannot reach a steady state", "100,000 output tokens")
    # It stops on the simulator's work budget (engine plans per simulated request), not on a clock:
    # the rounds it reports are that budget, and fewer requests finished than were sent.
    rounds, done, sent = (int(n.replace(",", "")) for n in
                          re.search(r"after ([\d,]+) scheduling rounds .* only ([\d,]+) of ([\d,]+) requests", err).groups())
    assert rounds == max(MIN_PLANS, PLANS_PER_REQUEST * sent)
    assert done < sent


# --- silent misreadings ---------------------------------------------------------------------------
def test_duplicate_keys_are_refused_in_yaml_and_json(tmp_path):
    (tmp_path / "d.yaml").write_text("gpu: h100\ntp: 1\ntp: 2\n")
    with pytest.raises(InputError, match="line 3, column 1: the key 'tp' is given twice"):
        read_yaml_mapping(tmp_path / "d.yaml", "deployment file")
    (tmp_path / "p.json").write_text('{"gpu": "h100", "gpu": "a100"}')
    with pytest.raises(InputError, match="'gpu' twice"):
        read_json(tmp_path / "p.json", "profile")
    # A merge key followed by an override is YAML's way of saying "like that, except": not a duplicate.
    (tmp_path / "m.yaml").write_text("base: &b {gpu: h100, tp: 1}\nother:\n  <<: *b\n  tp: 2\n")
    assert read_yaml_mapping(tmp_path / "m.yaml", "file")["other"] == {"gpu": "h100", "tp": 2}


def test_yaml_bombs_are_refused(tmp_path):
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="expands to more than"):
        read_yaml_mapping(tmp_path / "bomb.yaml", "workload file")


@pytest.mark.parametrize("path, value, needle", [
    (("traffic", "input_tokens", "value"), True, "traffic.input_tokens.fixed.value: expected a whole number, not a true/false"),
    (("traffic", "arrival", "rate_per_s"), "4", "traffic.arrival.poisson.rate_per_s: expected a number, not text"),
    (("slo", "p99_ttft_s"), "1.0", "slo.p99_ttft_s: expected a number, not text"),
    (("traffic", "input_tokens", "value"), 512.5, "traffic.input_tokens.fixed.value: expected a whole number"),
    (("model",), 8, "model: expected text"),
])
def test_no_silent_coercion(files, capsys, path, value, needle):
    data = json.loads(json.dumps(WORKLOAD))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    write(files / "w.yaml", data)
    assert_one_line_error(*predict(capsys, files)[::2], needle)


def test_yaml_exponent_floats_are_numbers(files, capsys):
    (files / "w.yaml").write_text(yaml.safe_dump(WORKLOAD).replace("p99_ttft_s: 2.0", "p99_ttft_s: 2e0"))
    code, out, err = predict(capsys, files, "--json")
    assert code == 0, err
    assert json.loads(out)["slo"] == {"ttft": 2.0}


def test_lognormal_mean_inf_is_refused_and_tails_never_overflow(files, capsys):
    write(files / "w.yaml", {**WORKLOAD, "traffic": {**WORKLOAD["traffic"],
                                                     "input_tokens": {"kind": "lognormal", "mean": float("inf"), "sigma": 1.0}}})
    assert_one_line_error(*predict(capsys, files)[::2], "traffic.input_tokens.lognormal.mean")
    t = Traffic.model_validate({**WORKLOAD["traffic"], "input_tokens": {"kind": "lognormal", "mean": MAX_TOKENS, "sigma": 5}})
    draws = t.input_tokens.sample(np.random.default_rng(0), 100_000)
    assert draws.min() >= 1 and draws.max() <= MAX_TOKENS


def test_infinite_or_absurd_gpu_price_in_a_workload_is_refused(tmp_path, capsys):
    for price in (float("inf"), 1e9, -1.0):
        write(tmp_path / "w.yaml", {**WORKLOAD, "gpus": {"h100": {"price_per_gpu_hour": price}}})
        code, _, err = cli(capsys, "optimize", tmp_path / "w.yaml", "--out", tmp_path / "o", "--no-progress")
        assert_one_line_error(code, err, "gpus.h100.price_per_gpu_hour")


def test_a_1m_token_prompt_on_a_131k_model_is_refused(files, capsys):
    write(files / "w.yaml", {**WORKLOAD, "traffic": {**WORKLOAD["traffic"],
                                                     "input_tokens": {"kind": "fixed", "value": 1_000_000}}})
    write(files / "d.yaml", {"gpu": "h100"})
    code, _, err = cli(capsys, "predict", files / "w.yaml", "--deployment", files / "d.yaml")
    assert_one_line_error(code, err, "1,000,064", "131,072", "maximum context")
    code, _, err = cli(capsys, "optimize", files / "w.yaml", "--out", files / "o", "--no-progress")
    assert_one_line_error(code, err, "median request needs 1,000,064 tokens")
    # Asking for clipping is allowed: the client then cuts each request to traffic.max_context.
    write(files / "w.yaml", {**WORKLOAD, "traffic": {**WORKLOAD["traffic"], "max_context": 8192,
                                                     "input_tokens": {"kind": "fixed", "value": 1_000_000}}})
    code, out, err = cli(capsys, "predict", files / "w.yaml", "--deployment", files / "d.yaml", "--requests", "50",
                         "--json")
    assert code == 0, err
    assert "clipped to the context" in " ".join(json.loads(out)["notes"])


MOONCAKE = [{"timestamp": t, "input_length": 1100 + 7 * i, "output_length": 40, "hash_ids": [0, 1, 100 + i]}
            for i, t in enumerate(range(0, 60_000, 1000))]


def test_mooncake_timestamps_are_milliseconds(tmp_path):
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MOONCAKE) + "\n")
    trace = Traffic.model_validate({"arrival": {"kind": "trace", "path": str(path)}}).read_trace()
    assert trace.format == "mooncake"
    assert trace.arrival_s[-1] == pytest.approx(59.0)  # 60 requests a second apart, not 16 hours
    assert trace.cached_tokens.tolist()[:3] == [0, 1024, 1024]  # 512-token blocks 0 and 1 seen before


@pytest.mark.parametrize("record,key", [(0, "input_length"), (0, "hash_ids"), (7, "output_length")])
def test_a_record_without_a_key_the_others_have_is_named_wherever_it_is(tmp_path, record, key):
    """The layout comes from every record: a first record without ``input_length`` is still Mooncake's,
    refused for the missing key, not read as another layout in seconds."""
    records = [dict(r) for r in MOONCAKE]
    del records[record][key]
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    with pytest.raises(InputError, match=f"record {record + 1} has no '{key}'"):
        Traffic.model_validate({"arrival": {"kind": "trace", "path": str(path)}}).read_trace()


def test_keys_servopt_does_not_read_may_come_and_go(tmp_path):
    records = [dict(r, **({"session_id": "abc"} if i % 2 else {})) for i, r in enumerate(MOONCAKE)]
    path = tmp_path / "conversation_trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    assert len(Traffic.model_validate({"arrival": {"kind": "trace", "path": str(path)}}).read_trace()) == len(MOONCAKE)


def test_millisecond_times_read_as_seconds_are_refused_until_the_unit_is_given(tmp_path):
    rows = [(t, 100, 10) for t in range(0, 60_000, 1000)]
    path = tmp_path / "t.csv"
    path.write_text("timestamp,input_tokens,output_tokens\n" + "".join(f"{t},{i},{o}\n" for t, i, o in rows))
    arrival = {"kind": "trace", "path": str(path)}
    with pytest.raises(InputError, match=r"1 s \(milliseconds.*0.001 s \(microseconds.*time_unit"):
        Traffic.model_validate({"arrival": arrival}).read_trace()
    trace = Traffic.model_validate({"arrival": {**arrival, "time_unit": "ms"}}).read_trace()
    assert trace.arrival_s[-1] == pytest.approx(59.0)
    # Epoch milliseconds are never seconds, whatever the rate.
    path.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{1.7e12 + t},100,10\n" for t, _, _ in rows))
    with pytest.raises(InputError, match="Unix timestamps in ms"):
        Traffic.model_validate({"arrival": arrival}).read_trace()


@pytest.mark.parametrize("stamps", [
    ["2023-11-16 18:17:03.9799600", "2023-11-16 18:17:04.0319600", "2023-11-16 18:17:05.2792970"],  # 2023
    ["2024-05-10 00:00:00.009930+00:00", "2024-05-10 00:00:00.060214+00:00", "2024-05-10 00:00:01.309297+00:00"],
])
def test_azure_llm_inference_traces_are_read(tmp_path, stamps):
    path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{s},{374 + i},{14 + i}\n"
                                                                           for i, s in enumerate(stamps)))
    trace = Traffic.model_validate({"arrival": {"kind": "trace", "path": str(path)}}).read_trace()
    assert trace.format == "azure" and trace.input_tokens.tolist() == [374, 375, 376]
    assert trace.output_tokens.tolist() == [14, 15, 16]
    first = np.datetime64(stamps[0][:26].replace(" ", "T"))
    last = np.datetime64(stamps[-1][:26].replace(" ", "T"))
    assert trace.arrival_s[-1] == pytest.approx((last - first) / np.timedelta64(1, "s"), abs=1e-6)


def test_trace_windows_replay_part_of_a_long_trace(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{t},100,10\n" for t in range(100)))
    arrival = {"kind": "trace", "path": str(path), "start_s": 10, "duration_s": 20}
    trace = Traffic.model_validate({"arrival": arrival}).read_trace()
    assert len(trace) == 20 and trace.arrival_s[0] == 0.0


# --- measured tables in the formats real tools write ----------------------------------------------
E2E_HEADER = ("id,backend,backend_version,model_path,system,mode,isl,osl,batch_size,tp_size,pp_size,"
              "attention_dp_size,silicon_ttft_ms,silicon_tpot_ms,silicon_concurrency\n")


def test_e2e_tables_accept_empty_or_1_for_no_pp_or_attention_dp(tmp_path, capsys):
    path = tmp_path / "e.csv"
    path.write_text(E2E_HEADER
                    + "a,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,agg,1024,128,8,2,,,154.2,18.0,8\n"
                    + "b,vllm,0.12.0rc1,Qwen/Qwen3-32B,h100_sxm,agg,1024,128,8.0,2.0,1.0,1,154.2,18.0,8.0\n"
                    + "c,vllm,0.12,Qwen/Qwen3-32B,h100_sxm,agg,1024,128,8,2,2,,154.2,18.0,8\n")
    code, out, err = cli(capsys, "validate", "--e2e", path, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["predicted"] == 3 and result["not_predicted"] == []  # "c" runs two pipeline stages


def test_e2e_tables_without_optional_columns_and_with_gaps(tmp_path, capsys):
    path = tmp_path / "e.csv"
    path.write_text("backend,model_path,system,isl,osl,tp_size,silicon_ttft_ms,silicon_tpot_ms,silicon_concurrency\n"
                    "vllm,Qwen/Qwen3-32B,h100_sxm,1024,128,2,154.2,18.0,8\n"
                    "vllm,Qwen/Qwen3-32B,h100_sxm,1024,128,2,154.2,18.0,\n")
    code, out, err = cli(capsys, "validate", "--e2e", path, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["predicted"] == 1
    assert "concurrency not recorded" in result["not_predicted"][0]["reason"]
    path.write_text("backend,model_path,system,isl,osl,silicon_ttft_ms,silicon_tpot_ms\nvllm,m,h100,1,1,1,1\n")
    assert_one_line_error(*cli(capsys, "validate", "--e2e", path)[::2], "e.csv", "lacks the column(s) tp_size")


def test_csv_reader_reads_what_spreadsheets_write(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbfa,b\r\n1,\"x, y\"\r\n\r\n2,z\r\n")
    frame = read_csv_table(path, "table")
    assert list(frame.columns) == ["a", "b"] and frame["b"].tolist() == ["x, y", "z"]
    path.write_text("a,a\n1,2\n")
    with pytest.raises(InputError, match="names column 'a' twice"):
        read_csv_table(path, "table")


def test_mooncake_prefix_hits_become_cached_tokens(tmp_path):
    from servopt.costmodels.serving.requests import draw_requests

    path = tmp_path / "trace.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in MOONCAKE) + "\n")
    traffic = Traffic.model_validate({"arrival": {"kind": "trace", "path": str(path)}})
    drawn = draw_requests(traffic, None, np.random.default_rng(0), max_model_len=8192, block_size=16,
                          prefix_caching=True)
    assert drawn.cached_tokens.tolist()[:3] == [0, 1024, 1024]
    off = draw_requests(traffic, None, np.random.default_rng(0), max_model_len=8192, block_size=16,
                        prefix_caching=False)
    assert off.cached_tokens.sum() == 0
