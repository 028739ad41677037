"""Scoring one candidate, cheapest first.

0. The drawn point is repaired (:mod:`servopt.search_spaces._repair`: the smallest TP that fits, a
   token budget vLLM accepts, ...) and compiled once
   (:class:`~servopt.costmodels.serving.compiled.CompiledDeployment`); every step below reads that one
   compiled deployment.
1. Constraints that need no simulation (TP, node, quantization, batch limits, accuracy, memory).
2. Replicas from one replica's capacity (:func:`~servopt.costmodels.capacity.replica_capacity`: the
   analytic estimate's saturation rate of one replica, the engine model the simulation shares):
   the replicas that carry the traffic, with the candidate's ``headroom``, then the workload's spare
   replicas on top (seed 7.4: ``ceil(N x (1 + redundancy))``, one more with ``slo.n_minus_1``;
   :func:`~servopt.costmodels.capacity.fleet_size`); confirmed with the analytic ``estimate``: a fleet
   it calls saturated grows the replicas that carry the traffic by a quarter (at most three times).
   Searching the replica count blindly would spend most trials on fleets that are saturated or
   idle; deriving it leaves the search one knob (headroom) that trades cost for queueing delay.
   Headroom that would take the fleet over ``limits.max_gpus`` is capped there.
3. The estimate screens: a candidate is simulated only when its estimate meets the SLOs within
   ``screen_margin`` and is not that much slower than a simulated configuration that costs no more.
4. The discrete-event simulation, at ``search_requests`` requests.

Every outcome is a :class:`~servopt.results.TrialRecord` with the reason; nothing raises for an
infeasible point.
Its objective values are the predicted ones, or None when nothing finite was predicted (rejected
before the estimate, or an estimated queue that grows without bound): the study prunes those.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

from ..costmodels.capacity import ReplicaCapacity, fleet_size, replica_capacity
from ..costmodels.deployment import Deployment
from ..costmodels.errors import InputError
from ..costmodels.objectives import COSTS, LATENCIES
from ..costmodels.serving.compiled import CompiledDeployment, num_nodes
from ..costmodels.serving.slo import above
from ..costmodels.uncertainty import error_kind
from ..results import TrialRecord
from ..search_spaces import Candidate, Violation
from . import _redundancy
from ._engine import ServingEngine, Summary
from ._problem import Problem

SATURATION_RETRIES = 3
# Successive halving's reduction factor between the short simulation and the search's: Optuna's
# SuccessiveHalvingPruner default (reduction_factor=4).
RUNG_FACTOR = 4
# The smallest default short simulation: the P99's batch-means interval needs 100 measured requests
# (10 batches of 10; metrics.py), and 200 leaves 170 after the warm-up and cool-down.
MIN_RUNG_REQUESTS = 200
SLO_CONSTRAINTS = {"slo_ttft": ("p99_ttft_s", "ttft"), "slo_tpot": ("p99_tpot_s", "tpot"), "slo_e2e": ("p99_e2e_s", "e2e")}
# Every tenant class's own targets (traffic.classes[].slo), as one rule: the sum of the relative misses.
CLASS_SLO_CONSTRAINT = "slo_classes"
# The constraints handed to Optuna: each is the total violation of a group of rules (Optuna
# stores one row per named constraint, so fewer names keep a trial's storage writes down); the
# record of each trial keeps every rule's own amount and reason.
CONSTRAINT_GROUPS = {
    "config": ("tp_divides_heads", "fits_node", "quantization_on_gpu", "batch_limits", "moe_parallelism", "speculation",
               "max_gpus", "simulator"),
    "memory": ("memory",),
    "accuracy": ("accuracy",),
    "saturated": ("saturated",),
    "slo": (*SLO_CONSTRAINTS, CLASS_SLO_CONSTRAINT, _redundancy.CONSTRAINT),
}


def whole_nodes(workload, gpu) -> bool:
    """Whether a fleet of ``gpu`` rents whole nodes: as ``pricing.whole_nodes`` says, else as the
    GPU's price is quoted (``price_per: node``, the price of an 8-GPU instance)."""
    if workload.pricing.whole_nodes is not None:
        return workload.pricing.whole_nodes
    return gpu.price_per == "node"


def p99(summary: Summary, metric: str) -> float:
    """The P99 of ``ttft``, ``tpot``, ``itl`` or ``e2e`` in a simulator summary, in seconds."""
    return float(summary[f"{metric}_s"]["p99"])


