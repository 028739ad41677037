"""The typed records the optimizer writes and the results read: one per trial, one per re-check.

A trial's record is stored whole in the study (the ``record`` user attribute, as JSON) and read back
as a :class:`TrialRecord`; :meth:`~servopt.optimizer.job.Job.collect` hands the results package
:class:`TrialResult` objects and :class:`Recheck` objects, never loose dictionaries. Predictions
(``estimate``, ``simulation``) keep the simulator's summary as it serialises it
(``ServingSummary.to_dict``); :meth:`TrialRecord.p99` reads them.

The deployment of a trial is its compiled deployment's
:class:`~servopt.costmodels.serving.compiled.DeploymentRecord` (the spec, the weights served, each
role's resolved limits and placements). Records and front.json files written by older servopt
versions, which kept the spec, ``roles`` and ``weights`` side by side as plain dictionaries, are
read into the same types (:func:`legacy_deployment`).

Example:
    >>> r = TrialRecord(knobs={"gpu": "h100"}, model="m", serve_id="org/m", fidelity="precheck",
    ...     deployment={"gpu": "h100"}, cost_usd_per_hour=2.5, gpus_rented=1, replicas=1, num_gpus=1,
    ...     accuracy_drop_pct=0.0, feasible=False, reason="memory", profile="spec", profile_calibrated=False,
    ...     eval_s=0.01)
    >>> r.summary is None, r.p99("ttft"), r.deployment.spec.tp
    (True, nan, 1)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..costmodels.errors import MAX_INT
from ..costmodels.objectives import COSTS
from ..costmodels.quantization import MODEL_DTYPE_SCHEME, ONLINE_SCHEMES
from ..costmodels.serving.compiled import DeploymentRecord

Summary = dict[str, Any]

# Accuracy breaks ties on the front: two points of equal cost whose latencies differ by at most this
# share are taken as equally fast, and the front keeps the one with the lower accuracy drop
# (optimizer/study.py: ``preferred_mask``; the report states the rule). A stand-in for the
# predictions' error bars until they are reported (not fitted: the estimate's and the simulation's
# P99 errors against measured runs are larger), kept here and nowhere else.
LATENCY_TIE = 0.05


def latency_tied(a_s: float, b_s: float) -> bool:
    """Whether two latencies are the same within :data:`LATENCY_TIE`.

    >>> latency_tied(5.00, 5.07), latency_tied(1.0, 1.2)
    (True, False)
    """
    return abs(a_s - b_s) <= LATENCY_TIE * min(a_s, b_s)


def legacy_deployment(data: dict[str, Any], gpus_per_node: int | None = None) -> dict[str, Any]:
    """A trial record or front point written before the :class:`DeploymentRecord`, with its spec
    (``deployment``), compiled ``roles`` and ``weights`` side by side, in the current layout (the
    same dictionary when it is current already). Records from before the weights were recorded
    served their ``serve_id`` in a 16-bit dtype or a scheme vLLM applies at start-up; one that names
    another scheme has no weights record (its checkpoint is unknown)."""
    spec = data.get("deployment")
    if not isinstance(spec, dict) or "spec" in spec:
        return data
    weights = data.get("weights")
    scheme = spec.get("quantization")
    if weights is None and scheme in (*MODEL_DTYPE_SCHEME.values(), *ONLINE_SCHEMES):
        weights = {"scheme": scheme, "serve_id": data.get("serve_id", ""),
                   "vllm_quantization": scheme if scheme in ONLINE_SCHEMES else None,
                   "source": "not recorded by the servopt that ran the job"}
    record = {"spec": spec, "model": data.get("model", ""), "weights": weights,
              "max_model_len": spec.get("max_model_len") or 0, "roles": data.get("roles") or [],
              "gpus_per_node": data.get("gpus_per_node", gpus_per_node)}
    rest = {k: v for k, v in data.items() if k not in ("weights", "roles", "gpus_per_node")}
    return {**rest, "deployment": record}


def summary_p99(summary: Summary | None, metric: str, tenant: str | None = None) -> float:
    """The P99 of ``ttft``, ``tpot``, ``itl`` or ``e2e`` in a summary, in seconds (NaN without one),
    or of the tenant class ``tenant`` (traffic with classes)."""
    if tenant is not None:
        summary = ((summary or {}).get("classes") or {}).get(tenant)
    if not summary or f"{metric}_s" not in summary or summary[f"{metric}_s"]["p99"] is None:
        return math.nan
    return float(summary[f"{metric}_s"]["p99"])


def summary_classes(summary: Summary | None) -> list[str]:
    """The tenant classes a summary reports on, in the traffic's order (none without classes)."""
    return list(((summary or {}).get("classes") or {}))


