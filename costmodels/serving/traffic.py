"""Traffic spec: arrivals and prompt/output length distributions (the ``traffic:`` of a workload).

Each arrival process and length distribution is one pydantic class that also samples itself with a
seeded ``numpy.random.Generator``; a ``trace`` arrival replays a file (:mod:`.traces` reads the
formats: plain CSV/JSONL, the Azure LLM inference traces, Mooncake's JSONL) or inline records. A
``sessions`` arrival sends multi-turn conversations (:class:`SessionArrival`); a ``dataset`` length
draws from a shipped public set (:mod:`.datasets`); ``classes`` split the arrivals into tenant
classes with their own priority, lengths and targets (:class:`TrafficClass`).

Bounds keep runs physical and finite: rates of 0.001 to a million requests/s (below one request per
1,000 s a server is idle between requests, and the simulated clock would lose the precision of a
step time over enough gaps), token counts up to :data:`~servopt.costmodels.errors.MAX_TOKENS`,
closed-loop runs up to :data:`MAX_BENCHMARK_REQUESTS` requests.

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

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, field_validator, model_validator

from ..errors import MAX_INT, MAX_TOKENS, InputError, Name, Spec, Tokens
from .datasets import catalog, dataset
from .slo import SLO
from .traces import MAX_TRACE_REQUESTS, MAX_TRACE_SPAN_S, TIME_UNITS, TRACE_FORMATS, RequestTrace, read_trace, replay

MIN_RATE_PER_S = 1e-3
MAX_RATE_PER_S = 1e6
MAX_CONCURRENCY = 10_000
MAX_BENCHMARK_REQUESTS = MAX_TRACE_REQUESTS  # the same simulator, the same bound
MAX_TURNS = 1000
MAX_CLASSES = 64
MAX_THINK_S = 86400.0
# Shares of the classes must add up to one, to this tolerance (YAML decimals such as 0.1 + 0.2).
SHARE_TOLERANCE = 1e-6
RatePerS = Annotated[float, Field(ge=MIN_RATE_PER_S, le=MAX_RATE_PER_S)]


# --- arrivals -----------------------------------------------------------------------------------
class PoissonArrival(Spec):
    """Open-loop Poisson arrivals."""

    kind: Literal["poisson"]
    rate_per_s: RatePerS

    @property
    def interarrival_cv2(self) -> float:
        """Squared coefficient of variation of the inter-arrival times (queueing formulas)."""
        return 1.0

    def arrival_times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` arrival times, the first one inter-arrival time after zero."""
        return np.cumsum(rng.exponential(1.0 / self.rate_per_s, n))