def p99_low(summary: Summary, metric: str) -> float:
    """The lower end of a simulated P99's 95% interval (the P99 itself when the run gave none)."""
    value = p99(summary, metric)
    low = ((summary.get("p99_ci_s") or {}).get(metric) or [None])[0]
    return min(float(low), value) if low is not None and math.isfinite(low) else value


def simulation_rungs(fidelity) -> tuple[int, ...]:
    """Requests of each simulation a trial may get: a short one first, then ``search_requests``
    unless the short one settles it (:meth:`Evaluator.settled_early`). The short one is
    ``fidelity.first_requests``, by default ``search_requests / RUNG_FACTOR`` when that is at least
    :data:`MIN_RUNG_REQUESTS`; one rung when it is not, or when ``first_requests`` is at least
    ``search_requests``.

    Example:
        >>> from servopt.optimizer.workload import Fidelity
        >>> simulation_rungs(Fidelity()), simulation_rungs(Fidelity(search_requests=400))
        ((375, 1500), (400,))
    """
    first = fidelity.first_requests
    if first is None:
        first = fidelity.search_requests // RUNG_FACTOR
        if first < MIN_RUNG_REQUESTS:
            return (fidelity.search_requests,)
    return (first, fidelity.search_requests) if first < fidelity.search_requests else (fidelity.search_requests,)


@dataclass(frozen=True)
class Prediction:
    """A deployment scored at one fidelity: the analytic estimate (``requests`` None) or a simulation
    of ``requests`` requests drawn with ``seed``. The one scoring path of a trial's estimate and
    simulation, the sampler's forecast and the front's re-check (:meth:`Evaluator.predict`).

    ``violations`` holds every prediction rule's relative miss (> 0: broken): ``saturated``, the SLOs,
    the classes' SLOs and, when the workload asks, the targets with one replica down;
    ``reasons`` says why each broken one is; ``values`` are the objectives (None when unbounded)."""

    summary: Summary
    n_minus_1: Summary | None
    violations: dict[str, float]
    reasons: list[str]
    costs: dict[str, Any]
    values: tuple[float, float] | None
    requests: int | None = None
    seed: int | None = None

    @property
    def simulated(self) -> bool:
        return self.requests is not None

    @property
    def feasible(self) -> bool:
        return all(v <= 0 for v in self.violations.values())


@dataclass
class TrialOutcome:
    """Objective values (None when not predicted), each rule's violation amount (> 0: broken), and
    the trial's record."""

    values: tuple[float, float] | None
    constraints: dict[str, float]
    record: TrialRecord

    def attrs(self) -> dict[str, Any]:
        """Flat attributes to filter trials by (in optuna-dashboard, or ``trials_dataframe()``): the
        deployment as run, its cost and, when predicted, its P99 latencies. The other knobs are the
        trial's parameters already."""
        r, d = self.record, self.record.deployment.spec
        out: dict[str, Any] = {"model": r.serve_id, "gpu": d.gpu, "quantization": d.quantization}
        if not d.disaggregation:
            out["tp"] = d.tp
        out.update({"replicas": r.replicas, "gpus_used": r.num_gpus, "gpus_rented": r.gpus_rented})
        out.update({key[len("cost_"):]: value for key, value in r.costs().items() if value is not None})
        for metric in ("ttft", "tpot", "itl", "e2e"):
            if math.isfinite(r.p99(metric)):
                out[f"p99_{metric}_s"] = r.p99(metric)
        out.update({"feasible": r.feasible, "fidelity": r.fidelity, "reason": r.reason,
                    "violated": ", ".join(sorted(r.violations)), "accuracy_drop_pct": r.accuracy_drop_pct})
        return out

    def grouped_constraints(self) -> dict[str, float]:
        """One value per :data:`CONSTRAINT_GROUPS` entry: the sum of its broken rules' amounts, or
        its tightest slack (<= 0) when none is broken."""
        out = {}
        for group, names in CONSTRAINT_GROUPS.items():
            amounts = [self.constraints.get(name, 0.0) for name in names]
            broken = [a for a in amounts if a > 0]
            out[group] = sum(broken) if broken else max(amounts)
        return out


