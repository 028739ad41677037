"""Capacity planning: how many replicas a traffic level needs (seed section 7.4).

The seed's rule, by Little's law: a replica that holds ``C`` requests at once, each for
``occupancy_s`` seconds, serves ``C / occupancy_s`` requests per second, so

    replicas = ceil(peak QPS x occupancy_s / C), then ceil(replicas x (1 + redundancy))

:func:`replicas_needed` is that formula, for figures a platform engineer measured; the redundancy
buys spare replicas on top of those the traffic needs (:func:`fleet_size`, which also keeps one
spare when the targets must hold with one replica down).

For a deployment servopt predicts, ``C`` and ``occupancy_s`` come from the same engine model as the
estimate and the simulation, never from a formula of its own: :func:`replica_capacity` is the
analytic estimate's saturation rate of one replica (:func:`~servopt.costmodels.serving.estimate_compiled`
of the deployment with one replica, under the workload's traffic at a rate it cannot sustain: its
``requests_per_s`` is then the highest rate whose queues stay bounded, found by bisection on the
engine model), and ``C`` the requests in the replica at that rate. So a "requests/s per replica"
figure, ``replicas_needed`` and ``servopt predict`` of that replica agree, within the estimate's
error against the simulation (``benchmarks/bench_estimate_accuracy.py``); when the step model
changes, capacity follows. Multi-turn sessions are the one exception in degree: a saturated replica
frees no KV to keep conversations' histories, so their capacity counts no prefix-cache hits and is
a floor (10% under the highest stable session rate for ``examples/chat_sessions.yaml`` on an L40S;
bisecting for that rate instead cost 2.6 times the search's CPU), which may give a fleet one replica
more than it needs. (A formula that let every prompt of the ``C`` requests prefill in
parallel put 19.9 requests/s of 3,840-token prompts on 8 L4s, 122% of their compute.)

Example (the seed's: 10 QPS, 5 s per request, 20 concurrent requests per GPU, 30% redundancy):
    >>> replicas_needed(10, 5.0, 20)
    3
    >>> replicas_needed(10, 5.0, 20, redundancy=0.3)
    4
    >>> fleet_size(3, redundancy=0.3), fleet_size(3, redundancy=0.0, n_minus_1=True)
    (4, 4)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InputError
from .serving.analytic import estimate_compiled
from .serving.traffic import MAX_RATE_PER_S, PoissonArrival

# Guards against float noise such as 2.0000000000000004 rounding up to 3.
_EPSILON = 1e-9
# The estimate's capacity is searched from the offered rate upwards by this factor until one
# replica saturates (a handful of estimates from any offered rate to the largest a traffic allows).
_RATE_STEP = 4.0


def fleet_size(serving: int, redundancy: float = 0.0, n_minus_1: bool = False) -> int:
    """Replicas to deploy when ``serving`` carry the traffic: ``ceil(serving x (1 + redundancy))``
    (seed 7.4's spare share, for failures and bursts), and at least one spare with ``n_minus_1``
    (the targets must hold with one replica down)."""
    if serving < 1 or redundancy < 0:
        raise InputError(f"serving replicas must be at least 1 and redundancy non-negative (got {serving}, {redundancy})")
    return max(math.ceil(serving * (1 + redundancy) - _EPSILON), serving + (1 if n_minus_1 else 0))


def replicas_needed(peak_qps: float, occupancy_s: float, per_replica_concurrency: float,
                    redundancy: float = 0.0) -> int:
    """The seed's formula: replicas for ``peak_qps`` requests per second, each holding one of a
    replica's ``per_replica_concurrency`` slots for ``occupancy_s``, plus the spare share ``redundancy``."""
    if peak_qps < 0 or occupancy_s < 0:
        raise InputError(f"peak QPS and occupancy must be non-negative (got {peak_qps}, {occupancy_s})")
    if per_replica_concurrency <= 0:
        raise InputError(f"per-replica concurrency must be positive (got {per_replica_concurrency})")
    if redundancy < 0:
        raise InputError(f"redundancy must be non-negative (got {redundancy})")
    serving = max(math.ceil(peak_qps * occupancy_s / per_replica_concurrency - _EPSILON), 1)
    return fleet_size(serving, redundancy)


@dataclass(frozen=True)
class ReplicaCapacity:
    """What one replica sustains as the engine model predicts it: ``requests_per_s`` at saturation,
    with ``concurrency`` requests in it on average, each for ``occupancy_s`` (Little's law), and
    what stops it going faster (``limit``, the estimate's words)."""

    requests_per_s: float
    concurrency: float
    kv_utilization: float
    limit: str

    @property
    def occupancy_s(self) -> float:
        return self.concurrency / self.requests_per_s if self.requests_per_s > 0 else math.inf

    def needed(self, peak_qps: float) -> float:
        """Fractional replicas that ``peak_qps`` requests per second keep at this capacity."""
        return peak_qps / self.requests_per_s

    def replicas_for(self, peak_qps: float, redundancy: float = 0.0, n_minus_1: bool = False) -> int:
        """Replicas to deploy for ``peak_qps``: those that carry it, then the spares."""
        return fleet_size(max(math.ceil(self.needed(peak_qps) - _EPSILON), 1), redundancy, n_minus_1)

    def to_dict(self) -> dict:
        return {"requests_per_s": self.requests_per_s, "concurrency": self.concurrency,
                "occupancy_s": self.occupancy_s, "kv_utilization": self.kv_utilization, "limit": self.limit}


_OVERLOADS: dict[tuple[int, float], tuple[object, object]] = {}
_KEPT = 64


def _overloaded(traffic, rate_per_s: float):
    """``traffic`` at ``rate_per_s`` (open-loop Poisson when it is closed-loop), kept while
    ``traffic`` lives so the estimate's per-traffic caches hit on the next replica."""
    key = (id(traffic), rate_per_s)
    hit = _OVERLOADS.get(key)
    if hit is None or hit[0] is not traffic:
        arrival = traffic.arrival
        if getattr(arrival, "rate_per_s", None) is not None:
            arrival = arrival.model_copy(update={"rate_per_s": rate_per_s})
        else:
            arrival = PoissonArrival(kind="poisson", rate_per_s=rate_per_s)
        if len(_OVERLOADS) >= _KEPT:
            _OVERLOADS.clear()
        hit = _OVERLOADS[key] = (traffic, traffic.model_copy(update={"arrival": arrival}))
    return hit[1]


def replica_capacity(compiled, traffic, slo=None) -> ReplicaCapacity:
    """The saturation rate of one replica of ``compiled`` (a
    :class:`~servopt.costmodels.serving.compiled.CompiledDeployment`) under ``traffic``'s mix of
    requests (see the module docstring). A closed-loop traffic is taken as Poisson arrivals of the
    same requests. InputError when vLLM would not start the deployment or no rate is stable.

    Example (Mistral-7B on one RTX 4090, 1,024-token prompts and 256-token answers):
        >>> from servopt.costmodels.architectures import get_model
        >>> from servopt.costmodels.deployment import Deployment
        >>> from servopt.costmodels.hardware import get_gpu
        >>> from servopt.costmodels.profile import PerformanceProfile
        >>> from servopt.costmodels.serving import Traffic, compile_deployment
        >>> gpu = get_gpu("rtx4090")
        >>> compiled = compile_deployment(get_model("mistral-7b"), Deployment(gpu="rtx4090", max_model_len=1280),
        ...                               gpu, PerformanceProfile.spec_default(gpu))
        >>> traffic = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 10},
        ...     "input_tokens": {"kind": "fixed", "value": 1024}, "output_tokens": {"kind": "fixed", "value": 256}})
        >>> cap = replica_capacity(compiled, traffic)
        >>> 2 < cap.requests_per_s < 8, cap.replicas_for(10) == math.ceil(10 / cap.requests_per_s)
        (True, True)
    """
    one = compiled.with_replicas(1)
    rate = float(getattr(traffic.arrival, "rate_per_s", None) or 1.0)
    while True:
        try:
            summary = estimate_compiled(one, _overloaded(traffic, rate), slo).summary
        except ValueError as err:  # the estimate found no stable rate at all
            raise InputError(f"one replica sustains no request rate: {err}") from None
        if summary.saturated or rate >= MAX_RATE_PER_S:
            break
        rate = min(rate * _RATE_STEP, MAX_RATE_PER_S)
    limit = summary.saturation_reason
    inner = limit.rfind(" (")  # "offered load ... exceeds the estimated capacity of ... (why); ..."
    if inner >= 0:
        limit = limit[inner + 2:].split(")")[0]
    if summary.requests_per_s <= 0:
        raise InputError(f"one replica sustains no request rate ({limit})")
    return ReplicaCapacity(float(summary.requests_per_s), float(summary.mean_batch_size),
                           float(summary.kv_utilization), limit)