class GammaArrival(Spec):
    """Open-loop bursty arrivals: gamma inter-arrival times with coefficient of variation ``cv``.

    ``cv`` runs from 0.001 (clockwork arrivals) to 100 (most requests in rare bursts); beyond those
    the gamma shape 1/cv^2 leaves floating point.
    """

    kind: Literal["gamma"]
    rate_per_s: RatePerS
    cv: float = Field(ge=1e-3, le=100, description="1 is Poisson; above 1 is burstier")

    @property
    def interarrival_cv2(self) -> float:
        return self.cv**2

    def arrival_times_s(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # Gamma with shape 1/cv^2 has coefficient of variation cv; the scale sets the mean 1/rate.
        shape = 1.0 / self.cv**2
        return np.cumsum(rng.gamma(shape, 1.0 / (self.rate_per_s * shape), n))


class ClosedLoopArrival(Spec):
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

    kind: Literal["closed_loop"]
    concurrency: int = Field(ge=1, le=MAX_CONCURRENCY)
    think_time_s: float = Field(default=0.0, ge=0, le=86400)
    requests_per_client: int | None = Field(
        default=None, ge=1, le=MAX_BENCHMARK_REQUESTS,
        description="a finite benchmark run: this many requests per client, all measured",
    )

    @model_validator(mode="after")
    def _check_size(self) -> ClosedLoopArrival:
        if self.benchmark_requests is not None and self.benchmark_requests > MAX_BENCHMARK_REQUESTS:
            raise ValueError(f"concurrency x requests_per_client = {self.benchmark_requests:,} requests; servopt "
                             f"simulates at most {MAX_BENCHMARK_REQUESTS:,} in one run")
        return self

    @property
    def benchmark_requests(self) -> int | None:
        """Requests of a finite benchmark run (None for the steady state)."""
        return None if self.requests_per_client is None else self.concurrency * self.requests_per_client


def _python_list(value: object) -> object:
    """Records built by code may come as numpy arrays: their Python values (a user's YAML never does)."""
    return value.tolist() if isinstance(value, np.ndarray) else value


class TraceRecords(Spec):
    """A trace given inline, one list entry per request (seconds and tokens): what a benchmark client sent.

    ``cached_tokens`` (optional) is each prompt's prefix that the server's prefix cache already
    holds, its own (a prompt an earlier run sent), not shared with the other requests.
    """

    arrival_s: Annotated[list[Annotated[float, Field(ge=0)]], BeforeValidator(_python_list)] = Field(
        min_length=1, max_length=MAX_TRACE_REQUESTS)
    input_tokens: Annotated[list[Tokens], BeforeValidator(_python_list)] = Field(min_length=1)
    output_tokens: Annotated[list[Tokens], BeforeValidator(_python_list)] = Field(min_length=1)
    cached_tokens: Annotated[list[Annotated[int, Field(ge=0, le=MAX_TOKENS)]], BeforeValidator(_python_list)] | None = None

    @model_validator(mode="after")
    def _check(self) -> TraceRecords:
        n = len(self.arrival_s)
        if any(len(v) != n for v in (self.input_tokens, self.output_tokens, self.cached_tokens or self.arrival_s)):
            raise ValueError("arrival_s, input_tokens, output_tokens and cached_tokens need one entry per request")
        return self


class TraceArrival(Spec):
    """Replay a trace of (arrival time, input tokens, output tokens): a file (``path``, see
    :mod:`.traces`) or ``records`` given inline.

    ``format`` is detected from the columns unless given; ``time_unit`` says what the numbers of the
    time column count (default: the format's, or the column name's ``_s``/``_ms``/``_us`` suffix; a
    column that says no unit is read as seconds only when the times fit no other unit, else refused
    until ``time_unit`` is given: :mod:`.traces`; Azure traces hold datetimes). A relative ``path``
    is relative to the workload file. ``start_s`` and ``duration_s`` replay a
    window (seconds from the first request); ``time_scale`` multiplies the gaps (0.5 = twice the rate).

    Example:
        >>> TraceArrival(kind="trace", path="conversation_trace.jsonl", time_unit="ms").time_unit
        'ms'
    """

    kind: Literal["trace"]
    path: Name | None = None
    records: TraceRecords | None = None
    format: Literal["auto", *TRACE_FORMATS] = "auto"
    time_unit: Literal[*TIME_UNITS] | None = None
    time_scale: float = Field(default=1.0, ge=1e-3, le=1e3, description="multiply arrival times (0.5 = twice the rate)")
    start_s: float = Field(default=0.0, ge=0, le=MAX_TRACE_SPAN_S, description="replay from this many seconds in")
    duration_s: float | None = Field(default=None, gt=0, le=MAX_TRACE_SPAN_S, description="replay this long")
    max_concurrency: int | None = Field(
        default=None, ge=1, le=MAX_CONCURRENCY,
        description="at most this many requests in flight: a request goes at its time or when one finishes, "
                    "whichever is later (vllm bench serve --max-concurrency)")

    @model_validator(mode="after")
    def _one_source(self) -> TraceArrival:
        if (self.path is None) == (self.records is None):
            raise ValueError("a trace needs exactly one of path (a CSV or JSONL file) and records")
        return self

    def read(self, need_lengths: bool = True) -> RequestTrace:
        """The requests this arrival replays (lengths may be left out when ``need_lengths`` is False)."""
        window = {"time_scale": self.time_scale, "start_s": self.start_s, "duration_s": self.duration_s}
        if self.records is not None:
            r = self.records
            return replay(np.asarray(r.arrival_s, dtype=float), np.asarray(r.input_tokens, dtype=np.int64),
                          np.asarray(r.output_tokens, dtype=np.int64),
                          None if r.cached_tokens is None else np.asarray(r.cached_tokens, dtype=np.int64),
                          "traffic.arrival.records", **window)
        return read_trace(self.path, format=self.format, time_unit=self.time_unit, need_lengths=need_lengths,
                          **window)


# --- lengths ------------------------------------------------------------------------------------
class _Length(Spec):
    """A token-count distribution: draws integers from 1 to MAX_TOKENS and knows its first two moments."""

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    @property
    def mean_tokens(self) -> float:
        raise NotImplementedError

    @property
    def cv2(self) -> float:
        """Squared coefficient of variation (variance / mean^2)."""
        raise NotImplementedError

    @property
    def fewest_tokens(self) -> int:
        """The smallest count it can draw."""
        raise NotImplementedError

    @property
    def most_tokens(self) -> int | None:
        """The largest count it can draw (None: no declared bound, as a lognormal without ``max``)."""
        raise NotImplementedError


class FixedLength(_Length):
    kind: Literal["fixed"]
    value: Tokens

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    @property
    def mean_tokens(self) -> float:
        return float(self.value)

    @property
    def cv2(self) -> float:
        return 0.0

    @property
    def fewest_tokens(self) -> int:
        return self.value

    @property
    def most_tokens(self) -> int:
        return self.value


class UniformLength(_Length):
    kind: Literal["uniform"]
    low: Tokens
    high: Tokens

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

    @property
    def fewest_tokens(self) -> int:
        return self.low

    @property
    def most_tokens(self) -> int:
        return self.high


class LognormalLength(_Length):
    """Lognormal with the given mean (tokens) and log-space standard deviation ``sigma``, clipped to
    ``[min, max]`` (``max`` defaults to MAX_TOKENS)."""

    kind: Literal["lognormal"]
    mean: float = Field(ge=1, le=MAX_TOKENS)
    sigma: float = Field(gt=0, le=5)
    min: Tokens = 1
    max: Tokens | None = None

    @model_validator(mode="after")
    def _check(self) -> LognormalLength:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) must be >= min ({self.min})")
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # E[exp(N(mu, s^2))] = exp(mu + s^2/2), so this mu gives the requested mean. Clipped as floats
        # first: a far tail draw would overflow int64.
        mu = np.log(self.mean) - self.sigma**2 / 2
        draws = np.clip(rng.lognormal(mu, self.sigma, n), self.min, self.max or MAX_TOKENS)
        return np.rint(draws).astype(np.int64)

    @property
    def mean_tokens(self) -> float:
        return self.mean

    @property
    def cv2(self) -> float:
        return float(np.expm1(self.sigma**2))

    @property
    def fewest_tokens(self) -> int:
        return self.min

    @property
    def most_tokens(self) -> int | None:
        return self.max


