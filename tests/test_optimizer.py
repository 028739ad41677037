"""The study: a tiny job runs end to end, resumes after kill -9, and two processes share a study."""

import json
import signal
import time
from collections import Counter

import optuna
import pytest
from _optimizer_fixtures import TINY, run_cli_process, serving, write_workload  # noqa: F401

from servopt.costmodels.errors import InputError
from servopt.optimizer._storage import journal_url, open_storage
from servopt.optimizer.job import Job
from servopt.optimizer.study import DEPLOYMENT_ATTR, FINISHED, SAME_AS_ATTR, pareto_mask
from servopt.optimizer.workload import parse_workload


def tiny_job(tmp_path, **changes):
    data = {**TINY, **changes}
    return Job(parse_workload(data, "test"), tmp_path / "out", name="tiny")


def test_tiny_job_records_every_trial_with_a_reason(tmp_path, serving):  # noqa: F811
    job = tiny_job(tmp_path, space={**TINY["space"], "quantization": ["bf16", "gptq"]},
                   checkpoints={"gptq": "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w4a16"})
    outcome = job.run(progress=False)
    data = job.collect()
    assert outcome.trials == 12 == len(data["trials"])
    for trial in data["trials"]:
        record = trial.record
        assert record.fidelity in ("precheck", "estimate", "simulate")
        assert record.feasible == (not record.violations)
        if not record.feasible:
            assert record.reason
    # gptq is over the accuracy budget whatever else is chosen: left out before sampling, with why.
    assert not [t for t in data["trials"] if t.record.knobs["quantization"] == "gptq"]
    assert "left out: gptq: expected accuracy drop" in data["space"]["quantization"]
    # Drawn points are repaired onto what vLLM accepts; the record says what moved.
    for trial in data["trials"]:
        knobs = trial.record.knobs
        assert "batch_limits" not in trial.record.violations
        assert knobs["enable_chunked_prefill"] or knobs["max_num_batched_tokens"] >= trial.record.deployment.spec.max_model_len
        for knob, (drawn, scored) in trial.record.repaired.items():
            assert knobs[knob] == scored != drawn
    assert outcome.front and set(outcome.front) <= set(data["rechecks"])
    assert all(data["rechecks"][n].requests == 400 for n in outcome.front)
    # No trial is spent on a deployment an earlier trial scored (the sampler compares repaired deployments).
    scored = [(t.record.model, t.record.deployment.spec.model_dump_json()) for t in data["trials"]]
    assert len(set(scored)) == len(scored)


def test_rerun_resumes_without_repeating(tmp_path, serving):  # noqa: F811
    job = tiny_job(tmp_path)
    job.run(progress=False)
    first = {t.number: t.values for t in job.collect()["trials"]}
    more = tiny_job(tmp_path, budget={"trials": 20})
    outcome = more.run(progress=False)
    second = {t.number: t.values for t in more.collect()["trials"]}
    assert outcome.new_trials == 8 and len(second) == 20
    assert all(second[n] == v for n, v in first.items())


def test_other_workload_in_the_same_folder_is_refused(tmp_path, serving):  # noqa: F811
    tiny_job(tmp_path).run(progress=False)
    with pytest.raises(InputError, match="another job"):
        tiny_job(tmp_path, slo={"p99_ttft_s": 5.0}).run(progress=False)


def test_pareto_mask():
    import numpy as np

    points = np.array([[1, 5], [2, 3], [3, 3], [2, 6], [4, 1]])
    assert pareto_mask(points).tolist() == [True, True, False, False, True]


def _finished_trials(journal):
    """Trial number -> its values (None when pruned) of every finished trial, and the states."""
    if not journal.exists():
        return {}, {}
    trials = [t for s in optuna.get_all_study_summaries(open_storage(journal_url(journal)))
              for t in optuna.load_study(study_name=s.study_name, storage=open_storage(journal_url(journal))).trials]
    finished = {t.number: t.values for t in trials if t.state in FINISHED}
    return finished, Counter(t.state.name for t in trials)


def test_kill_9_then_rerun_keeps_every_finished_trial(tmp_path):
    workload = write_workload(tmp_path / "w.yaml", {**TINY, "budget": {"trials": 40}})
    out = tmp_path / "out"
    proc = run_cli_process(["optimize", str(workload), "--out", str(out), "--no-progress"], tmp_path, wait=False)
    journal = out / "study.journal"
    deadline = time.time() + 300  # generous: CI and loaded machines start slowly
    while time.time() < deadline:
        if len(_finished_trials(journal)[0]) >= 8:
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before, _ = _finished_trials(journal)
    assert 8 <= len(before) < 40
    rerun = run_cli_process(["optimize", str(workload), "--out", str(out), "--no-progress", "--json"], tmp_path)
    assert rerun.returncode == 0, rerun.stderr
    after, states = _finished_trials(journal)
    assert len(after) >= 40
    assert all(after[n] == v for n, v in before.items())
    assert states["RUNNING"] == 0
    assert json.loads(rerun.stdout)["trials"] == len(after)


