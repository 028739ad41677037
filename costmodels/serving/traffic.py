"""Traffic spec: arrivals and prompt/output length distributions (the ``traffic:`` of a workload).

Each arrival process and length distribution is one pydantic class that also samples itself with a
seeded ``numpy.random.Generator``; :func:`read_trace` reads a CSV or JSONL trace.

Example:
    >>> t = Traffic.model_validate({
    ...     "arrival": {"kind": "poisson", "rate_per_s": 10},
    ...     "input_tokens": {"kind": "lognormal", "mean": 2048, "sigma": 0.5},
    ...     "output_tokens": {"kind": "fixed", "value": 256}})
    >>> t.arrival.kind, t.input_tokens.kind
    ('poisson', 'lognormal')
    >>> rng = np.random.default_rng(0)
    >>> t.output_tokens.sample(rng, 3).tolist(), round(float(t.arrival.arrival_times_s(rng, 1000)[-1]), -1)
    ([256, 256, 256], 100.0)
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import InputError

_STRICT = ConfigDict(extra="forbid", frozen=True)


# --- arrivals -----------------------------------------------------------------------------------
class PoissonArrival(BaseModel):
    """Open-loop Poisson arrivals."""

    model_config = _STRICT
    kind: Literal["poisson"]
    rate_per_s: float = Field(gt=0)

    @property
    def interarrival_cv2(self) -> float:
        """Squared coefficient of variation of the inter-arrival times (queueing formulas)."""
        return 1.0

    def arrival_times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` arrival times, the first one inter-arrival time after zero."""
        return np.cumsum(rng.exponential(1.0 / self.rate_per_s, n))


class GammaArrival(BaseModel):
    """Open-loop bursty arrivals: gamma inter-arrival times with coefficient of variation ``cv``."""

    model_config = _STRICT
    kind: Literal["gamma"]
    rate_per_s: float = Field(gt=0)
    cv: float = Field(gt=0, description="1 is Poisson; above 1 is burstier")

    @property
    def interarrival_cv2(self) -> float:
        return self.cv**2

    def arrival_times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # Gamma with shape 1/cv^2 has coefficient of variation cv; the scale sets the mean 1/rate.
        shape = 1.0 / self.cv**2
        return np.cumsum(rng.gamma(shape, 1.0 / (self.rate_per_s * shape), n))


class ClosedLoopArrival(BaseModel):
    """N clients that each send a request when their previous one finishes
    (``vllm bench serve --max-concurrency``, aiperf ``--concurrency``).

    By default the run is the steady state of an endless benchmark (warm-up and cool-down excluded).
    ``requests_per_client`` describes a finite benchmark run instead, as those clients measure it:
    all ``concurrency`` clients start at once on an idle server (aiperf waits for its warm-up
    requests to finish before profiling; ``vllm bench serve --request-rate inf`` releases every
    request at once behind the concurrency cap), ``concurrency x requests_per_client`` requests
    are sent, and every one of them is measured, the opening burst and the closing drain included.

    Example:
        >>> ClosedLoopArrival(kind="closed_loop", concurrency=8, requests_per_client=50).requests_per_client
        50
    """

    model_config = _STRICT
    kind: Literal["closed_loop"]
    concurrency: int = Field(ge=1)
    think_time_s: float = Field(default=0.0, ge=0)
    requests_per_client: int | None = Field(
        default=None, ge=1, description="a finite benchmark run: this many requests per client, all measured"
    )

    @property
    def benchmark_requests(self) -> int | None:
        """Requests of a finite benchmark run (None for the steady state)."""
        return None if self.requests_per_client is None else self.concurrency * self.requests_per_client


class TraceRecords(BaseModel):
    """A trace given inline, one list entry per request: what a benchmark client sent.

    ``cached_tokens`` (optional) is each prompt's prefix that the server's prefix cache already
    holds, its own (a prompt an earlier run sent), not shared with the other requests.
    """

    model_config = _STRICT
    arrival_s: list[float] = Field(min_length=1)
    input_tokens: list[int] = Field(min_length=1)
    output_tokens: list[int] = Field(min_length=1)
    cached_tokens: list[int] | None = None

    @model_validator(mode="after")
    def _check(self) -> TraceRecords:
        n = len(self.arrival_s)
        if any(len(v) != n for v in (self.input_tokens, self.output_tokens, self.cached_tokens or self.arrival_s)):
            raise ValueError("arrival_s, input_tokens, output_tokens and cached_tokens need one entry per request")
        if any(not np.isfinite(t) or t < 0 for t in self.arrival_s):
            raise ValueError("arrival_s must be finite and non-negative")
        if min(self.input_tokens) < 1 or min(self.output_tokens) < 1 or min(self.cached_tokens or [0]) < 0:
            raise ValueError("input and output tokens must be at least 1, cached tokens at least 0")
        return self