class HistogramLength(_Length):
    """Empirical distribution: token counts (bin values) and their weights."""

    kind: Literal["histogram"]
    values: list[Tokens] = Field(min_length=1, max_length=1_000_000)
    weights: list[Annotated[float, Field(ge=0, le=1e12)]] = Field(min_length=1, max_length=1_000_000)

    @model_validator(mode="after")
    def _check(self) -> HistogramLength:
        if len(self.values) != len(self.weights):
            raise ValueError("values and weights must have the same length")
        if sum(self.weights) <= 0:
            raise ValueError("weights must have a positive sum")
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

    @property
    def fewest_tokens(self) -> int:
        return min(v for v, w in zip(self.values, self.weights) if w > 0)

    @property
    def most_tokens(self) -> int:
        return max(v for v, w in zip(self.values, self.weights) if w > 0)


class DatasetLength(_Length):
    """A shipped public set's prompt or output lengths (:mod:`.datasets`: ``sharegpt``,
    ``azure-conv-2023``, ``azure-code-2023``, ``arxiv-summarization``), drawn with replacement.

    ``column`` is the key it stands under (``input_tokens`` draws prompts, ``output_tokens``
    outputs) and is filled in from it; when both keys name the same set, :func:`sample_lengths`
    draws each request's pair together.

    Example:
        >>> DatasetLength(kind="dataset", name="sharegpt", column="input").most_tokens
        933
    """

    kind: Literal["dataset"]
    name: Name
    column: Literal["input", "output"]

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in catalog():
            raise ValueError(f"unknown dataset; known: {', '.join(sorted(catalog()))}")
        return name

    @property
    def tokens(self) -> np.ndarray:
        table = dataset(self.name)
        return table.input_tokens if self.column == "input" else table.output_tokens

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.tokens[rng.integers(0, len(self.tokens), n)]

    @property
    def mean_tokens(self) -> float:
        return float(self.tokens.mean())

    @property
    def cv2(self) -> float:
        return float(self.tokens.var() / self.tokens.mean() ** 2)

    @property
    def fewest_tokens(self) -> int:
        return int(self.tokens.min())

    @property
    def most_tokens(self) -> int:
        return int(self.tokens.max())


