"""Summary figures of a traffic spec that capacity planning needs: rate, mean and tail lengths.

Tenant classes mix their length distributions by their shares; multi-turn sessions are summarised
from a fixed sample of whole conversations (prompts grow with the history), their rate is sessions
per second times the mean turns, and their longest request is a whole conversation of the most
turns at the longest prompts and answers.

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
from collections.abc import Callable
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from ..costmodels.errors import MAX_TOKENS, InputError
from ..costmodels.serving.requests import draw_requests
from ..costmodels.serving.traffic import (
    DatasetLength,
    FixedLength,
    HistogramLength,
    LognormalLength,
    Traffic,
    UniformLength,
)

# Quantile grid on which a lognormal's mean (after clipping) is read.
_GRID = (np.arange(4000) + 0.5) / 4000
# A length distribution without a declared maximum (a lognormal without max) is bounded at this
# quantile for --max-model-len: about one request in 10,000 may be longer, and vLLM rejects it.
UNBOUNDED_QUANTILE = 0.9999
# Requests of whole conversations drawn to summarise multi-turn sessions (a fixed seed).
SESSION_SAMPLE = 8000


@dataclass(frozen=True)
class TrafficStats:
    """``rate_per_s`` for open-loop arrivals; ``in_flight_requests`` for closed-loop clients."""

    rate_per_s: float | None
    in_flight_requests: int | None
    mean_input_tokens: float
    mean_output_tokens: float
    max_context_tokens: int
    max_context_basis: str
    median_context_tokens: int

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
    if isinstance(dist, DatasetLength):
        return np.quantile(dist.tokens.astype(float), _GRID, method="inverted_cdf")
    raise InputError(f"unsupported length distribution {type(dist).__name__}")


def traffic_stats(traffic: Traffic) -> TrafficStats:
    """Rate and length figures of a traffic spec (trace arrivals are not summarized here)."""
    arrival = traffic.arrival
    if arrival.kind == "trace":
        raise InputError("traffic.arrival: optimize needs a rate; trace replay is not supported for search yet")
    if arrival.kind == "closed_loop" and arrival.requests_per_client is not None:
        raise InputError("traffic.arrival.requests_per_client describes one finite benchmark run (servopt predict); "
                         "optimize searches the steady state: leave it out")
    bounds = []
    for input_dist, output_dist in traffic.class_lengths():
        prompt, prompt_basis = length_bound(input_dist, "prompt")
        output, output_basis = length_bound(output_dist, "output")
        bounds.append((prompt + output, f"{prompt_basis} + {output_basis}"))
    longest, basis = max(bounds)
    rate = None if arrival.kind == "closed_loop" else float(arrival.rate_per_s)
    if arrival.kind == "sessions":
        turns = arrival.turns.most_tokens
        longest, basis = turns * longest, f"a longest conversation: {turns} turns of ({basis})"
        groups, sessions = _session_sample(traffic)
        rate *= len(groups[0][1]) / sessions  # requests per second: sessions per second times their turns
    else:
        groups = _class_quantiles(traffic)
    if traffic.max_context is not None and traffic.max_context < longest:
        longest, basis = traffic.max_context, f"traffic.max_context ({traffic.max_context}), which clips longer requests"
    return TrafficStats(
        rate_per_s=rate,
        in_flight_requests=arrival.concurrency if arrival.kind == "closed_loop" else None,
        mean_input_tokens=float(sum(share * prompts.mean() for share, prompts, _ in groups)),
        mean_output_tokens=float(max(sum(share * answers.mean() for share, _, answers in groups), 1.0)),
        max_context_tokens=int(min(longest, MAX_TOKENS)), max_context_basis=basis,
        median_context_tokens=int(_median(groups, 1) + _median(groups, 2)),
    )


def _class_quantiles(traffic: Traffic) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """(share, prompt lengths, output lengths at the quantile grid) of each class."""
    groups = []
    for share, (input_dist, output_dist) in zip(traffic.class_shares, traffic.class_lengths()):
        prompts, answers = _quantiles(input_dist), _quantiles(output_dist)
        if traffic.max_context is not None:
            # Prompts are clipped first, then outputs to what the context leaves (as the simulator does).
            prompts = np.minimum(prompts, traffic.max_context - 1)
            answers = np.minimum(answers, traffic.max_context - np.quantile(prompts, 0.5))
        groups.append((float(share), prompts, answers))
    return groups


def _session_sample(traffic: Traffic) -> tuple[list[tuple[float, np.ndarray, np.ndarray]], int]:
    """Prompt (with history) and output lengths of a fixed sample of whole conversations, as one
    group, and how many conversations they are."""
    limit = traffic.max_context or MAX_TOKENS
    drawn = draw_requests(traffic, SESSION_SAMPLE, np.random.default_rng(0), max_model_len=limit, block_size=16,
                          prefix_caching=False, context_source="traffic.max_context")
    return [(1.0, drawn.input_tokens.astype(float), drawn.output_tokens.astype(float))], len(np.unique(drawn.session))


def _median(groups: list[tuple[float, np.ndarray, np.ndarray]], column: int) -> float:
    """The median of the groups' ``column`` (1: prompts, 2: outputs), each group weighted by its share."""
    if len(groups) == 1:
        return float(np.median(groups[0][column]))
    values = np.concatenate([g[column] for g in groups])
    weights = np.concatenate([np.full(len(g[column]), g[0] / len(g[column])) for g in groups])
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][min(np.searchsorted(cumulative, 0.5 * cumulative[-1]), len(values) - 1)])


