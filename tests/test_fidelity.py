"""Multi-fidelity simulation: a short run first; the search's length only where the short run's P99 interval straddles an SLO or the front."""

from _optimizer_fixtures import TINY

from servopt.optimizer._evaluate import Evaluator, ScreenFront, simulation_rungs
from servopt.optimizer._problem import build_problem
from servopt.optimizer.workload import Fidelity, parse_workload
from servopt.search_spaces import Candidate

KNOBS = {"model": "llama-3.1-8b", "gpu": "h100", "tp": 1, "quantization": "bf16", "kv_cache_dtype": "auto",
         "max_num_seqs": 128, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
         "mode": "aggregated", "speculation": "off", "replicas": 1}


def rungs_of(slo, screen=None):
    workload = {**TINY, "slo": slo, "fidelity": {"search_requests": 800, "first_requests": 200, "final_requests": 800},
                "space": {**TINY["space"], "replicas": 1}}
    evaluator = Evaluator(build_problem(parse_workload(workload, "test")))
    compiled = evaluator.preview(evaluator.problem.space.repair(Candidate(KNOBS))).compiled
    return evaluator.simulate_rungs("llama-3.1-8b", compiled, screen)


def test_default_rungs_are_a_quarter_then_the_search_length():
    assert simulation_rungs(Fidelity()) == (375, 1500)
    assert simulation_rungs(Fidelity(search_requests=600)) == (600,)  # a quarter is under 200: one rung
    assert simulation_rungs(Fidelity(search_requests=600, first_requests=100)) == (100, 600)
    assert simulation_rungs(Fidelity(first_requests=1500)) == (1500,)


def test_a_p99_interval_wholly_above_an_slo_stops_at_the_short_run():
    scored, why = rungs_of({"p99_ttft_s": 0.001})
    assert scored.requests == 200 and "P99 TTFT interval lies above the SLO" in why
    assert not scored.feasible


def test_a_feasible_point_runs_the_search_length_unless_a_cheaper_one_beats_it():
    scored, why = rungs_of({"p99_ttft_s": 5.0})
    assert scored.requests == 800 and why is None and scored.feasible
    beaten = ScreenFront(simulated=[(0.5 * scored.values[0], 0.1 * scored.values[1])])
    short, why = rungs_of({"p99_ttft_s": 5.0}, beaten)
    assert short.requests == 200 and "costs no more" in why
    dearer = ScreenFront(simulated=[(2 * scored.values[0], 0.1 * scored.values[1])])
    assert rungs_of({"p99_ttft_s": 5.0}, dearer)[0].requests == 800
