"""The whole-space screen: every deployment estimated, the front simulated cheapest first, as trials
of the Optuna study; a space too large to screen falls back to the sampler and says so."""

import optuna
import pytest
from _optimizer_fixtures import TINY

from servopt.optimizer._evaluate import SLO_CONSTRAINTS, Evaluator
from servopt.optimizer._problem import build_problem
from servopt.optimizer._screen import count_points, overshoot, plan_screen, screen_grid
from servopt.optimizer._storage import open_storage
from servopt.optimizer.job import Job
from servopt.optimizer.study import RECORD_ATTR, SCREEN_ATTR, SCREENED_ATTR
from servopt.optimizer.workload import parse_workload
from servopt.results import write_results
from servopt.search_spaces import SearchSpace, example_context

# Priced per GPU used, so that fleets differ in cost and a cheap simulated one can rule out dearer ones.
SMALL = {**TINY, "sampler": "screen", "pricing": {"whole_nodes": False}, "budget": {"trials": 200},
         "space": {"mode": "aggregated", "speculation": "off", "tp": [1, 2], "quantization": ["bf16", "fp8"],
                   "kv_cache_dtype": "auto", "max_num_seqs": [32, 128], "max_num_batched_tokens": 8192,
                   "enable_chunked_prefill": True, "headroom": [0.0, 1.0, 2.0]}}


def _study(job):
    return optuna.load_study(study_name=job.study_name, storage=open_storage(job.storage_url))


@pytest.fixture(scope="module")
def screened_job(tmp_path_factory):
    job = Job(parse_workload(SMALL, "small"), tmp_path_factory.mktemp("screen") / "out", name="small")
    job.run(progress=False)
    return job


def test_the_grid_lists_every_point_of_a_small_space_once():
    # Both serving modes: the conditional knobs (tp; each side's instances and TP) count where active.
    space = SearchSpace(example_context(gpus=("h100", "a100-80gb")), {
        "tp": [1, 2], "prefill_instances": [1, 2], "decode_instances": 1, "prefill_tp": [1, 2], "decode_tp": 1,
        "quantization": ["bf16", "fp8"], "kv_cache_dtype": "auto", "max_num_seqs": [32, 128],
        "max_num_batched_tokens": 8192, "enable_chunked_prefill": True, "speculation": "off", "headroom": [0.0, 1.0]})
    grid = screen_grid(space)
    listed = [tuple(sorted(c.values.items())) for c in space.enumerate(grid)]
    every = [c.key for c in space.enumerate()]
    assert sorted(listed) == sorted(every) and len(set(listed)) == len(listed)
    # 2 GPUs x (aggregated: 2 TPs + disaggregated: 2 prefill instances x 2 prefill TPs) x 2 x 2 x 2 headrooms
    assert count_points(space, grid) == len(listed) == 2 * (2 + 4) * 2 * 2 * 2


def test_a_range_too_wide_to_list_is_screened_at_powers_of_two_and_counted():
    space = SearchSpace(example_context(gpus=("h100",)), {"mode": "aggregated", "tp": 1, "quantization": "bf16",
                                                         "kv_cache_dtype": "auto", "enable_chunked_prefill": True,
                                                         "speculation": "off", "headroom": 0.0})
    grid = screen_grid(space)
    assert grid["max_num_seqs"] == [8, 16, 32, 64, 128, 256, 512, 1024]
    assert grid["max_num_batched_tokens"] == [256, 512, 1024, 2048, 4096, 8192, 16384, 32768]
    assert count_points(space, grid) == 64 == len(list(space.enumerate(grid)))


def test_the_plan_counts_every_distinct_deployment_once():
    # Without chunked prefill a 512-token budget cannot hold a 640-token request: a rule broken before
    # the fleet is sized, at every headroom (the screen previews one headroom of those).
    problem = build_problem(parse_workload({**SMALL, "space": {**SMALL["space"], "max_num_batched_tokens": 512,
                                                               "enable_chunked_prefill": [True, False]}}, "limited"))
    evaluator = Evaluator(problem)
    plan = plan_screen(evaluator)
    previews = [evaluator.preview(c) for c in problem.space.enumerate(screen_grid(problem.space))]
    assert plan.deployments == len({p.key for p in previews})
    assert plan.ruled_out == len({p.key for p in previews if p.violations}) > 0
    assert plan.candidates and plan.deployments == plan.ruled_out + plan.out_of_reach + len(plan.candidates)


def test_every_screened_trial_is_a_trial_of_the_study_and_the_counts_are_recorded(screened_job):
    study = _study(screened_job)
    covered = study.user_attrs[SCREEN_ATTR]
    trials = study.get_trials(deepcopy=False)
    assert trials and all(t.user_attrs.get(SCREENED_ATTR) for t in trials)
    assert all(t.user_attrs[RECORD_ATTR]["fidelity"] == "simulate" for t in trials)
    assert covered["simulated"] == len(trials) and covered["left"] == 0 and "fallback" not in covered
    assert covered["simulated"] + covered["dropped"] == covered["candidates"]
    assert covered["candidates"] + covered["out_of_reach"] + covered["ruled_out"] == covered["deployments"]
    assert covered["points"] == 2 * 2 * 2 * 2 * 3 and covered["dropped"] > 0  # the screen saved simulations


