"""``servopt predict``: output as a user sees it, and bad files as one line with exit code 2."""

import json

import pytest

from servopt.optimizer.cli import main

WORKLOAD = """model: llama-3.1-8b
traffic:
  arrival: {kind: poisson, rate_per_s: 4}
  input_tokens: {kind: lognormal, mean: 1024, sigma: 0.5}
  output_tokens: {kind: fixed, value: 128}
slo: {p99_ttft_s: 2.0, p99_tpot_s: 0.1}
"""
DEPLOYMENT = """gpu: h100
tp: 1
replicas: 1
quantization: bf16
kv_cache_dtype: auto
max_num_seqs: 256
max_num_batched_tokens: 8192
enable_chunked_prefill: true
gpu_memory_utilization: 0.9
speculative: {method: ngram, num_speculative_tokens: 4}
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "w.yaml").write_text(WORKLOAD)
    (tmp_path / "d.yaml").write_text(DEPLOYMENT)
    return tmp_path


def test_predict_prints_one_json_object_with_the_distributions(files, capsys):
    code = main(["predict", str(files / "w.yaml"), "--deployment", str(files / "d.yaml"), "--requests", "600",
                 "--seed", "3", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(out[key]) == {"mean", "p50", "p90", "p99"}
        assert 0 < out[key]["p50"] <= out[key]["p99"]
    assert out["saturated"] is False and out["requests_per_s"] > 3 and out["output_tokens_per_s"] > 300
    assert out["num_requests"] == 600 and isinstance(out["profile_calibrated"], bool) and out["profile"]


def test_predict_renders_a_readable_summary(files, capsys):
    assert main(["predict", str(files / "w.yaml"), "--deployment", str(files / "d.yaml"), "--requests", "300"]) == 0
    text = capsys.readouterr().out
    assert "TTFT" in text and "p99" in text and "Profile:" in text and "SLO" in text


def test_predict_says_plainly_when_the_deployment_is_saturated(files, capsys):
    (files / "w.yaml").write_text(WORKLOAD.replace("rate_per_s: 4", "rate_per_s: 80"))
    assert main(["predict", str(files / "w.yaml"), "--deployment", str(files / "d.yaml"), "--requests", "2000"]) == 0
    assert "SATURATED" in capsys.readouterr().out
    assert main(["predict", str(files / "w.yaml"), "--deployment", str(files / "d.yaml"), "--analytic", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["saturated"] is True and out["ttft_s"]["p99"] is None


def test_trace_paths_are_relative_to_the_workload_file(files, capsys, monkeypatch, tmp_path_factory):
    (files / "t.csv").write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i / 4},{300},{40}\n"
                                                                                   for i in range(80)))
    (files / "w.yaml").write_text(WORKLOAD.replace("{kind: poisson, rate_per_s: 4}", "{kind: trace, path: t.csv}"))
    monkeypatch.chdir(tmp_path_factory.mktemp("elsewhere"))
    assert main(["predict", str(files / "w.yaml"), "--deployment", str(files / "d.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["num_measured"] == 80


@pytest.mark.parametrize("workload,deployment,message", [
    (WORKLOAD.replace("rate_per_s: 4", "rate_per_s: -4"), DEPLOYMENT, "traffic.arrival.poisson.rate_per_s"),
    (WORKLOAD.replace("{kind: fixed, value: 128}", "{kind: fixed, value: 0}"), DEPLOYMENT, "output_tokens"),
    (WORKLOAD, DEPLOYMENT.replace("gpu: h100", "gpu: l4").replace("speculative: {method: ngram, num_speculative_tokens: 4}",
                                                                     "max_model_len: 8192"), "does not fit in memory"),
    (WORKLOAD.replace("{kind: poisson, rate_per_s: 4}", "{kind: trace, path: missing.csv}"), DEPLOYMENT,
     "missing.csv' does not exist"),
    (WORKLOAD, DEPLOYMENT.replace("tp: 1", "tp: 0"), "deployment file"),
    (WORKLOAD, DEPLOYMENT.replace("tp: 1", "tp_size: 1"), "tp_size: unknown key"),
])
def test_bad_files_get_one_line_naming_the_field_and_exit_code_2(files, capsys, workload, deployment, message):
    (files / "w.yaml").write_text(workload.replace("llama-3.1-8b", "llama-3.1-70b") if "l4" in deployment else workload)
    (files / "d.yaml").write_text(deployment)
    code = main(["predict", str(files / "w.yaml"), "--deployment", str(files / "d.yaml"), "--requests", "50"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_shipped_deployment_examples_predict(capsys):
    from pathlib import Path

    examples = Path(__file__).resolve().parents[1] / "examples"
    for deployment in sorted((examples / "deployments").glob("*.yaml")):
        assert main(["predict", str(examples / "chat.yaml"), "--deployment", str(deployment),
                     "--requests", "400", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["ttft_s"]["p99"] > 0