LengthDistribution = Annotated[
    FixedLength | UniformLength | LognormalLength | HistogramLength | DatasetLength, Field(discriminator="kind")
]
# A count of turns: the integer distributions, but not a data set's token lengths.
CountDistribution = Annotated[FixedLength | UniformLength | LognormalLength | HistogramLength, Field(discriminator="kind")]


def _with_columns(data: Any) -> Any:
    """A mapping's ``input_tokens``/``output_tokens`` presets told which column they draw (YAML
    leaves it out: the key says it)."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for key, column in (("input_tokens", "input"), ("output_tokens", "output")):
        spec = out.get(key)
        if isinstance(spec, dict) and spec.get("kind") == "dataset":
            if spec.get("column", column) != column:
                raise ValueError(f"{key}.column: a preset under {key} draws its {column} lengths; leave column out")
            out[key] = {**spec, "column": column}
    return out


def sample_lengths(input_tokens: _Length, output_tokens: _Length, rng: np.random.Generator,
                   n: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` prompt and output lengths; pairs of one data set are drawn together."""
    if (isinstance(input_tokens, DatasetLength) and isinstance(output_tokens, DatasetLength)
            and input_tokens.name == output_tokens.name):
        table = dataset(input_tokens.name)
        pick = rng.integers(0, len(table.input_tokens), n)
        return table.input_tokens[pick], table.output_tokens[pick]
    return input_tokens.sample(rng, n), output_tokens.sample(rng, n)


def _single_token(out: _Length | None) -> bool:
    """Whether a length distribution always draws one token."""
    return out is not None and out.fewest_tokens == 1 and out.most_tokens == 1


# --- multi-turn sessions ---------------------------------------------------------------------------
class FixedDuration(Spec):
    kind: Literal["fixed"]
    value_s: float = Field(ge=0, le=MAX_THINK_S)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value_s)

    @property
    def mean_s(self) -> float:
        return self.value_s


class ExponentialDuration(Spec):
    kind: Literal["exponential"]
    mean_s: float = Field(gt=0, le=MAX_THINK_S)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.minimum(rng.exponential(self.mean_s, n), MAX_THINK_S)


class LognormalDuration(Spec):
    """Lognormal with mean ``mean_s`` and log-space standard deviation ``sigma`` (capped at a day)."""

    kind: Literal["lognormal"]
    mean_s: float = Field(gt=0, le=MAX_THINK_S)
    sigma: float = Field(gt=0, le=5)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.minimum(rng.lognormal(np.log(self.mean_s) - self.sigma**2 / 2, self.sigma, n), MAX_THINK_S)


DurationDistribution = Annotated[FixedDuration | ExponentialDuration | LognormalDuration, Field(discriminator="kind")]


class SessionArrival(Spec):
    """Multi-turn conversations: sessions start as a Poisson process of ``rate_per_s`` sessions per
    second; each has ``turns`` turns (a count distribution, at most :data:`MAX_TURNS`); a turn is sent
    ``think_time`` after the answer to the previous one finished, and its prompt is the whole
    conversation so far (every earlier prompt and answer) plus its new message, drawn from
    ``input_tokens`` (its answer from ``output_tokens``). A conversation ends early when its next
    turn would not fit the context, as a user would start a new chat.

    Prefix-cache hits follow from that structure: a turn reuses the blocks of the previous turn's
    prompt and answer when they are still cached on the engine that serves it (see
    :mod:`.prefix_cache`), not a fixed fraction.

    Example:
        >>> s = SessionArrival.model_validate({"kind": "sessions", "rate_per_s": 2,
        ...     "turns": {"kind": "uniform", "low": 1, "high": 5},
        ...     "think_time": {"kind": "exponential", "mean_s": 20}})
        >>> s.interarrival_cv2, s.turns.mean_tokens
        (1.0, 3.0)
    """

    kind: Literal["sessions"]
    rate_per_s: RatePerS = Field(description="sessions started per second")
    turns: CountDistribution
    think_time: DurationDistribution

    @model_validator(mode="after")
    def _bounded_turns(self) -> SessionArrival:
        most = self.turns.most_tokens
        if most is None or most > MAX_TURNS:
            raise ValueError(f"turns: declare at most {MAX_TURNS} turns per session (a lognormal needs max)")
        return self

    @property
    def interarrival_cv2(self) -> float:
        """Turns of independent sessions superpose into nearly Poisson requests (queueing formulas)."""
        return 1.0


