"""Latency targets a deployment is scored against (the ``slo:`` of a workload).

``n_minus_1: true`` asks that the targets also hold with one replica down: the same traffic on one
replica fewer (seed 7.4's redundancy, checked rather than assumed). The optimizer then simulates
every candidate at N and at N-1 replicas and sizes fleets with at least one spare replica.

Example:
    >>> SLO(p99_ttft_s=2.0, p99_tpot_s=0.05).targets()
    {'ttft': 2.0, 'tpot': 0.05}
    >>> SLO(p99_ttft_s=0.5, n_minus_1=True).n_minus_1
    True
"""

from __future__ import annotations

from pydantic import Field

from ..errors import Seconds, Spec


class SLO(Spec):
    """Latency targets at P99 (any subset), in seconds (finite, at most a year)."""

    p99_ttft_s: Seconds | None = None
    p99_tpot_s: Seconds | None = None
    p99_e2e_s: Seconds | None = None
    n_minus_1: bool = Field(default=False, description="the targets hold with one replica down as well")

    def targets(self) -> dict[str, float]:
        """The targets that are set, by metric (ttft, tpot, e2e)."""
        pairs = {"ttft": self.p99_ttft_s, "tpot": self.p99_tpot_s, "e2e": self.p99_e2e_s}
        return {metric: target for metric, target in pairs.items() if target is not None}
