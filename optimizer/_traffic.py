"""Summary figures of a traffic spec that capacity planning needs: rate, mean and tail lengths.

Example:
    >>> from servopt.costmodels.serving.traffic import Traffic
    >>> t = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 4},
    ...     "input_tokens": {"kind": "uniform", "low": 100, "high": 300},
    ...     "output_tokens": {"kind": "fixed", "value": 50}})
    >>> s = traffic_stats(t)
    >>> s.rate_per_s, s.mean_input_tokens, s.mean_output_tokens, s.in_flight_requests is None
    (4.0, 200.0, 50.0, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ..costmodels.errors import InputError
from ..costmodels.serving.traffic import (
    FixedLength,
    HistogramLength,
    LognormalLength,
    Traffic,
    UniformLength,
)

# Quantile grid on which a lognormal's mean (after clipping) and tail are read.
_GRID = (np.arange(4000) + 0.5) / 4000
TAIL_QUANTILE = 0.999


@dataclass(frozen=True)
class TrafficStats:
    """``rate_per_s`` for open-loop arrivals; ``in_flight_requests`` for closed-loop clients."""

    rate_per_s: float | None
    in_flight_requests: int | None
    mean_input_tokens: float
    mean_output_tokens: float
    tail_context_tokens: int

    def tokens_per_s(self) -> tuple[float, float]:
        """Offered input and output tokens per second (zero for closed-loop clients, whose rate
        only a prediction gives)."""
        rate = self.rate_per_s or 0.0
        return rate * self.mean_input_tokens, rate * self.mean_output_tokens


def _quantiles(dist) -> np.ndarray:
    """Length values at the grid's quantiles."""
    if isinstance(dist, FixedLength):
        return np.full(_GRID.shape, float(dist.value))
    if isinstance(dist, UniformLength):
        return np.floor(dist.low + _GRID * (dist.high - dist.low + 1))
    if isinstance(dist, LognormalLength):
        mu = math.log(dist.mean) - dist.sigma**2 / 2
        z = np.array([NormalDist().inv_cdf(q) for q in _GRID])
        values = np.exp(mu + dist.sigma * z)
        return np.clip(np.round(values), dist.min, dist.max if dist.max is not None else np.inf)
    if isinstance(dist, HistogramLength):
        weights = np.asarray(dist.weights, dtype=float)
        order = np.argsort(dist.values)
        cdf = np.cumsum(weights[order]) / weights.sum()
        return np.asarray(dist.values, dtype=float)[order][np.searchsorted(cdf, _GRID, side="left").clip(max=len(cdf) - 1)]
    raise InputError(f"unsupported length distribution {type(dist).__name__}")


def traffic_stats(traffic: Traffic) -> TrafficStats:
    """Rate and length figures of a traffic spec (trace arrivals are not summarized here)."""
    arrival = traffic.arrival
    if arrival.kind == "trace":
        raise InputError("traffic.arrival: optimize needs a rate; trace replay is not supported for search yet")
    if arrival.kind == "closed_loop" and arrival.requests_per_client is not None:
        raise InputError("traffic.arrival.requests_per_client describes one finite benchmark run (servopt predict); "
                         "optimize searches the steady state: leave it out")
    inputs, outputs = _quantiles(traffic.input_tokens), _quantiles(traffic.output_tokens)
    if traffic.max_context is not None:
        # Prompts are clipped first, then outputs to what the context leaves (as the simulator does).
        inputs = np.minimum(inputs, traffic.max_context - 1)
        outputs = np.minimum(outputs, traffic.max_context - np.quantile(inputs, 0.5))
    tail = float(np.quantile(inputs, TAIL_QUANTILE) + np.quantile(outputs, TAIL_QUANTILE))
    if traffic.max_context is not None:
        tail = min(tail, traffic.max_context)
    closed = arrival.kind == "closed_loop"
    return TrafficStats(
        rate_per_s=None if closed else float(arrival.rate_per_s),
        in_flight_requests=arrival.concurrency if closed else None,
        mean_input_tokens=float(inputs.mean()),
        mean_output_tokens=float(max(outputs.mean(), 1.0)),
        tail_context_tokens=int(math.ceil(tail)),
    )


def max_model_len_for(stats: TrafficStats, model_max_context: int, requested: int | None = None) -> int:
    """``--max-model-len``: the user's value, else the traffic's P99.9 context rounded up to 1k,
    never above what the model supports."""
    if requested is not None:
        if requested > model_max_context:
            raise InputError(f"max_model_len: {requested} exceeds the model's maximum context of {model_max_context}")
        return requested
    return min(int(math.ceil(stats.tail_context_tokens / 1024) * 1024), model_max_context)
