"""Capacity with redundancy: every point's P99s with one replica down (N-1), and the SLO on them."""

import json

import pytest
import yaml
from _optimizer_fixtures import TINY, serving  # noqa: F401

from servopt.optimizer._evaluate import Evaluator
from servopt.optimizer._problem import build_problem
from servopt.optimizer.cli import main
from servopt.optimizer.job import Job
from servopt.optimizer.workload import parse_workload
from servopt.results._report import N_MINUS_1_LABEL, write_results
from servopt.search_spaces import Candidate

N_MINUS_1 = {**TINY, "redundancy": 0.3, "slo": {"p99_ttft_s": 2.0, "p99_tpot_s": 0.1, "n_minus_1": True},
             "gpus": ["h100"], "budget": {"trials": 8}}


def test_job_reports_and_constrains_one_replica_down(tmp_path, serving):  # noqa: F811
    job = Job(parse_workload(N_MINUS_1, "test"), tmp_path / "out", name="n1")
    outcome = job.run(progress=False)
    data = job.collect()
    simulated = [t.record for t in data["trials"] if t.record.fidelity == "simulate"]
    assert simulated
    for record in simulated:
        # N+1 sizing: at least one replica beyond what the traffic needs.
        assert record.replicas >= 2 and record.n_minus_1 is not None
        # One replica fewer carries the same traffic: no faster than the whole fleet.
        assert record.n_minus_1["e2e_s"]["p99"] >= 0.9 * record.simulation["e2e_s"]["p99"]
        assert "slo_n_minus_1" in record.violations or record.feasible or record.reason
    assert outcome.front
    for number in outcome.front:
        assert data["rechecks"][number].n_minus_1 is not None and data["rechecks"][number].feasible
    paths = write_results(tmp_path / "results", data)
    header = paths["trials.csv"].read_text().splitlines()[0]
    assert "n_minus_1_p99_ttft_s" in header and "n_minus_1_saturated" in header
    assert "n_minus_1_p99_e2e_s" in paths["pareto.csv"].read_text().splitlines()[0]
    assert N_MINUS_1_LABEL in paths["report.md"].read_text() and N_MINUS_1_LABEL in paths["report.html"].read_text()
    assert "also with one replica down" in paths["report.md"].read_text()
    point = json.loads(paths["front.json"].read_text())["points"][0]
    assert point["metrics"]["n_minus_1_p99_ttft_s"] > 0


def test_single_replica_cannot_lose_one(serving):  # noqa: F811
    problem = build_problem(parse_workload({**N_MINUS_1, "space": {**TINY["space"], "replicas": 1}}, "test"))
    evaluator = Evaluator(problem)
    knobs = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "quantization": "bf16", "kv_cache_dtype": "auto",
             "max_num_seqs": 128, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
             "mode": "aggregated", "speculation": "off", "replicas": 1}
    outcome = evaluator.evaluate(problem.space.repair(Candidate(knobs)))
    record = outcome.record
    assert record.replicas == 1 and record.n_minus_1 is None
    assert outcome.constraints["slo_n_minus_1"] == 1.0 and "cannot lose one" in record.reason
    assert not record.feasible


def test_redundancy_alone_reports_without_constraining(serving):  # noqa: F811
    workload = {**N_MINUS_1, "slo": {"p99_ttft_s": 2.0}}
    problem = build_problem(parse_workload(workload, "test"))
    evaluator = Evaluator(problem)
    knobs = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "quantization": "bf16", "kv_cache_dtype": "auto",
             "max_num_seqs": 128, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
             "mode": "aggregated", "speculation": "off", "replicas": 2}
    outcome = evaluator.evaluate(problem.space.repair(Candidate(knobs)))
    assert outcome.record.n_minus_1 is not None and outcome.constraints["slo_n_minus_1"] == 0.0


def test_default_job_has_no_n_minus_1_columns(tmp_path, serving):  # noqa: F811
    job = Job(parse_workload({**TINY, "budget": {"trials": 4}}, "test"), tmp_path / "out", name="plain")
    job.run(progress=False)
    paths = write_results(tmp_path / "results", job.collect())
    assert "n_minus_1" not in paths["trials.csv"].read_text().splitlines()[0]
    assert N_MINUS_1_LABEL not in paths["report.md"].read_text()


@pytest.mark.parametrize("replicas", [1, 2])
def test_predict_shows_one_replica_down(tmp_path, capsys, replicas):
    workload = {**{k: TINY[k] for k in ("model", "traffic")}, "slo": {"p99_ttft_s": 2.0, "n_minus_1": True}}
    (tmp_path / "w.yaml").write_text(yaml.safe_dump(workload))
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"gpu": "h100", "replicas": replicas, "max_model_len": 4096}))
    args = ["predict", str(tmp_path / "w.yaml"), "--deployment", str(tmp_path / "d.yaml"), "--requests", "400"]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    text = capsys.readouterr().out
    if replicas == 1:
        assert doc["n_minus_1"] is None and "a single replica" in text
    else:
        assert doc["n_minus_1"]["ttft_s"]["p99"] >= doc["ttft_s"]["p99"] * 0.9
        assert "with 1 replica(s) left" in text and "SLO met with one replica down" in text
