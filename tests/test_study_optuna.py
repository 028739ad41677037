"""The study as Optuna and optuna-dashboard see it: named metrics, real values, constraints, flat
attributes, and a trial budget that two workers share exactly."""

import json
import subprocess
import sys
import time
import urllib.request

import optuna
import pytest
from _optimizer_fixtures import TINY, serving  # noqa: F401
from _postgres import free_port

from servopt.optimizer._storage import journal_path, open_storage
from servopt.optimizer.job import Job
from servopt.optimizer._evaluate import CONSTRAINT_GROUPS
from servopt.optimizer.study import CONSTRAINT_NAMES_ATTR, BudgetSpent, TrialBudget
from servopt.optimizer.workload import parse_workload

# TP 4 breaks the two-GPU fleet limit before anything is predicted (pruned; no repair lowers a TP; the
# budget outnumbers the 24 points with TP 1, so the sampler, which prefers points that break no rule,
# must propose some);
# the TTFT target is tight enough that some simulated trials miss it (complete, infeasible, with
# their predicted values). NSGA-II alone: the whole-space screen makes trials only of deployments it
# simulates (tests/test_screen.py).
WORKLOAD = {**TINY, "sampler": "nsga2", "space": {**TINY["space"], "quantization": ["bf16", "fp8", "gptq"], "tp": [1, 4], "headroom": 0.0,
                              "kv_cache_dtype": "auto", "enable_chunked_prefill": True},
            "checkpoints": {"gptq": "hugging-quants/Meta-Llama-3.1-8B-Instruct-GPTQ-INT4"},
            "accuracy": {"max_drop_pct": 10.0}, "limits": {"max_gpus": 2},
            "slo": {"p99_ttft_s": 0.12, "p99_tpot_s": 0.1}, "budget": {"trials": 30}}


@pytest.fixture(scope="module")
def finished_job(tmp_path_factory):
    job = Job(parse_workload(WORKLOAD, "test"), tmp_path_factory.mktemp("study") / "out", name="tiny")
    job.run(progress=False)
    return job


@pytest.fixture(scope="module")
def study(finished_job):
    return optuna.load_study(study_name=finished_job.study_name, storage=open_storage(finished_job.storage_url))


def test_metric_names_and_no_placeholder_values(study):
    assert study.metric_names == ["usd_per_hour", "p99_e2e_s"]
    values = [v for t in study.trials if t.values for v in t.values]
    assert values and max(values) < 1e5


def test_infeasible_trials_keep_predictions_or_are_pruned_with_the_reason(study):
    states = {t.state for t in study.trials}
    assert states == {optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED}
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned and all(t.values is None and t.user_attrs["reason"] for t in pruned)
    missed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE and not t.user_attrs["feasible"]]
    assert missed, "the tight TTFT target should leave some simulated trials infeasible"
    for t in missed:
        assert t.values[1] == pytest.approx(t.user_attrs["p99_e2e_s"])  # the prediction, not a placeholder
        assert t.user_attrs["p99_ttft_s"] > 0.12 and "slo" in t.user_attrs["violated"]


def test_constraints_in_optunas_form(study):
    names = study.user_attrs[CONSTRAINT_NAMES_ATTR]
    assert names == ["config", "memory", "accuracy", "saturated", "slo"]
    for t in study.trials:
        stored = t.system_attrs["constraints"]  # the list Optuna's samplers and optuna-dashboard read
        assert len(stored) == len(names)
        assert list(t.constraints.values()) == stored
        assert (max(stored) <= 0) == t.user_attrs["feasible"]
        broken = {name for name, value in zip(names, stored, strict=True) if value > 0}
        rules = set(filter(None, t.user_attrs["violated"].split(", ")))
        assert broken == {group for group, members in CONSTRAINT_GROUPS.items() if rules & set(members)}


def test_flat_attributes_filter_trials(study):
    frame = study.trials_dataframe(attrs=("number", "state", "user_attrs"))
    for key in ("gpu", "tp", "quantization", "model", "usd_per_hour", "usd_per_output_mtoken", "usd_per_total_mtoken",
                "gpus_used", "gpus_rented", "p99_ttft_s", "p99_tpot_s", "feasible", "reason", "fidelity"):
        assert f"user_attrs_{key}" in frame, key
    too_big = frame[frame["user_attrs_tp"] == 4]
    assert len(too_big) and set(too_big["state"]) == {"PRUNED"}
    # The model attribute names the weights served: the base model, or the gptq checkpoint.
    assert set(frame["user_attrs_model"]) == {"meta-llama/Llama-3.1-8B", WORKLOAD["checkpoints"]["gptq"]}


def test_same_seed_and_trials_give_the_same_front(finished_job, tmp_path, serving):  # noqa: F811
    from servopt.results import write_results

    again = Job(parse_workload(WORKLOAD, "test"), tmp_path / "again", name="tiny")
    again.run(progress=False)
    first = write_results(tmp_path / "first", finished_job.collect())["pareto.csv"].read_text()
    second = write_results(tmp_path / "second", again.collect())["pareto.csv"].read_text()
    assert first == second and len(first.splitlines()) > 1


def test_budget_slot_goes_to_the_lower_trial_number():
    study = optuna.create_study(directions=["minimize", "minimize"])
    budget = TrialBudget(2)
    first, second, third = study.ask(), study.ask(), study.ask()  # three workers start at once
    budget.claim(first)
    budget.claim(second)
    with pytest.raises(BudgetSpent):
        budget.claim(third)
    assert "not run" in third.user_attrs["reason"]
    assert budget.remaining(study) == 2


def test_dashboard_shows_metric_names_and_constraints(finished_job, study):
    pytest.importorskip("optuna_dashboard")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-c", "import sys, optuna_dashboard; optuna_dashboard.run_server(sys.argv[1], "
         "host='127.0.0.1', port=int(sys.argv[2]))", str(journal_path(finished_job.storage_url)), str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 30
        while True:
            try:
                studies = json.load(urllib.request.urlopen(f"{base}/api/studies", timeout=5))["study_summaries"]
                break
            except OSError:
                if time.time() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.2)
        (summary,) = [s for s in studies if s["study_name"] == finished_job.study_name]
        detail = json.load(urllib.request.urlopen(f"{base}/api/studies/{summary['study_id']}?after=0", timeout=30))
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert detail["objective_names"] == ["usd_per_hour", "p99_e2e_s"]
    assert len(detail["trials"]) == len(study.trials)
    assert all(len(t["constraints"]) == 5 for t in detail["trials"])
    assert any(max(t["constraints"]) > 0 for t in detail["trials"])
    keys = {a["key"] for a in detail["union_user_attrs"]}
    assert {"gpu", "quantization", "p99_ttft_s", "usd_per_hour", "feasible", "reason"} <= keys
