"""Every registered objective goes through the same checks: a workload may name it, the study names
its metric, trial records and rechecks keep its column, and its value is what its name says."""

import pytest

from servopt.costmodels.objectives import COSTS, LATENCIES, columns, metric_names
from servopt.optimizer.workload import Objective
from servopt.results import Recheck, TrialRecord

OBJECTIVES = [(cost, latency) for cost in COSTS for latency in LATENCIES]


@pytest.mark.parametrize("cost,latency", OBJECTIVES)
def test_a_workload_names_it_and_the_study_names_its_metrics(cost, latency):
    objective = Objective(cost=cost, latency=latency).model_dump()
    assert metric_names(objective) == [cost, f"p99_{latency}_s"]
    assert columns(objective) == (f"cost_{cost}", f"p99_{latency}_s")


@pytest.mark.parametrize("name", list(COSTS))
def test_records_keep_each_cost(name):
    column = COSTS[name].column
    assert column in TrialRecord.model_fields and column in Recheck.model_fields


def test_costs_price_the_fleet_at_the_throughput():
    fleet, output, total = (COSTS[n] for n in ("usd_per_hour", "usd_per_output_mtoken", "usd_per_total_mtoken"))
    assert fleet.value(36.0, 3000.0, 1000.0) == 36.0
    assert output.value(36.0, 3000.0, 1000.0) == pytest.approx(10.0)
    assert total.value(36.0, 3000.0, 1000.0) == pytest.approx(2.5)
    assert output.value(36.0, 3000.0, 0.0) is None  # no tokens flow (closed-loop clients before a prediction)


@pytest.mark.parametrize("name", list(LATENCIES))
def test_a_latency_is_the_p99_of_its_metric(name):
    summary = {f"{m}_s": {"p50": 0.1, "p99": 1.0 + i} for i, m in enumerate(("ttft", "tpot", "itl", "e2e"))}
    assert LATENCIES[name].value(summary) == summary[f"{name}_s"]["p99"]


def test_an_unknown_objective_is_refused_by_the_workload():
    with pytest.raises(ValueError, match="usd_per_hour"):
        Objective(cost="usd_per_gpu")