def test_no_dropped_deployment_could_have_beaten_the_front(screened_job):
    study = _study(screened_job)
    plan = plan_screen(Evaluator(screened_job.problem))
    simulated = {t.system_attrs["deployment"] for t in study.trials}
    feasible = [(t.values, t.user_attrs[RECORD_ATTR]["accuracy_drop_pct"] or 0.0) for t in study.trials
                if t.user_attrs[RECORD_ATTR]["feasible"]]
    dropped = [s for s in plan.candidates if s.key not in simulated]
    assert dropped
    for s in dropped:  # a simulated feasible deployment costs no more than its bound and is no slower
        assert any(v[0] <= s.optimistic[0] and v[1] <= s.optimistic[1] and drop <= s.accuracy_drop_pct
                   for v, drop in feasible), s


def test_a_deployment_out_of_reach_misses_an_slo_even_at_its_optimistic_bound():
    # P99 TPOT of 1 ms: no 8B deployment's estimate comes within the estimate's largest overshoot.
    problem = build_problem(parse_workload({**SMALL, "slo": {"p99_ttft_s": 2.0, "p99_tpot_s": 0.001}}, "tight"))
    evaluator = Evaluator(problem)
    plan = plan_screen(evaluator)
    assert not plan.candidates and plan.out_of_reach > 0 and "NSGA-II's trials show why" in plan.fallback
    for candidate in problem.space.enumerate(screen_grid(problem.space)):
        seen = evaluator.preview(candidate)
        if not seen.violations:
            missed = evaluator.estimated(seen).violations
            assert missed["saturated"] > 0 or any(missed[name] > overshoot(metric)
                                                  for name, (_, metric) in SLO_CONSTRAINTS.items())


def test_the_report_says_the_whole_space_was_screened(screened_job):
    report = write_results(screened_job.out_dir, screened_job.collect())["report.md"].read_text()
    assert "every deployment in the space was screened" in report
    assert "every point whose optimistic bound could beat the front was simulated" in report


def test_a_space_too_large_falls_back_to_the_sampler_and_says_so(tmp_path, monkeypatch):
    from servopt.optimizer import _screen
    plan = plan_screen(Evaluator(build_problem(parse_workload(SMALL, "small"))), max_points=10)
    assert plan.fallback and "48 points, more than the 10 the screen estimates" in plan.fallback
    assert not plan.candidates
    monkeypatch.setattr(_screen, "MAX_SCREEN_POINTS", 10)
    job = Job(parse_workload({**SMALL, "budget": {"trials": 6}}, "big"), tmp_path / "out", name="big")
    job.run(progress=False)
    study = _study(job)
    assert "fallback" in study.user_attrs[SCREEN_ATTR]
    assert len(study.trials) == 6 and not any(t.user_attrs.get(SCREENED_ATTR) for t in study.trials)
    report = write_results(job.out_dir, job.collect())["report.md"].read_text()
    assert "the space was not screened whole" in report and "NSGA-II searched it" in report


def test_the_budget_stops_the_screen_and_the_report_counts_what_was_left(tmp_path):
    job = Job(parse_workload({**SMALL, "budget": {"trials": 3}}, "short"), tmp_path / "out", name="short")
    job.run(progress=False)
    covered = _study(job).user_attrs[SCREEN_ATTR]
    assert covered["simulated"] == 3 and covered["left"] > 0 and "budget of 3 trials" in covered["stopped"]
    report = write_results(job.out_dir, job.collect())["report.md"].read_text()
    assert "could still beat the front were not simulated" in report


def test_the_same_seed_gives_the_same_front_with_one_or_two_workers(screened_job, tmp_path):
    job = Job(parse_workload(SMALL, "small"), tmp_path / "out", name="small", jobs=2)
    job.run(progress=False)
    first = write_results(screened_job.out_dir, screened_job.collect())["pareto.csv"].read_text()
    assert write_results(job.out_dir, job.collect())["pareto.csv"].read_text() == first


def test_a_resumed_screen_goes_on_where_the_budget_stopped_it_and_scores_nothing_twice(tmp_path):
    first = Job(parse_workload({**SMALL, "budget": {"trials": 3}}, "small"), tmp_path / "out", name="small")
    first.run(progress=False)
    before = {t.number: t.values for t in _study(first).trials}
    again = Job(parse_workload(SMALL, "small"), tmp_path / "out", name="small")
    again.run(progress=False)
    study = _study(again)
    scored = [t.system_attrs["deployment"] for t in study.trials]
    assert all(study.trials[n].values == v for n, v in before.items())
    assert len(set(scored)) == len(scored) and study.user_attrs[SCREEN_ATTR]["left"] == 0
    assert study.user_attrs[SCREEN_ATTR]["simulated"] == len(study.trials) > 3
