"""Traffic spec: arrivals and prompt/output length distributions (the ``traffic:`` of a workload).

Example:
    >>> t = Traffic.model_validate({
    ...     "arrival": {"kind": "poisson", "rate_per_s": 10},
    ...     "input_tokens": {"kind": "lognormal", "mean": 2048, "sigma": 0.5},
    ...     "output_tokens": {"kind": "fixed", "value": 256}})
    >>> t.arrival.kind, t.input_tokens.kind
    ('poisson', 'lognormal')
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_STRICT = ConfigDict(extra="forbid", frozen=True)


# --- arrivals -----------------------------------------------------------------------------------
class PoissonArrival(BaseModel):
    """Open-loop Poisson arrivals."""

    model_config = _STRICT
    kind: Literal["poisson"]
    rate_per_s: float = Field(gt=0)


class GammaArrival(BaseModel):
    """Open-loop bursty arrivals: gamma inter-arrival times with coefficient of variation ``cv``."""

    model_config = _STRICT
    kind: Literal["gamma"]
    rate_per_s: float = Field(gt=0)
    cv: float = Field(gt=0, description="1 is Poisson; above 1 is burstier")


class ClosedLoopArrival(BaseModel):
    """N clients that each send a request when their previous one finishes
    (``vllm bench serve --max-concurrency``, aiperf)."""

    model_config = _STRICT
    kind: Literal["closed_loop"]
    concurrency: int = Field(ge=1)
    think_time_s: float = Field(default=0.0, ge=0)


class TraceArrival(BaseModel):
    """Replay a CSV or JSONL trace of (arrival time, input tokens, output tokens)."""

    model_config = _STRICT
    kind: Literal["trace"]
    path: str
    time_scale: float = Field(default=1.0, gt=0, description="multiply arrival times (0.5 = twice the rate)")


Arrival = Annotated[PoissonArrival | GammaArrival | ClosedLoopArrival | TraceArrival, Field(discriminator="kind")]


# --- lengths ------------------------------------------------------------------------------------
class FixedLength(BaseModel):
    model_config = _STRICT
    kind: Literal["fixed"]
    value: int = Field(ge=1)


class UniformLength(BaseModel):
    model_config = _STRICT
    kind: Literal["uniform"]
    low: int = Field(ge=1)
    high: int = Field(ge=1)

    @model_validator(mode="after")
    def _check(self) -> UniformLength:
        if self.high < self.low:
            raise ValueError(f"high ({self.high}) must be >= low ({self.low})")
        return self


class LognormalLength(BaseModel):
    """Lognormal with the given mean (tokens) and log-space standard deviation ``sigma``."""

    model_config = _STRICT
    kind: Literal["lognormal"]
    mean: float = Field(gt=0)
    sigma: float = Field(gt=0, le=5)
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)


class HistogramLength(BaseModel):
    """Empirical distribution: token counts (bin values) and their weights."""

    model_config = _STRICT
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