class TraceArrival(BaseModel):
    """Replay a trace of (arrival time, input tokens, output tokens): a CSV or JSONL file (``path``) or ``records``."""

    model_config = _STRICT
    kind: Literal["trace"]
    path: str | None = None
    records: TraceRecords | None = None
    time_scale: float = Field(default=1.0, gt=0, description="multiply arrival times (0.5 = twice the rate)")

    @model_validator(mode="after")
    def _one_source(self) -> TraceArrival:
        if (self.path is None) == (self.records is None):
            raise ValueError("a trace needs exactly one of path (a CSV or JSONL file) and records")
        return self


Arrival = Annotated[PoissonArrival | GammaArrival | ClosedLoopArrival | TraceArrival, Field(discriminator="kind")]


# --- lengths ------------------------------------------------------------------------------------
class _Length(BaseModel):
    """A token-count distribution: draws integers >= 1 and knows its first two moments."""

    model_config = _STRICT

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def mean_tokens(self) -> float:
        raise NotImplementedError

    @property
    def cv2(self) -> float:
        """Squared coefficient of variation (variance / mean^2)."""
        raise NotImplementedError


class FixedLength(_Length):
    kind: Literal["fixed"]
    value: int = Field(ge=1)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    @property
    def mean_tokens(self) -> float:
        return float(self.value)

    @property
    def cv2(self) -> float:
        return 0.0


class UniformLength(_Length):
    kind: Literal["uniform"]
    low: int = Field(ge=1)
    high: int = Field(ge=1)

    @model_validator(mode="after")
    def _check(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.low, self.high, n, endpoint=True)

    @property
    def mean_tokens(self) -> float:
        return (self.low + self.high) / 2

    @property
    def cv2(self) -> float:
        width = self.high - self.low + 1
        return (width**2 - 1) / 12 / self.mean_tokens**2


class LognormalLength(_Length):
    """Lognormal with the given mean (tokens) and log-space standard deviation ``sigma``."""

    kind: Literal["lognormal"]
    mean: float = Field(gt=0)
    sigma: float = Field(gt=0, le=5)
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check(self) -> LognormalLength:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # E[exp(N(mu, s^2))] = exp(mu + s^2/2), so this mu gives the requested mean.
        mu = np.log(self.mean) - self.sigma**2 / 2
        draws = np.rint(rng.lognormal(mu, self.sigma, n)).astype(np.int64)
        return np.clip(draws, self.min, self.max if self.max is not None else None)

    @property
    def mean_tokens(self) -> float:
        return self.mean

    @property
    def cv2(self) -> float:
        return float(np.expm1(self.sigma**2))


class HistogramLength(_Length):
    """Empirical distribution: token counts (bin values) and their weights."""

    kind: Literal["histogram"]
    values: list[int] = Field(min_length=1)
    weights: list[float] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> HistogramLength:
        if len(self.values) != len(self.weights):
            raise ValueError("values and weights must have the same length")
        if any(v < 1 for v in self.values):
            raise ValueError("every value must be at least 1 token")
        if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
            raise ValueError("weights must be non-negative with a positive sum")
        return self

    @property
    def _probabilities(self) -> np.ndarray:
        weights = np.asarray(self.weights, dtype=float)
        return weights / weights.sum()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, p=self._probabilities)

    @property
    def mean_tokens(self) -> float:
        return float(np.dot(self.values, self._probabilities))

    @property
    def cv2(self) -> float:
        values = np.asarray(self.values, dtype=float)
        mean = self.mean_tokens
        return float(np.dot((values - mean) ** 2, self._probabilities)) / mean**2


LengthDistribution = Annotated[
    FixedLength | UniformLength | LognormalLength | HistogramLength, Field(discriminator="kind")
]