def length_bound(dist, what: str) -> tuple[int, str]:
    """The longest ``what`` (prompt or output) the distribution can draw, and how it is known: a
    declared maximum (fixed value, uniform high, lognormal max, largest histogram value), else the
    P99.99 of an unbounded lognormal."""
    if isinstance(dist, FixedLength):
        return dist.value, f"fixed {what} {dist.value}"
    if isinstance(dist, UniformLength):
        return dist.high, f"maximum {what} {dist.high}"
    if isinstance(dist, HistogramLength):
        return max(dist.values), f"largest {what} {max(dist.values)}"
    if isinstance(dist, DatasetLength):
        return dist.most_tokens, f"largest {what} of {dist.name} {dist.most_tokens}"
    if isinstance(dist, LognormalLength):
        if dist.max is not None:
            return dist.max, f"maximum {what} {dist.max}"
        mu = math.log(dist.mean) - dist.sigma**2 / 2
        tail = max(int(math.ceil(math.exp(mu + dist.sigma * NormalDist().inv_cdf(UNBOUNDED_QUANTILE)))), dist.min)
        return tail, f"P99.99 {what} {tail} (the lognormal declares no max; longer requests are rejected)"
    raise InputError(f"unsupported length distribution {type(dist).__name__}")


def max_model_len_for(stats: TrafficStats, model_max_context: int, requested: int | None = None,
                      fix: Callable[[int], str] | None = None) -> tuple[int, str]:
    """``--max-model-len`` and why: the workload's value, else the longest request the traffic
    declares (prompt + output maxima), never above what vLLM accepts for the model's config
    (``model_max_context``). Traffic whose median request does not fit is refused (the simulator
    would only clip it: :func:`~servopt.costmodels.serving.traffic.check_context`); ``fix(tokens)``
    says how to serve that many tokens (:func:`~servopt.costmodels.architectures.longer_context_fix`)."""
    def how(tokens: int) -> str:
        return fix(tokens) if fix else f"choose a model with a context of at least {tokens:,}"

    if requested is not None and requested > model_max_context:
        raise InputError(f"max_model_len: {requested} exceeds the model's maximum context of {model_max_context}: "
                         f"{how(requested)}")
    limit = requested or model_max_context
    if stats.median_context_tokens > limit:
        where = "max_model_len" if requested else "the model's maximum context"
        raise InputError(f"traffic: the median request needs {stats.median_context_tokens:,} tokens (prompt + output), "
                         f"more than {where} of {limit:,}: shorten input_tokens/output_tokens, set traffic.max_context "
                         f"to clip them as a benchmark client would, or serve longer contexts: "
                         f"{how(stats.median_context_tokens)}")
    if requested is not None:
        return requested, "the workload's max_model_len"
    if stats.max_context_tokens > model_max_context:
        return model_max_context, (f"the model's maximum context; the traffic declares longer requests "
                                   f"({stats.max_context_basis} = {stats.max_context_tokens}), which vLLM rejects; "
                                   f"to serve them: {how(stats.max_context_tokens)}")
    return stats.max_context_tokens, f"covers the longest request: {stats.max_context_basis}"
