"""Capacity with redundancy: each candidate's latencies with one replica down (N-1).

Seed 7.4 adds spare replicas, ``x (1 + redundancy)``, "for failures and bursts"; whether the spare
capacity is enough is a prediction, not an assumption. When the workload asks for redundancy
(``redundancy > 0``) or constrains on it (``slo: {..., n_minus_1: true}``), every candidate is also
predicted on the same traffic with one replica fewer, at the fidelity it reached (the analytic
estimate, then the simulation with the same requests and seed, then the front's re-check), and its
record keeps that summary (``TrialRecord.n_minus_1``: the tables' ``n_minus_1_p99_*`` columns). The
scoring path (:meth:`~servopt.optimizer._evaluate.Evaluator.predict`) predicts it; this module
says what it means for the targets.

With ``slo.n_minus_1`` the targets must hold at N-1 too: the constraint ``slo_n_minus_1`` is the
largest relative miss of a target at N-1 or, when the N-1 fleet saturates, its overload (offered
over served requests per second, minus one) as the ``saturated`` constraint measures it; a single
replica cannot lose one (1.0). The fleet formula then keeps at least one replica beyond what the
traffic needs (N+1 sizing), so the search starts from fleets that can pass.

Example:
    >>> from servopt.costmodels.serving import SLO
    >>> miss({"ttft_s": {"p99": 0.75}, "tpot_s": {"p99": 0.02}, "e2e_s": {"p99": 3.0}, "saturated": False},
    ...      SLO(p99_ttft_s=0.5, n_minus_1=True), offered_rate_per_s=10.0)
    (0.5, 'with one replica down P99 TTFT 0.75 s > SLO 0.5 s')
    >>> miss(None, SLO(p99_ttft_s=0.5, n_minus_1=True), offered_rate_per_s=10.0)[0]
    1.0
"""

from __future__ import annotations

import math

from ..costmodels.serving import SLO
from ..costmodels.serving.slo import above
from ..results import Summary, summary_p99

CONSTRAINT = "slo_n_minus_1"


def wanted(workload) -> bool:
    """Whether the workload asks for N-1 predictions."""
    return workload.redundancy > 0 or workload.slo.n_minus_1


def miss(summary: Summary | None, slo: SLO, offered_rate_per_s: float | None) -> tuple[float, str]:
    """(violation amount, reason) of the targets at N-1 (0 when met or not asked for)."""
    if not slo.n_minus_1:
        return 0.0, ""
    if summary is None:
        return 1.0, "a single replica cannot lose one (slo.n_minus_1 needs two or more)"
    if summary.get("saturated"):
        served = summary.get("requests_per_s")
        amount = max(offered_rate_per_s / served - 1, 1e-6) if offered_rate_per_s and served else 1.0
        return amount, "with one replica down the fleet saturates"
    worst, reason = 0.0, ""
    for metric, target in slo.targets().items():
        latency = summary_p99(summary, metric)
        amount = latency / target - 1 if math.isfinite(latency) else 0.0
        if amount > worst:
            worst, reason = amount, f"with one replica down P99 {metric.upper()} {above(latency, target)}"
    return worst, reason