Arrival = Annotated[PoissonArrival | GammaArrival | ClosedLoopArrival | TraceArrival | SessionArrival,
                    Field(discriminator="kind")]


# --- tenant classes --------------------------------------------------------------------------------
class TrafficClass(Spec):
    """A tenant class: its share of the arrivals, its priority and lengths, and its own targets.

    ``priority`` is what its clients send as the request's ``priority`` (vLLM's OpenAI-compatible
    field: lower values are served first under ``--scheduling-policy priority``; ignored, and in
    vLLM refused unless 0, under fcfs). ``input_tokens``/``output_tokens`` left out take the
    traffic's own. ``slo`` holds for the class's own requests, in addition to the workload's ``slo``
    over all of them.

    Example:
        >>> c = TrafficClass.model_validate({"name": "chat", "share": 0.5, "priority": 0,
        ...     "input_tokens": {"kind": "fixed", "value": 512}, "output_tokens": {"kind": "fixed", "value": 64},
        ...     "slo": {"p99_ttft_s": 0.5}})
        >>> c.slo.targets()
        {'ttft': 0.5}
    """

    name: Name
    share: float = Field(gt=0, le=1, description="share of the arrivals (the classes' shares add up to 1)")
    priority: int = Field(default=0, ge=-MAX_INT, le=MAX_INT, description="vLLM request priority: lower first")
    input_tokens: LengthDistribution | None = None
    output_tokens: LengthDistribution | None = None
    slo: SLO = Field(default_factory=SLO)

    @model_validator(mode="before")
    @classmethod
    def _columns(cls, data: Any) -> Any:
        return _with_columns(data)


class PromptCache(Spec):
    """Prompts the server has seen before, so vLLM's prefix cache holds them (with prefix caching on).

    ``warm``: every prompt was sent before (a rerun of a benchmark against a server that kept its
    cache): each finds all its full blocks cached. ``repeated``: the client sends a finite set of
    ``distinct_prompts`` prompts over and over, request ``i`` the set's prompt ``i mod
    distinct_prompts`` with its length (``vllm bench serve`` with a fixed ``--seed`` resends the same
    prompts in every run; a dataset of N entries cycled): a prompt's first sending computes it
    (unless ``seen_before``: an earlier run sent the set) and every later one hits its full blocks.
    Evictions are not followed: the set's blocks are taken to fit in the KV cache.

    Example:
        >>> PromptCache(kind="repeated", distinct_prompts=100).seen_before
        False
    """

    kind: Literal["warm", "repeated"]
    distinct_prompts: int | None = Field(default=None, ge=1, le=MAX_BENCHMARK_REQUESTS,
                                         description="repeated: how many distinct prompts the client cycles")
    seen_before: bool = Field(default=False, description="repeated: an earlier run already sent the set")

    @model_validator(mode="after")
    def _check(self) -> PromptCache:
        if self.kind == "repeated" and self.distinct_prompts is None:
            raise ValueError("prompt_cache.distinct_prompts: required with kind 'repeated' (the size of the prompt set)")
        if self.kind == "warm" and (self.distinct_prompts is not None or self.seen_before):
            raise ValueError("prompt_cache: kind 'warm' takes no distinct_prompts or seen_before (every prompt is cached)")
        return self