@dataclass(frozen=True)
class Preview:
    """A drawn candidate as it will be scored: repaired, compiled with its derived replicas (one
    replica when a rule breaks before the capacity formula), and the rules it breaks."""

    drawn: Candidate
    candidate: Candidate
    model: str
    compiled: CompiledDeployment
    violations: dict[str, Violation]
    capacity: dict[str, Any] | None

    @property
    def key(self) -> tuple:
        return self.model, json.dumps(self.compiled.deployment.model_dump(mode="json"), sort_keys=True)

    @property
    def serving(self) -> int | None:
        """Replicas that carry the traffic, spares aside (None before the capacity formula)."""
        return None if self.capacity is None else self.capacity["serving_replicas"]


@dataclass
class ScreenFront:
    """The simulated feasible configurations, for screening: their (cost, estimated latency), which
    the estimate of a new candidate is compared with, and their (cost, simulated latency) at search
    fidelity, which a short simulation of one is compared with."""

    points: list[tuple[float, float]] = field(default_factory=list)
    simulated: list[tuple[float, float]] = field(default_factory=list)

    def add(self, cost: float, latency_s: float) -> None:
        self.points.append((cost, latency_s))

    def add_simulated(self, cost: float, latency_s: float) -> None:
        self.simulated.append((cost, latency_s))

    def dominated(self, cost: float, latency_s: float, margin: float) -> bool:
        return any(c <= cost and l * (1 + margin) <= latency_s for c, l in self.points)

    def dominated_simulated(self, cost: float, latency_s: float) -> bool:
        """Whether a configuration that costs no more simulated no slower than ``latency_s``."""
        return any(c <= cost and l <= latency_s for c, l in self.simulated)