def test_a_trial_left_unnamed_by_a_killed_worker_is_failed(tmp_path, monkeypatch):
    # Killed while the sampler proposed its point: the trial is RUNNING and names no worker.
    from servopt.optimizer import study as study_module

    study = optuna.create_study(storage=open_storage(journal_url(tmp_path / "s.journal")))
    study.ask()
    assert study_module.fail_dead_workers_trials(study) == 0  # it may still be naming itself
    monkeypatch.setattr(study_module, "UNNAMED_TRIAL_S", 0.0)
    time.sleep(0.01)
    assert study_module.fail_dead_workers_trials(study) == 1
    assert [t.state.name for t in study.trials] == ["FAIL"]


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
@pytest.mark.parametrize("sampler", ["nsga2", "screen"])
def test_two_processes_share_one_study(tmp_path, kind, sampler):
    workload = write_workload(tmp_path / "w.yaml", {**TINY, "budget": {"trials": 30}, "sampler": sampler})
    storage = journal_url(tmp_path / "shared.journal") if kind == "journal" else f"sqlite:///{tmp_path / 'shared.db'}"
    procs = [run_cli_process(["optimize", str(workload), "--study", "shared", "--storage", storage,
                              "--out", str(tmp_path / f"out{i}"), "--no-progress", "--json"], tmp_path, wait=False)
             for i in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    trials = optuna.load_study(study_name="shared", storage=open_storage(storage)).trials
    numbers = [t.number for t in trials]
    states = Counter(t.state.name for t in trials)
    workers = {t.user_attrs.get("worker") for t in trials}
    not_run = [t.user_attrs["reason"] for t in trials if t.state.name == "FAIL"]
    assert sorted(numbers) == list(range(len(numbers)))  # no lost or duplicated trial numbers
    # Exactly the budget finishes; a trial that lost the race for the last slot is failed, not run.
    # The processes draw the same proposals (one seed): a trial whose deployment the other drew first
    # takes that trial's outcome, so no deployment is scored twice.
    assert states["COMPLETE"] + states["PRUNED"] == 30
    assert states["FAIL"] == len(not_run) <= 1 and all("not run" in r for r in not_run)
    scored = [t.system_attrs[DEPLOYMENT_ATTR] for t in trials if t.state.name != "FAIL" and SAME_AS_ATTR not in t.user_attrs]
    assert len(set(scored)) == len(scored)
    # NSGA-II's workers run side by side; the screen's trials go one at a time, cheapest first, so
    # whichever process finishes its screening plan first may run them all.
    assert len(workers) == 2 or sampler == "screen"


def test_simulator_errors_are_recorded_not_raised(tmp_path, serving, monkeypatch):  # noqa: F811
    def refuse(*args, **kwargs):
        raise InputError("this deployment cannot be simulated")

    monkeypatch.setattr(serving, "simulate_compiled", refuse)
    job = tiny_job(tmp_path, budget={"trials": 5})
    outcome = job.run(progress=False)
    records = [t.record for t in job.collect()["trials"]]
    assert outcome.trials == 5 and not outcome.front
    assert any("simulator: this deployment cannot be simulated" in r.reason for r in records)
    assert all(not r.feasible for r in records if r.fidelity == "estimate")


def test_front_keeps_one_of_each_group_of_identical_predictions():
    import optuna

    from servopt.optimizer.study import final_front, front_equivalents, save_recheck

    study = optuna.create_study(directions=["minimize", "minimize"])
    for number, values in [(3, [4.0, 9.0]), (5, [4.0, 9.0]), (7, [8.0, 2.0]), (9, [9.0, 3.0]), (11, [4.0, 9.0])]:
        save_recheck(study, number, {"feasible": True, "values": values})
    save_recheck(study, 13, {"feasible": False, "values": [1.0, 1.0]})
    assert final_front(study) == [3, 7]
    assert front_equivalents(study) == {3: [5, 11], 7: []}


def test_a_branch_no_trial_took_yet_is_proposed_whole_and_scored_as_ranked():
    # Trial 0 takes branch b; later proposals come from the parameters every trial had (mode, y),
    # so branch a's x must be drawn for the chooser to rank an a-point, and the trial must get it.
    from servopt.optimizer._sampler import DistinctSampler

    ranked = []

    def choose(study, proposals):
        for i, proposal in enumerate(proposals):
            if proposal["mode"] == "a" and "x" in proposal:
                ranked.append(proposal["x"])
                return i
        return 0

    def complete(params, rng):
        out = dict(params)
        branch_knob = "x" if out["mode"] == "a" else "y"
        out.setdefault(branch_knob, int(rng.integers(1, 4)))
        return out

    def objective(trial):
        mode = trial.suggest_categorical("mode", ["a", "b"])
        return trial.suggest_int("x" if mode == "a" else "y", 1, 3)

    sampler = DistinctSampler(optuna.samplers.RandomSampler(seed=0), lambda p: tuple(sorted(p.items())), seed=0,
                              choose=choose, complete=complete)
    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial({"mode": "b", "y": 1})
    study.optimize(objective, n_trials=4)
    later = study.trials[1:]
    assert [t.params["mode"] for t in later] == ["a"] * 3
    assert [t.params["x"] for t in later] == ranked


def test_the_default_job_searches_both_serving_modes(tmp_path):
    job = tiny_job(tmp_path, space={"mode": ["aggregated", "disaggregated"], "speculation": "off"},
                   budget={"trials": 24})
    job.run(progress=False)
    modes = Counter(t.record.deployment.spec.disaggregation is None for t in job.collect()["trials"])
    assert modes[True] and modes[False], modes
