"""The simulator's two entry points, as the optimizer calls them.

``estimate`` is the analytic screen (at least 50x faster), ``simulate`` the discrete-event run.
Both return the simulator's summary as a plain dict (``SimulationResult.summary.to_dict()``),
which is what trial records store.
"""

from __future__ import annotations

from typing import Any

from ..costmodels import serving
from ..costmodels.deployment import Deployment

Summary = dict[str, Any]


class ServingEngine:
    """Calls :mod:`servopt.costmodels.serving` for one problem's model, traffic, GPUs and profiles."""

    def __init__(self, problem):
        self.problem = problem

    def _args(self, model: str, deployment: Deployment) -> tuple:
        p = self.problem
        return (p.ctx.models[model].spec_for(deployment.quantization), deployment, p.workload.traffic, p.gpu(deployment.gpu),
                p.profile(deployment.gpu))

    def estimate(self, model: str, deployment: Deployment) -> Summary:
        return serving.estimate(*self._args(model, deployment), slo=self.problem.workload.slo).summary.to_dict()

    def simulate(self, model: str, deployment: Deployment, num_requests: int, seed: int) -> Summary:
        result = serving.simulate(*self._args(model, deployment), num_requests=num_requests, seed=seed,
                                  slo=self.problem.workload.slo)
        return result.summary.to_dict()
