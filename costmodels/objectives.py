"""What the search trades off, by name: a cost (:data:`COSTS`) against a P99 latency (:data:`LATENCIES`).

A workload's ``objective: {cost: NAME, latency: NAME}`` picks one of each; the study minimizes the
two and names them with :func:`metric_names`, and the results read each one's column. A cost
prices the fleet at the predicted throughput (:class:`CostObjective`, one subclass per way of
pricing); a latency is a P99 of the predicted distribution (:class:`LatencyObjective`). A new
objective is a class or an instance, plus one line in its registry.

Example:
    >>> COSTS["usd_per_output_mtoken"].value(36.0, input_per_s=3000.0, output_per_s=1000.0)
    10.0
    >>> LATENCIES["ttft"].value({"ttft_s": {"p99": 0.42}}), LATENCIES["ttft"].column
    (0.42, 'p99_ttft_s')
    >>> objective = {"cost": "usd_per_hour", "latency": "e2e"}
    >>> metric_names(objective), columns(objective)
    (['usd_per_hour', 'p99_e2e_s'], ('cost_usd_per_hour', 'p99_e2e_s'))
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar


class CostObjective(ABC):
    """A way to price a fleet: its ``name`` (the workload's spelling), the ``label`` of its axis."""

    name: ClassVar[str]
    label: ClassVar[str]

    @property
    def column(self) -> str:
        """The column of trial records and tables that holds it."""
        return f"cost_{self.name}"

    @abstractmethod
    def value(self, usd_per_hour: float, input_per_s: float, output_per_s: float) -> float | None:
        """The cost of a fleet renting ``usd_per_hour`` at the throughput given (None: unknown)."""


class FleetCost(CostObjective):
    """What the fleet rents for, per hour."""

    name = "usd_per_hour"
    label = "fleet cost ($/hour)"

    def value(self, usd_per_hour: float, input_per_s: float, output_per_s: float) -> float | None:
        return usd_per_hour


class PerMillionTokens(CostObjective):
    """Dollars per million tokens at the throughput (None when no tokens flow)."""

    @abstractmethod
    def tokens_per_s(self, input_per_s: float, output_per_s: float) -> float:
        """The tokens priced."""

    def value(self, usd_per_hour: float, input_per_s: float, output_per_s: float) -> float | None:
        tokens_per_s = self.tokens_per_s(input_per_s, output_per_s)
        return usd_per_hour / (tokens_per_s * 3600 / 1e6) if tokens_per_s > 0 else None


class PerMillionOutputTokens(PerMillionTokens):
    name = "usd_per_output_mtoken"
    label = "$ per million output tokens"

    def tokens_per_s(self, input_per_s: float, output_per_s: float) -> float:
        return output_per_s


class PerMillionTotalTokens(PerMillionTokens):
    name = "usd_per_total_mtoken"
    label = "$ per million tokens (input + output)"

    def tokens_per_s(self, input_per_s: float, output_per_s: float) -> float:
        return input_per_s + output_per_s


@dataclass(frozen=True)
class LatencyObjective:
    """The P99 of one latency (``ttft``, ``tpot``, ``e2e``) of a predicted summary."""

    name: str

    @property
    def column(self) -> str:
        """The column (and the study's metric name) that holds it."""
        return f"p99_{self.name}_s"

    def value(self, summary: Mapping[str, Any]) -> float:
        """The P99 in seconds."""
        return float(summary[f"{self.name}_s"]["p99"])


COSTS: dict[str, CostObjective] = {c.name: c for c in (
    FleetCost(), PerMillionOutputTokens(), PerMillionTotalTokens())}
LATENCIES: dict[str, LatencyObjective] = {m.name: m for m in (
    LatencyObjective("e2e"), LatencyObjective("ttft"), LatencyObjective("tpot"))}


def metric_names(objective: Mapping[str, str]) -> list[str]:
    """The names of a workload's two objectives (``{"cost": ..., "latency": ...}``), in the units of
    their values, as the study names its metrics."""
    return [COSTS[objective["cost"]].name, LATENCIES[objective["latency"]].column]


def columns(objective: Mapping[str, str]) -> tuple[str, str]:
    """The columns of a workload's cost and latency in trial records, tables and front points."""
    return COSTS[objective["cost"]].column, LATENCIES[objective["latency"]].column
