"""Workload files: every malformed one is an error naming its key (exit code 2), never a crash."""

import copy

import pytest
from _optimizer_fixtures import TINY, serving, write_workload  # noqa: F401

from servopt.costmodels.errors import InputError
from servopt.optimizer._problem import build_problem
from servopt.optimizer.cli import main
from servopt.optimizer.defaults import default_workload
from servopt.optimizer.workload import load_workload, parse_workload


def with_changes(**changes):
    data = copy.deepcopy(TINY)
    for path, value in changes.items():
        node = data
        keys = path.split("__")
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        if value is DELETE:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value
    return data


DELETE = object()

FUZZ = [
    ("empty", "", "is empty"),
    ("broken yaml", "model: [llama\ntraffic: {", "not valid YAML at line"),
    ("a list", "- model\n- traffic\n", "must be a YAML mapping"),
    ("misspelled top key", with_changes(slos={"p99_ttft_s": 1}), "slos: unknown key (did you mean 'slo'?)"),
    ("misspelled nested key", with_changes(slo__p99_ttf_s=1.0), "slo.p99_ttf_s: unknown key (did you mean 'p99_ttft_s'?)"),
    ("missing model", with_changes(model=DELETE), "model: required key is missing"),
    ("missing traffic", with_changes(traffic=DELETE), "traffic: required key is missing"),
    ("wrong type", with_changes(budget__trials="many"), "budget.trials"),
    ("wrong type list", with_changes(gpus="h100"), "gpus"),
    ("negative rate", with_changes(traffic__arrival__rate_per_s=-3), "traffic.arrival.poisson.rate_per_s"),
    ("negative slo", with_changes(slo__p99_ttft_s=-1), "slo.p99_ttft_s"),
    ("zero slo", with_changes(slo__p99_tpot_s=0), "slo.p99_tpot_s"),
    ("negative redundancy", with_changes(redundancy=-0.5), "redundancy"),
    ("negative max gpus", with_changes(limits__max_gpus=-4), "limits.max_gpus"),
    ("negative accuracy", with_changes(accuracy__max_drop_pct=-1), "accuracy.max_drop_pct"),
    ("bad sampler", with_changes(sampler="cmaes"), "sampler"),
    ("bad objective", with_changes(objective__latency="p50"), "objective.latency"),
    ("unknown model", with_changes(model="llama-9-1b"), "model: unknown model 'llama-9-1b'"),
    ("unknown gpu", with_changes(gpus=["h100", "h900"]), "gpus.h900: unknown GPU 'h900'"),
    ("misspelled nested union key", with_changes(traffic__input_tokens__valeu=7), "fixed.valeu: unknown key (did you "
     "mean 'value'?)"),
    ("unknown knob", with_changes(space={"tensor_parallel": [1, 2]}), "space.tensor_parallel: unknown knob"),
    ("bad knob value", with_changes(space={"tp": [3]}), "space.tp"),
    ("unknown alternative", with_changes(alternatives=[{"model": "nope-1b", "accuracy_drop_pct": 2}]),
     "alternatives.0.model: unknown model"),
    ("alternative without accuracy", with_changes(alternatives=[{"model": "llama-3.2-3b"}]), "alternatives.0"),
    ("unknown accuracy override", with_changes(accuracy__overrides={"fp4": 1.0}), "accuracy.overrides"),
    ("unknown speculation", with_changes(speculation=[{"method": "medusa"}]), "speculation.0.method"),
    ("eagle without head", with_changes(speculation=[{"method": "eagle3"}]), "speculation.0"),
    ("no budget", with_changes(budget={"trials": None}), "budget"),
    ("too long max_model_len", with_changes(max_model_len=10_000_000), "max_model_len"),
    ("trace arrivals", with_changes(traffic={"arrival": {"kind": "trace", "path": "t.csv"}}), "traffic.arrival"),
]


@pytest.mark.parametrize("name, content, message", FUZZ, ids=[f[0] for f in FUZZ])
def test_malformed_workloads_exit_2_naming_the_key(tmp_path, capsys, name, content, message):
    path = write_workload(tmp_path / "w.yaml", content)
    code = main(["optimize", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert err.count("\n") == 1  # one line, no traceback


def test_impossible_slo_gives_an_explained_empty_front(tmp_path, capsys, serving):  # noqa: F811
    path = write_workload(tmp_path / "w.yaml", with_changes(slo={"p99_ttft_s": 1e-6}))
    code = main(["optimize", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 2
    assert "slo.p99_ttft_s = 1e-06 s: the lowest P99 TTFT predicted was" in out
    assert "cannot be met" in out
    report = (tmp_path / "out" / "report.md").read_text()
    assert "The front is empty" in report and "slo.p99_ttft_s" in report


def test_workload_defaults_and_gpu_prices():
    w = parse_workload(with_changes(gpus={"h100": {"price_per_gpu_hour": 1.5}, "a100": {}}), "test")
    problem = build_problem(w)
    assert problem.ctx.gpus["h100"].price_per_gpu_hour == 1.5
    assert "a100-80gb" in problem.ctx.gpus  # alias resolved, catalog price kept
    assert w.objective.latency == "e2e" and w.objective.cost == "usd_per_hour" and w.sampler == "nsga2"
    assert problem.ctx.max_model_len["llama-3.1-8b"] == 640  # the declared 512 + 128, exactly
    assert problem.max_model_len_basis["llama-3.1-8b"] == "covers the longest request: fixed prompt 512 + fixed output 128"


def test_alternative_accuracy_score():
    w = parse_workload(with_changes(alternatives=[{"model": "qwen3-8b", "accuracy_score": 0.8}],
                                    accuracy={"model_score": 0.85, "max_drop_pct": 10}), "test")
    problem = build_problem(w)
    assert problem.ctx.models["qwen3-8b"].accuracy_drop_pct == pytest.approx(100 * (1 - 0.8 / 0.85))
    assert problem.space.domain("model").values() == ["llama-3.1-8b", "qwen3-8b"]


def test_shipped_examples_and_default_load():
    from pathlib import Path

    examples = sorted((Path(__file__).parent.parent / "examples").glob("*.yaml"))
    assert {p.stem for p in examples} >= {"chat", "rag_long_context", "batch_summarization"}
    for path in examples:
        build_problem(load_workload(path))
    build_problem(default_workload())


def test_unreadable_file(tmp_path):
    with pytest.raises(InputError, match="cannot be read"):
        load_workload(tmp_path / "missing.yaml")