class TrialRecord(BaseModel):
    """One trial: the knobs scored (after repair) and what was drawn, the deployment and its compiled
    roles, the predictions at the fidelity reached, the costs, and why it is (in)feasible."""

    # Records of studies written by other servopt versions may carry fields this one dropped.
    model_config = ConfigDict(extra="ignore", frozen=True)

    knobs: dict[str, Any]
    repaired: dict[str, list[Any]] = Field(default_factory=dict, description="knob -> [drawn, scored]")
    model: str
    serve_id: str
    fidelity: Literal["precheck", "estimate", "simulate"]
    estimate: Summary | None = None
    simulation: Summary | None = None
    simulated_requests: int | None = None
    n_minus_1: Summary | None = Field(default=None, description="the prediction with one replica down (redundancy)")
    capacity: dict[str, Any] | None = None
    deployment: DeploymentRecord
    estimate_objectives: list[float] | None = None
    screened_out: str | None = None
    memory_headroom_gib: float | None = None
    cost_usd_per_hour: float
    cost_usd_per_output_mtoken: float | None = None
    cost_usd_per_total_mtoken: float | None = None
    gpus_rented: int
    replicas: int
    num_gpus: int
    accuracy_drop_pct: float
    violations: dict[str, float] = Field(default_factory=dict)
    feasible: bool
    reason: str = ""
    profile: str
    profile_calibrated: bool
    # costmodels.uncertainty.error_kind: which held-out errors bound its figures (older records: None).
    error_kind: dict[str, Any] | None = None
    eval_s: float

    @model_validator(mode="before")
    @classmethod
    def _old_layout(cls, data: Any) -> Any:
        return legacy_deployment(data) if isinstance(data, dict) else data

    @property
    def summary(self) -> Summary | None:
        """The prediction at the highest fidelity reached (simulation, else estimate)."""
        return self.simulation or self.estimate

    def p99(self, metric: str) -> float:
        return summary_p99(self.summary, metric)

    def costs(self) -> dict[str, float | None]:
        return {cost.column: getattr(self, cost.column) for cost in COSTS.values()}


class Recheck(BaseModel):
    """A front candidate simulated again with ``requests`` requests and a fresh seed."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    simulation: Summary
    n_minus_1: Summary | None = None
    requests: int
    feasible: bool
    reason: str = ""
    values: list[float]
    gpus_rented: int
    cost_usd_per_hour: float
    cost_usd_per_output_mtoken: float | None = None
    cost_usd_per_total_mtoken: float | None = None

    def costs(self) -> dict[str, float | None]:
        return {cost.column: getattr(self, cost.column) for cost in COSTS.values()}


@dataclass(frozen=True)
class TrialResult:
    """A finished trial as the results read it: its number, objective values (None when pruned),
    record and duration."""

    number: int
    values: list[float] | None
    record: TrialRecord
    duration_s: float | None = None


# The metrics of a front.json point that are true/false (results/_tables.py n_minus_1_columns).
METRIC_FLAGS = frozenset({"n_minus_1_saturated"})


class FrontPoint(BaseModel):
    """One point of front.json, as ``servopt export`` reads it: the trial, the model key and the id
    served, the compiled deployment's record, the knobs, and the predicted figures its scripts
    quote (``metrics``: costs, GPUs and P99s; ``class_metrics``: each tenant class's P99s).
    front.json files of older jobs are read into the same type (:func:`legacy_deployment`). Strict
    about its own types: front.json is a file anyone can edit."""

    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    trial: int = Field(ge=0, le=MAX_INT)
    model: str = ""
    serve_id: str
    deployment: DeploymentRecord
    knobs: dict[str, Any] = Field(default_factory=dict)
    profile_calibrated: bool = True
    # One figure is a flag: whether the fleet saturates with a replica down (jobs with redundancy).
    metrics: dict[str, float | bool | None] = Field(default_factory=dict)
    class_metrics: dict[str, float | None] = Field(default_factory=dict)

    @field_validator("metrics")
    @classmethod
    def _flags_only_where_flags_are(cls, metrics: dict[str, float | bool | None]) -> dict[str, float | bool | None]:
        for key, value in metrics.items():
            if isinstance(value, bool) and key not in METRIC_FLAGS:
                raise ValueError(f"{key}: expected a number, not a true/false value (got {str(value).lower()})")
        return metrics

    @model_validator(mode="before")
    @classmethod
    def _old_layout(cls, data: Any) -> Any:
        return legacy_deployment(data) if isinstance(data, dict) else data
