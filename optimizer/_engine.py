"""The simulator's two entry points, as the optimizer calls them.

``estimate`` is the analytic screen (at least 50x faster), ``simulate`` the discrete-event run.
Both return the simulator's summary as a plain dict (``SimulationResult.summary.to_dict()``),
which is what trial records store.
"""

from __future__ import annotations

from typing import Any

from ..costmodels import serving
from ..costmodels.serving.compiled import CompiledDeployment

Summary = dict[str, Any]


class ServingEngine:
    """Calls :mod:`servopt.costmodels.serving` with one problem's traffic and SLOs on compiled deployments."""

    def __init__(self, problem):
        self.problem = problem

    def estimate(self, compiled: CompiledDeployment) -> Summary:
        w = self.problem.workload
        return serving.estimate_compiled(compiled, w.traffic, slo=w.slo).summary.to_dict()

    def simulate(self, compiled: CompiledDeployment, num_requests: int, seed: int) -> Summary:
        w = self.problem.workload
        return serving.simulate_compiled(compiled, w.traffic, num_requests=num_requests, seed=seed,
                                         slo=w.slo).summary.to_dict()
