"""The front's re-check: cheapest first, the runners-up of a failed point come up, nothing cheaper is left unchecked."""

import optuna
from _optimizer_fixtures import TINY

from servopt.optimizer._evaluate import Evaluator
from servopt.optimizer._problem import build_problem
from servopt.optimizer.job import RECHECK_STATEMENT_ATTR, Job
from servopt.optimizer.study import (
    RECORD_ATTR,
    final_front,
    front_candidates,
    front_equivalents,
    recheck,
    stored_rechecks,
)
from servopt.optimizer.workload import parse_workload

WORKLOAD = parse_workload({**TINY, "fidelity": {"final_requests": 400}}, "test")  # SLO: P99 TTFT 2 s


def record(number, feasible=True, ttft=(0.5, 0.4), violations=None):
    """Trial ``number``'s record: simulated, its P99 TTFT and the lower end of that P99's interval."""
    p99, low = ttft
    return {"fidelity": "simulate", "feasible": feasible, "violations": violations or {}, "model": f"trial {number}",
            "simulation": {"ttft_s": {"p99": p99}, "p99_ci_s": {"ttft": [low, 2 * p99 - low]}}}


TRIALS = [  # (cost, P99) at search fidelity, and the record
    ((10.0, 1.0), record(0)),  # the search's cheapest
    ((10.0, 1.2), record(1)),  # same cost, slower: dominated by 0
    ((12.0, 0.8), record(2)),  # on the search's front
    ((10.0, 1.3), record(3, False, (2.1, 1.9), {"slo_ttft": 0.05})),  # misses TTFT within its P99's interval
    ((8.0, 1.0), record(4, False, (2.6, 2.3), {"slo_ttft": 0.3})),  # misses TTFT beyond its interval
    ((15.0, 2.0), record(5)),  # dominated by 2
    ((10.0, 1.2), record(6)),  # predicted exactly as 1
]


def constructed_study():
    study = optuna.create_study(directions=["minimize", "minimize"])
    for values, rec in TRIALS:
        study.add_trial(optuna.trial.create_trial(values=list(values), user_attrs={RECORD_ATTR: rec},
                                                  state=optuna.trial.TrialState.COMPLETE))
    return study


def recheck_with(tmp_path, monkeypatch, verdicts):
    """Re-check the constructed study, each trial's re-check giving ``verdicts[trial] = (passes,
    P99)``; returns the study and the trials each round re-checked."""
    job = Job(WORKLOAD, tmp_path / "out", cores=1)
    rounds = []

    def rechecks(records):
        batch = [int(r["model"].split()[1]) for r in records]
        rounds.append(batch)
        return [{"requests": 400, "feasible": verdicts[n][0], "values": [TRIALS[n][0][0], verdicts[n][1]]}
                for n in batch]

    monkeypatch.setattr(job, "_rechecks", rechecks)
    study = constructed_study()
    heard = []
    assert job.recheck_front(study, on_round=heard.append) == sum(map(len, rounds))
    # A progress display hears each round's batch before it runs, then after each re-check what is
    # left of it, and at the end the front the job reports.
    assert [r.next_batch for r in heard] == [*(left for r in rounds for left in range(len(r), 0, -1)), 0]
    assert [r.rechecked for r in heard] == list(range(sum(map(len, rounds)) + 1))
    assert heard[-1].front == len(final_front(study))
    assert heard[-1].failed == sum(not r["feasible"] for r in stored_rechecks(study).values())
    return study, rounds


def test_candidates_are_the_feasible_and_those_within_their_interval_cheapest_first():
    candidates = front_candidates(constructed_study(), WORKLOAD.slo)
    assert [c.number for c in candidates] == [0, 1, 3, 2, 5]  # 4 misses beyond its interval
    assert [c.feasible for c in candidates] == [True, True, False, True, True]
    assert next(c for c in candidates if c.number == 1).equivalents == (6,)


def test_when_the_cheapest_fails_the_points_it_dominated_come_up(tmp_path, monkeypatch):
    study, rounds = recheck_with(tmp_path, monkeypatch, {0: (False, 1.1), 1: (True, 1.25), 2: (True, 0.85)})
    # 3 ties 1 on cost and is slower, 5 is slower and dearer than 2: neither is re-checked.
    assert rounds == [[0, 2], [1]]
    assert final_front(study) == [1, 2] and front_equivalents(study) == {1: [6], 2: []}
    statement = study.user_attrs[RECHECK_STATEMENT_ATTR]
    assert statement["cheapest_passing"] == 10.0 and statement["failed"] == 1 and statement["settled"]
    assert (statement["candidates"], statement["within_interval"], statement["rechecked"]) == (5, 1, 3)


def test_a_point_within_its_interval_of_the_slo_comes_up_when_the_feasible_ones_fail(tmp_path, monkeypatch):
    verdicts = {0: (False, 1.1), 1: (False, 1.3), 2: (True, 0.85), 3: (True, 1.35)}
    study, rounds = recheck_with(tmp_path, monkeypatch, verdicts)
    assert rounds == [[0, 2], [1], [3]]
    assert sorted(final_front(study)) == [2, 3]
    assert study.user_attrs[RECHECK_STATEMENT_ATTR]["cheapest_passing"] == 10.0


def test_points_that_beat_a_passing_point_slower_than_its_search_come_up_one_after_another(tmp_path, monkeypatch):
    # 0 and 2 pass, but slower than the search said, so 1 (0's cost, faster) is re-checked; it
    # fails, so 3 is; it passes, slower than 5's search value, so 5 is re-checked last.
    verdicts = {0: (True, 2.2), 2: (True, 2.5), 1: (False, 1.4), 3: (True, 2.3), 5: (True, 1.0)}
    study, rounds = recheck_with(tmp_path, monkeypatch, verdicts)
    assert rounds == [[0, 2], [1], [3], [5]]
    assert sorted(final_front(study)) == [0, 5]


def test_rechecks_on_several_cores_give_what_one_core_gives_and_the_bar_counts_the_jobs_front(tmp_path, monkeypatch,
                                                                                               capsys):
    import servopt.optimizer.job as job_module

    rounds_in_parallel = []
    pool = job_module.recheck_pool

    def counting_pool(processes):
        rounds_in_parallel.append(processes)
        return pool(processes)

    monkeypatch.setattr(job_module, "recheck_pool", counting_pool)
    job = Job(parse_workload(TINY, "test"), tmp_path / "out", name="tiny", cores=2)
    outcome = job.run(progress=True)
    bars = capsys.readouterr().err.replace("\r", "\n").splitlines()
    # The search bar counts its own front by another name; the re-check bar's front is the job's.
    assert any("search_front=" in line for line in bars if line.startswith("optimize"))
    rechecking = [line for line in bars if line.startswith("re-check")]
    assert f"front={len(outcome.front)}, failed=" in rechecking[-1] and f"{outcome.rechecked}/{outcome.rechecked}" in rechecking[-1]
    assert rounds_in_parallel == [2] * len(rounds_in_parallel) and rounds_in_parallel
    study = job.open_study(create=False)
    alone = Evaluator(build_problem(job.workload))  # a fresh process's scorer, on one core
    by_number = {t.number: t.user_attrs[RECORD_ATTR] for t in study.trials if RECORD_ATTR in t.user_attrs}
    for number, result in stored_rechecks(study).items():
        again = recheck(alone.problem, by_number[number], alone)
        assert (again["feasible"], again["values"]) == (result["feasible"], result["values"])