class Evaluator:
    """Scores candidates of one problem (see the module docstring for the order of checks)."""

    def __init__(self, problem: Problem, engine: ServingEngine | None = None):
        self.problem = problem
        self.engine = engine or ServingEngine(problem)
        self.constraint_names = [*problem.space.constraint_names, "simulator", "saturated", *SLO_CONSTRAINTS,
                                 CLASS_SLO_CONSTRAINT, _redundancy.CONSTRAINT]
        self._summaries: dict[tuple, Summary] = {}
        self._previews: dict[tuple, Preview] = {}
        self._capacities: dict[tuple, ReplicaCapacity] = {}

    # --- caches shared across trials (and seeded from stored trials on resume) -----------------
    @staticmethod
    def _key(kind: str, model: str, deployment: Deployment | dict, extra: Any = None) -> tuple:
        dump = deployment if isinstance(deployment, dict) else deployment.model_dump(mode="json")
        return kind, model, json.dumps(dump, sort_keys=True), extra

    def remember(self, record: dict[str, Any]) -> None:
        """Seed the caches with a stored trial's summaries, so a resumed job never repeats them."""
        if record.get("estimate") is None and record.get("simulation") is None:
            return
        spec = TrialRecord.model_validate(record).deployment.spec
        if record.get("estimate") is not None:
            self._summaries[self._key("estimate", record["model"], spec)] = record["estimate"]
        if record.get("simulation") is not None:
            requests_seed = (record["simulated_requests"], self.problem.workload.seed)
            key = self._key("simulate", record["model"], spec, requests_seed)
            self._summaries[key] = record["simulation"]

    def summaries(self, kind: str) -> int:
        """How many distinct deployments this evaluator holds an ``estimate`` or a ``simulate`` summary of."""
        return sum(1 for key in self._summaries if key[0] == kind)

    def _estimate(self, model: str, compiled: CompiledDeployment) -> Summary:
        key = self._key("estimate", model, compiled.deployment)
        if key not in self._summaries:
            self._summaries[key] = self.engine.estimate(compiled)
        return self._summaries[key]

    def simulate(self, model: str, compiled: CompiledDeployment, num_requests: int, seed: int) -> Summary:
        key = self._key("simulate", model, compiled.deployment, (num_requests, seed))
        if key not in self._summaries:
            self._summaries[key] = self.engine.simulate(compiled, num_requests, seed)
        return self._summaries[key]

    # --- capacity --------------------------------------------------------------------------------
    def capacity(self, compiled: CompiledDeployment) -> tuple[float, ReplicaCapacity]:
        """Fractional replicas the traffic needs, and one replica's capacity: the analytic estimate's
        saturation rate of one replica (:func:`~servopt.costmodels.capacity.replica_capacity`, the
        engine model the estimate and the simulation share). Closed-loop clients need as many
        replicas as hold them at the replica's concurrency at that rate. Cached per deployment."""
        key = self._key("capacity", compiled.weights.serve_id, compiled.with_replicas(1).deployment)
        cap = self._capacities.get(key)
        if cap is None:
            cap = self._capacities[key] = replica_capacity(compiled, self.problem.workload.traffic)
        stats = self.problem.stats
        if stats.rate_per_s is not None:
            return cap.needed(stats.rate_per_s), cap
        return stats.in_flight_requests / max(cap.concurrency, 1.0), cap

    def _serving(self, candidate: Candidate, needed: float, gpus_per_replica: int) -> int:
        """Replicas that carry the traffic: those it needs with the candidate's ``headroom``, capped
        where headroom would take the fleet with its spares over ``limits.max_gpus`` (a fleet the
        traffic itself takes over the limit breaks it)."""
        least = max(math.ceil(needed - 1e-9), 1)
        wanted = max(math.ceil(needed * (1 + float(candidate.get("headroom", 0.0))) - 1e-9), 1)
        limit = self.problem.ctx.max_gpus // gpus_per_replica
        while wanted > least and self._fleet(wanted) > limit:
            wanted -= 1
        return wanted

    def _fleet(self, serving: int) -> int:
        """Replicas deployed when ``serving`` carry the traffic: the workload's spares on top
        (:func:`~servopt.costmodels.capacity.fleet_size`: ``redundancy``, and one for ``slo.n_minus_1``)."""
        w = self.problem.workload
        return fleet_size(serving, w.redundancy, w.slo.n_minus_1)

    # --- scoring ---------------------------------------------------------------------------------
    def cost(self, deployment: Deployment, summary: Summary | None) -> dict[str, Any]:
        """GPUs rented (whole nodes where :func:`whole_nodes`), the fleet's $/hour, and $ per
        million output tokens and per million tokens (input + output) at the predicted throughput
        (the offered load before a prediction; None when neither is known, as for closed-loop
        clients)."""
        gpu = self.problem.gpu(deployment.gpu)
        rented = deployment.num_gpus
        if whole_nodes(self.problem.workload, gpu):
            node = self.problem.ctx.node_size(deployment.gpu)
            rented = num_nodes(deployment, node) * node
        per_hour = rented * gpu.price_per_gpu_hour
        input_per_s, output_per_s = self.problem.stats.tokens_per_s()
        if summary is not None and summary.get("output_tokens_per_s"):
            input_per_s, output_per_s = float(summary["input_tokens_per_s"]), float(summary["output_tokens_per_s"])

        return {"gpus_rented": rented,
                **{c.column: c.value(per_hour, input_per_s, output_per_s) for c in COSTS.values()}}

    def _prediction_violations(self, summary: Summary) -> dict[str, float]:
        """Relative misses (> 0: broken). A saturated fleet misses by its overload, offered over
        served requests per second; its unbounded P99s have no relative miss of their own."""
        slo = self.problem.workload.slo
        out = {"saturated": 0.0}
        if summary.get("saturated"):
            offered, served = self.problem.stats.rate_per_s, summary.get("requests_per_s")
            # Still > 0 when the throughput measured so far keeps up while the queue grows.
            out["saturated"] = max(offered / served - 1, 1e-6) if offered and served else 1.0
        for name, (attr, metric) in SLO_CONSTRAINTS.items():
            target, latency = getattr(slo, attr), p99(summary, metric)
            out[name] = latency / target - 1 if target is not None and math.isfinite(latency) else 0.0
        misses = [latency / target - 1 for _, _, latency, target in self._class_targets(summary)
                  if math.isfinite(latency)]
        broken = [m for m in misses if m > 0]
        out[CLASS_SLO_CONSTRAINT] = sum(broken) if broken else max(misses, default=0.0)
        return out

    def _class_targets(self, summary: Summary) -> list[tuple[str, str, float, float]]:
        """(class, metric, predicted P99, target) of every class's own SLO (NaN when not predicted)."""
        figures = summary.get("classes") or {}
        out = []
        for c in self.problem.workload.traffic.classes or []:
            for metric, target in c.slo.targets().items():
                value = (figures.get(c.name) or {}).get(f"{metric}_s", {}).get("p99")
                out.append((c.name, metric, math.nan if value is None else float(value), target))
        return out

    def _slo_excess(self, violations: dict[str, float]) -> float:
        """How far an estimate misses its SLOs beyond the screen margin (<= 0: it is simulated)."""
        margin = self.problem.workload.fidelity.screen_margin
        return max(amount - margin for name, amount in violations.items() if name != "saturated")

    def _summary(self, model: str, compiled: CompiledDeployment, requests: int | None, seed: int | None) -> Summary:
        if requests is None:
            return self._estimate(model, compiled)
        return self.simulate(model, compiled, requests, seed)

    def predict(self, model: str, compiled: CompiledDeployment, requests: int | None = None,
                seed: int | None = None) -> Prediction:
        """Score a compiled deployment at one fidelity: the estimate, or with ``requests`` the
        simulation drawn with ``seed`` (cached either way). Every prediction rule is applied here:
        saturation, the SLOs, each class's SLOs, and the targets with one replica down (predicted at
        the same fidelity) when the workload asks (:mod:`._redundancy`). InputError when the
        simulator cannot model the deployment."""
        w = self.problem.workload
        summary = self._summary(model, compiled, requests, seed)
        violations = self._prediction_violations(summary)
        source = "estimate" if requests is None else "simulate"
        reasons = _prediction_reasons(summary, violations, w.slo, source)
        reasons += [f"{'simulated' if requests is not None else 'estimated'} P99 {metric.upper()} of class {name} "
                    f"{above(latency, target, 'its SLO')}"
                    for name, metric, latency, target in self._class_targets(summary)
                    if math.isfinite(latency) and latency > target]
        n_minus_1 = None
        if _redundancy.wanted(w):
            replicas = compiled.deployment.replicas
            if replicas >= 2:
                n_minus_1 = self._summary(model, compiled.with_replicas(replicas - 1), requests, seed)
            amount, reason = _redundancy.miss(n_minus_1, w.slo, self.problem.stats.rate_per_s)
            violations[_redundancy.CONSTRAINT] = amount
            if amount > 0:
                reasons.append(reason)
        costs = self.cost(compiled.deployment, summary)
        return Prediction(summary, n_minus_1, violations, reasons, costs, self._objectives(costs, summary),
                          requests, seed)

    def forecast(self, params: dict[str, Any]) -> tuple[tuple[float, float] | None, float]:
        """What the estimate says of drawn parameters before a trial scores them: the objective
        values (None when not predicted) and how far they miss (rules broken, saturation, SLOs beyond
        the screen margin, at N-1 too when the workload asks; <= 0: they would be simulated). Cached,
        so the trial that scores them repeats nothing."""
        try:
            candidate = self.problem.space.fixed(params)
        except InputError:
            return None, math.inf
        seen = self.preview(candidate)
        if seen.violations:
            return None, 1.0 + sum(v.amount for v in seen.violations.values())
        try:
            estimated = self.estimated(seen)
        except InputError:
            return None, math.inf
        return estimated.values, max(estimated.violations["saturated"], self._slo_excess(estimated.violations))

    def estimated(self, seen: Preview) -> Prediction:
        """The estimate of a previewed deployment that breaks no rule, as a trial scores it: the derived
        fleet, grown where it saturates (:meth:`_estimate_fleet`). InputError when the simulator
        cannot model it."""
        compiled, _ = self._estimate_fleet(seen.candidate, seen.model, seen.compiled, seen.serving)
        return self.predict(seen.model, compiled)

    def _objectives(self, costs: dict[str, Any], summary: Summary | None) -> tuple[float, float] | None:
        """The predicted cost and P99, or None when either is unknown or unbounded."""
        objective = self.problem.workload.objective
        cost = costs[COSTS[objective.cost].column]
        if summary is None or cost is None:
            return None
        values = (float(cost), LATENCIES[objective.latency].value(summary))
        return values if all(math.isfinite(v) for v in values) else None

    def preview(self, candidate: Candidate) -> Preview:
        """Steps 0-2 of the module docstring for a drawn candidate (memoized): the repaired point,
        its deployment compiled with the derived replicas, and the rules it breaks."""
        found = self._previews.get(candidate.key)
        if found is not None:
            return found
        space = self.problem.space
        repaired = space.repair(candidate)
        compiled = space.compile(repaired)
        violations = {v.constraint: v for v in space.violations(repaired, compiled=compiled)}
        capacity = None
        if not violations:
            try:
                needed, cap = self.capacity(compiled)
            except InputError as err:  # a request longer than the KV cache holds, or no stable rate
                violations["memory"] = Violation("memory", 1.0, str(err))
            else:
                if "replicas" in repaired.values:
                    serving = replicas = int(repaired["replicas"])
                else:
                    serving = self._serving(repaired, needed, compiled.deployment.gpus_per_replica)
                    replicas = self._fleet(serving)
                compiled = compiled.with_replicas(replicas)
                capacity = {"replicas_needed": needed, "serving_replicas": serving, "per_replica": cap.to_dict()}
                violations.update({v.constraint: v for v in space.violations(repaired, replicas, compiled)})
        found = self._previews[candidate.key] = Preview(candidate, repaired, space.model_key(repaired), compiled,
                                                        violations, capacity)
        return found

    def scored_key(self, params: dict[str, Any]) -> tuple | None:
        """The deployment that drawn parameters are scored as (after pinned values, the repair and
        the derived replica count), or None when they leave an active knob without a value: points
        the search draws apart (a headroom that buys no replica, a max_num_seqs above what the KV
        cache holds after repair) often score one deployment."""
        try:
            candidate = self.problem.space.fixed(params)
        except InputError:
            return None
        return self.preview(candidate).key

    def evaluate(self, candidate: Candidate, screen: ScreenFront | None = None, simulate: bool = False) -> TrialOutcome:
        """Score one candidate; infeasible ones come back with their reason, never an exception. With
        ``simulate`` (a deployment the whole-space screen chose, :mod:`._screen`) every bounded estimate
        is simulated, whatever its SLO margin or ``screen``."""
        start = time.perf_counter()
        space, w = self.problem.space, self.problem.workload
        seen = self.preview(candidate)
        candidate, model, compiled = seen.candidate, seen.model, seen.compiled
        record: dict[str, Any] = {
            "knobs": dict(candidate.values), "model": model,
            # Knobs the repair moved: drawn value -> scored value.
            "repaired": {k: [seen.drawn.get(k), v] for k, v in candidate.values.items() if seen.drawn.get(k) != v},
            # What vLLM loads for these weights: the model, or the pre-quantized checkpoint of the scheme.
            "serve_id": compiled.weights.serve_id,
            "fidelity": "precheck", "estimate": None, "simulation": None, "simulated_requests": None,
        }
        violations = dict(seen.violations)
        if seen.capacity is not None:
            record["capacity"] = seen.capacity
        record["deployment"] = compiled.record()
        scored: Prediction | None = None
        amounts = {name: 0.0 for name in self.constraint_names}
        amounts.update({name: v.amount for name, v in violations.items()})
        reasons = [v.reason for v in violations.values()]
        if not violations:
            try:
                compiled, _ = self._estimate_fleet(candidate, model, compiled, seen.serving)
                scored = self.predict(model, compiled)
            except InputError as err:  # a configuration the simulator cannot model
                violations["simulator"] = Violation("simulator", 1.0, f"simulator: {err}")
                amounts["simulator"] = 1.0
                reasons.append(violations["simulator"].reason)
        if scored is not None:
            record["deployment"] = compiled.record().model_copy(update={"spec": space.validated(compiled.deployment)})
            record["estimate"] = scored.summary
            record["fidelity"] = "estimate"
            record["n_minus_1"] = scored.n_minus_1
            estimate_values = scored.values
            slo_ok = self._slo_excess(scored.violations) <= 0
            dominated = (not simulate and screen is not None and estimate_values is not None
                         and screen.dominated(*estimate_values, w.fidelity.screen_margin))
            record["estimate_objectives"] = list(estimate_values) if estimate_values else None
            if not scored.summary.get("saturated") and estimate_values and (simulate or slo_ok) and not dominated:
                try:
                    simulated, settled = self.simulate_rungs(model, compiled, screen)
                except InputError as err:  # keep the estimate, and say why it was not simulated
                    amounts["simulator"] = 1.0
                    reasons.append(f"simulator: {err}")
                else:
                    scored = simulated
                    record.update(simulation=scored.summary, simulated_requests=scored.requests,
                                  fidelity="simulate", n_minus_1=scored.n_minus_1)
                    if settled:
                        record["screened_out"] = settled
            elif dominated:
                record["screened_out"] = "estimate dominated by a simulated configuration that costs no more"
            amounts.update(scored.violations)
            reasons += scored.reasons
            record["memory_headroom_gib"] = compiled.kv_pool_gib()
        deployment = compiled.deployment
        costs = scored.costs if scored is not None else self.cost(deployment, None)
        values = scored.values if scored is not None else None
        profile = self.problem.profile(deployment.gpu)
        record.update({
            **costs,
            "replicas": deployment.replicas,
            "num_gpus": deployment.num_gpus,
            "accuracy_drop_pct": self.problem.ctx.accuracy_drop_pct(model, deployment.quantization, deployment.kv_cache_dtype),
            "violations": {k: v for k, v in amounts.items() if v > 0},
            "feasible": all(v <= 0 for v in amounts.values()),
            "reason": "; ".join(reasons),
            "profile": profile.source,
            "profile_calibrated": profile.calibrated,
            "error_kind": error_kind(profile.calibrated, compiled.gpu.architecture, compiled.model.moe is not None,
                                     compiled.roles[0].cost.engine),
            "eval_s": time.perf_counter() - start,
        })
        if screen is not None and record["feasible"] and record["fidelity"] == "simulate":
            screen.add(*record["estimate_objectives"])
            if record["simulated_requests"] == w.fidelity.search_requests and values is not None:
                screen.add_simulated(*values)
        return TrialOutcome(values, amounts, TrialRecord.model_validate(record))

    def simulate_rungs(self, model: str, compiled: CompiledDeployment,
                       screen: ScreenFront | None) -> tuple[Prediction, str | None]:
        """Simulate with the requests of each rung (:func:`simulation_rungs`, every candidate with the
        same seed: common random numbers) until one settles it: the last rung's prediction, and why
        a shorter rung settled it (None when the search's full length ran)."""
        w = self.problem.workload
        rungs = simulation_rungs(w.fidelity)
        for requests in rungs:
            scored = self.predict(model, compiled, requests, w.seed)
            if requests != rungs[-1]:
                settled = self.settled_early(scored, screen)
                if settled:
                    return scored, settled
        return scored, None

    def settled_early(self, scored: Prediction, screen: ScreenFront | None) -> str | None:
        """Why a short simulation settles a candidate (None when a longer one must run): its fleet
        saturates, or the 95% interval of its P99 lies wholly above an SLO target, or a simulated
        configuration that costs no more is faster than the interval's lower end. A candidate whose
        interval straddles a target or the simulated front runs the next rung."""
        summary, slo = scored.summary, self.problem.workload.slo
        head = f"settled by {scored.requests} simulated requests: "
        if summary.get("saturated"):
            return head + "the fleet saturates"
        for attr, metric in SLO_CONSTRAINTS.values():
            target = getattr(slo, attr)
            if target is not None and p99_low(summary, metric) > target:
                return head + f"the P99 {metric.upper()} interval lies above the SLO"
        if screen is not None and scored.values is not None and scored.feasible:
            latency = self.problem.workload.objective.latency
            if screen.dominated_simulated(scored.values[0], p99_low(summary, latency)):
                return head + "a simulated configuration that costs no more is faster than its P99 interval"
        return None

    def _estimate_fleet(self, candidate: Candidate, model: str, compiled: CompiledDeployment,
                        serving: int | None) -> tuple[CompiledDeployment, Summary]:
        """Estimate; when the derived fleet saturates, grow the replicas that carry the traffic by a
        quarter (at most three times), keeping the workload's spares on top of them."""
        summary = self._estimate(model, compiled)
        retries = 0
        while (summary.get("saturated") and serving is not None and "replicas" not in candidate.values
               and retries < SATURATION_RETRIES):
            serving = max(math.ceil(serving * 1.25), serving + 1)
            bigger = compiled.with_replicas(self._fleet(serving))
            if bigger.deployment.num_gpus > self.problem.ctx.max_gpus:
                break
            compiled, summary = bigger, self._estimate(model, bigger)
            retries += 1
        return compiled, summary


def _prediction_reasons(summary: Summary, violations: dict[str, float], slo, fidelity: str) -> list[str]:
    source = "simulated" if fidelity == "simulate" else "estimated"
    reasons = []
    if summary.get("saturated"):
        why = summary.get("saturation_reason") or summary.get("reason") or "queue grows without bound"
        reasons.append(f"saturated ({source}): {why}")
    for name, (attr, metric) in SLO_CONSTRAINTS.items():
        if violations.get(name, 0) > 0:
            reasons.append(f"{source} P99 {metric.upper()} {above(p99(summary, metric), getattr(slo, attr))}")
    return reasons