class Traffic(Spec):
    """What a deployment must serve.

    With ``classes``, each arrival belongs to a class, drawn by the classes' shares (for a Poisson
    arrival, independent Poisson streams of ``share x rate_per_s``), and takes its class's priority,
    lengths and targets.
    """

    arrival: Arrival
    input_tokens: LengthDistribution | None = Field(default=None, description="not needed with a trace")
    output_tokens: LengthDistribution | None = Field(default=None, description="not needed with a trace")
    classes: list[TrafficClass] | None = Field(default=None, min_length=1, max_length=MAX_CLASSES)
    shared_prefix_fraction: float = Field(
        default=0.0, ge=0, lt=1, description="share of each prompt that a prefix cache can reuse"
    )
    prompt_cache: PromptCache | None = Field(
        default=None, description="prompts the server saw before (warm, or a repeated finite prompt set)")
    max_context: int | None = Field(default=None, ge=2, le=MAX_TOKENS, description="prompt + output are clipped to this")

    @model_validator(mode="before")
    @classmethod
    def _columns(cls, data: Any) -> Any:
        return _with_columns(data)

    @model_validator(mode="after")
    def _check_lengths(self) -> Traffic:
        kind = self.arrival.kind
        if self.classes is not None:
            self._check_classes()
        elif kind != "trace" and (self.input_tokens is None or self.output_tokens is None):
            raise ValueError("input_tokens and output_tokens are required unless arrival.kind is 'trace'")
        if kind == "sessions" and self.prompt_cache is not None:
            raise ValueError("prompt_cache: sessions cache each conversation's history themselves; leave it out")
        if kind == "sessions" and self.shared_prefix_fraction > 0:
            raise ValueError("shared_prefix_fraction: with sessions, prefix-cache hits come from each conversation's "
                             "history; a prefix shared by every session is not modelled with them, leave it out")
        return self

    def _check_classes(self) -> None:
        if self.arrival.kind == "trace":
            raise ValueError("classes: a trace replays its own requests; classes need a generated arrival "
                             "(poisson, gamma, closed_loop or sessions)")
        names = [c.name for c in self.classes]
        if len(set(names)) != len(names):
            raise ValueError(f"classes: the name '{next(n for n in names if names.count(n) > 1)}' is used twice")
        total = sum(c.share for c in self.classes)
        if abs(total - 1.0) > SHARE_TOLERANCE:
            raise ValueError(f"classes: the shares add up to {total:.6g}; make them add up to 1")
        for i, c in enumerate(self.classes):
            for key in ("input_tokens", "output_tokens"):
                if getattr(c, key) is None and getattr(self, key) is None:
                    raise ValueError(f"classes.{i}.{key}: required (or give {key} at the top level for every class)")

    def class_lengths(self) -> list[tuple[_Length, _Length]]:
        """(prompt, output) distributions of each class (the traffic's own, as one class, without classes)."""
        if self.classes is None:
            return [(self.input_tokens, self.output_tokens)]
        return [(c.input_tokens or self.input_tokens, c.output_tokens or self.output_tokens) for c in self.classes]

    @property
    def class_shares(self) -> np.ndarray:
        return np.asarray([1.0] if self.classes is None else [c.share for c in self.classes])

    @property
    def single_output_token(self) -> bool:
        """Whether every request asks for exactly one output token (so no request has a TPOT)."""
        return all(_single_token(out) for _, out in self.class_lengths())

    def read_trace(self) -> RequestTrace:
        """The trace of a ``trace`` arrival; its length columns may be left out when the spec gives
        ``input_tokens`` and ``output_tokens`` distributions."""
        if self.arrival.kind != "trace":
            raise InputError("traffic.arrival.kind is not 'trace'")
        return self.arrival.read(need_lengths=self.input_tokens is None or self.output_tokens is None)


def check_context(inputs: np.ndarray, outputs: np.ndarray, limit_tokens: int, clipping_allowed: bool,
                  limit_source: str) -> None:
    """Refuse traffic whose typical request does not fit the context.

    A request's prompt plus output must fit ``limit_tokens`` (``limit_source`` says where that limit
    comes from). A benchmark client clips the tail (vLLM rejects what does not fit), so a few long
    requests are clipped; when most requests would be, the workload describes something this model
    or deployment cannot serve, unless ``traffic.max_context`` asks for clipping.
    """
    total = inputs.astype(np.int64) + outputs.astype(np.int64)
    over = int(np.count_nonzero(total > limit_tokens))
    if clipping_allowed or over * 2 <= len(total):
        return
    raise InputError(
        f"traffic: {over:,} of {len(total):,} requests need more than the context of {limit_tokens:,} tokens "
        f"({limit_source}): the median request needs {int(np.median(total)):,} (prompt + output); shorten "
        "input_tokens/output_tokens, choose a model with a longer context, or set traffic.max_context to clip "
        "them as a benchmark client would"
    )