class Traffic(BaseModel):
    """What a deployment must serve."""

    model_config = _STRICT

    arrival: Arrival
    input_tokens: LengthDistribution | None = Field(default=None, description="not needed with a trace")
    output_tokens: LengthDistribution | None = Field(default=None, description="not needed with a trace")
    shared_prefix_fraction: float = Field(
        default=0.0, ge=0, lt=1, description="share of each prompt that a prefix cache can reuse"
    )
    max_context: int | None = Field(default=None, ge=2, description="prompt + output are clipped to this")

    @model_validator(mode="after")
    def _check_lengths(self) -> Traffic:
        if self.arrival.kind != "trace" and (self.input_tokens is None or self.output_tokens is None):
            raise ValueError("input_tokens and output_tokens are required unless arrival.kind is 'trace'")
        return self

    def read_trace(self) -> RequestTrace:
        """The trace of a ``trace`` arrival; its length columns may be left out when the spec gives
        ``input_tokens`` and ``output_tokens`` distributions."""
        if self.arrival.kind != "trace":
            raise InputError("traffic.arrival.kind is not 'trace'")
        records = self.arrival.records
        if records is not None:
            arrival = np.asarray(records.arrival_s, dtype=float)
            order = np.argsort(arrival, kind="stable")
            column = lambda values: None if values is None else np.asarray(values, dtype=np.int64)[order]  # noqa: E731
            return RequestTrace((arrival[order] - arrival[order][0]) * self.arrival.time_scale,
                                column(records.input_tokens), column(records.output_tokens),
                                column(records.cached_tokens))
        need = self.input_tokens is None or self.output_tokens is None
        return read_trace(self.arrival.path, need_lengths=need, time_scale=self.arrival.time_scale)


# --- traces -------------------------------------------------------------------------------------
# Accepted column names, first match wins (vLLM bench and common trace dumps use these spellings).
TRACE_COLUMNS = {
    "arrival_s": ("arrival_s", "arrival_time_s", "arrival_time", "timestamp_s", "timestamp", "time_s", "time"),
    "input_tokens": ("input_tokens", "input_len", "prompt_tokens", "input_length", "prompt_len"),
    "output_tokens": ("output_tokens", "output_len", "completion_tokens", "output_length"),
    "cached_tokens": ("cached_tokens", "prefix_cached_tokens"),
}


@dataclass(frozen=True)
class RequestTrace:
    """Arrival times (seconds, sorted) and token counts of a replayed trace; lengths may be absent.

    ``cached_tokens``, when the trace has them, is each prompt's own prefix-cache hit.
    """

    arrival_s: np.ndarray
    input_tokens: np.ndarray | None
    output_tokens: np.ndarray | None
    cached_tokens: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_s)


def _rows(path: Path) -> list[dict]:
    """The trace's records as dicts, from CSV (header row) or JSONL (one object per line)."""
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(f"trace '{path}' cannot be read: {err.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"trace '{path}' is not a text file (expected CSV or JSONL)") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InputError(f"trace '{path}' is empty")
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson") or lines[0].lstrip().startswith("{"):
        rows = []
        for number, line in enumerate(lines, start=1):
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"trace '{path}' line {number} is not valid JSON: {err.msg}") from None
            if not isinstance(row, dict):
                raise InputError(f"trace '{path}' line {number} must be a JSON object")
            rows.append(row)
        return rows
    return list(csv.DictReader(lines))


def _column(rows: list[dict], field: str, path: Path, required: bool) -> np.ndarray | None:
    names = {key.strip().lower(): key for key in rows[0]}
    key = next((names[n] for n in TRACE_COLUMNS[field] if n in names), None)
    if key is None:
        if required:
            raise InputError(
                f"trace '{path}' has no {field} column; name it one of {', '.join(TRACE_COLUMNS[field])}"
            )
        return None
    values = np.empty(len(rows))
    for number, row in enumerate(rows, start=1):
        try:
            values[number - 1] = float(row.get(key))
        except (TypeError, ValueError):
            raise InputError(f"trace '{path}' record {number}: {key} = {row.get(key)!r} is not a number") from None
    if not np.all(np.isfinite(values)):
        raise InputError(f"trace '{path}': {key} has non-finite values")
    return values


def read_trace(path: str | Path, *, need_lengths: bool = True, time_scale: float = 1.0) -> RequestTrace:
    """Read a CSV or JSONL trace of (arrival time s, input tokens, output tokens), sorted by arrival.

    Arrival times are shifted so that the first request arrives at zero. Every way the file can be
    unusable raises :class:`InputError` naming the file and the problem.
    """
    path = Path(path)
    rows = _rows(path)
    arrival = _column(rows, "arrival_s", path, True)
    if np.any(arrival < 0):
        raise InputError(f"trace '{path}': arrival times cannot be negative")
    lengths = {}
    for field in ("input_tokens", "output_tokens", "cached_tokens"):
        values = _column(rows, field, path, need_lengths and field != "cached_tokens")
        if values is not None:
            least = 0 if field == "cached_tokens" else 1
            if np.any(values < least) or np.any(values != np.round(values)):
                raise InputError(f"trace '{path}': {field} must be whole numbers of at least {least}")
            values = values.astype(np.int64)
        lengths[field] = values
    order = np.argsort(arrival, kind="stable")
    arrival = (arrival[order] - arrival[order][0]) * time_scale
    pick = {k: (v[order] if v is not None else None) for k, v in lengths.items()}
    return RequestTrace(arrival, pick["input_tokens"], pick["output_tokens"], pick["cached_tokens"])
