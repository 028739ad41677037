"""``estimate``: the simulator's summary from queueing approximations, for screening many candidates.

One engine (a replica's pipeline lane, or a P/D instance) is modelled in steady state
(``shared/data/reference/serving_facts.md`` E.2):

- **Decode fixed point (Little's law).** The decoding batch is ``B = lambda x (O - 1) / tau x T``
  (``tau`` tokens per step, 1 without speculation) and the mean step time ``T`` depends on ``B``:
  a share ``phi`` of steps also carries a prefill chunk. ``phi`` follows from the prefill tokens that
  arrive per step. ``T`` is solved by secant iteration; no solution below the KV pool, ``max_num_seqs``
  or the token budget means the engine is saturated.
- **Routing** (:class:`Routing`). The router and the replica's own balancing split the arrivals: each
  engine gets every ``E``-th of them (``E`` engines), a renewal stream with ``c_a^2 / E`` (exact for
  round robin; least-outstanding routing is taken to be as even). Sequence slots are queued for as
  one pool: least-outstanding routing sends a request to a full engine only when every engine is
  full, so all the role's engines pool their slots; round robin pools only a replica's own engines.
- **TTFT** = the decode step in progress + waiting for prefill capacity + waiting for a sequence
  slot + the prompt's own chunks at the decode batch. Prefill capacity is a G/G/1 server of prompt
  tokens whose rate is that of full-budget steps (waiting prompts share steps up to the budget); a
  slot is a G/G/c queue whose servers are the slots that KV or ``max_num_seqs`` allow and whose
  service is a request's residence. Both waits are :func:`gg_wait`: Erlang C at the Halfin-Whitt
  equivalent load for the probability of waiting, exponential beyond (Kingman / Allen-Cunneen).
  The busy slots fluctuate like an infinite-server count (peakedness ``1 + (c_a^2 - 1) kappa`` of
  the output lengths, Whitt), amplified because every prefill stalls every running request and a
  larger batch slows every step. The quantiles of the sum come from samples of the independent parts.
- **TPOT and ITL.** Steps are decode-only (time ``T_d``, which varies with the batch, whose variance
  is the batch times its peakedness) or mixed (``T_m``); a request's TPOT averages its ``(O - 1) /
  tau`` steps (binomial count of mixed ones), the ITL is the decode-weighted mixture of step times.
- Closed-loop clients: the throughput ``X`` solves ``N = X x (E2E(X) + think)`` (secant), capped at
  the saturation throughput. P/D: a prefill pool (no decodes) and a decode pool (no prefill), the KV
  transfer added between first token and decode.
- The profile's front-end latency (``request_overhead_s``) and the front end's tokenization (one
  prompt at a time per replica: its mean service time plus the M/G/1 wait at the tokenizer) add to
  TTFT and end-to-end latency and to the closed-loop cycle.
- Tenant classes: the whole traffic sets the steady state; each class takes its own lengths and its
  share of the waits (:mod:`.priority`: as the whole traffic's under ``fcfs``, Cobham's priority
  queues under ``priority``). Multi-turn sessions: a turn hits its conversation's history in the
  prefix cache when its previous turn ran on the same engine and its blocks were freed less than
  the cache's retention time before (free KV over the tokens freed per second; solved twice).

``benchmarks/bench_estimate_accuracy.py`` prints the estimate's P99 errors against the simulation.

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.deployment import Deployment
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> from servopt.costmodels.serving.traffic import Traffic
    >>> gpu = get_gpu("h100")
    >>> traffic = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 5},
    ...     "input_tokens": {"kind": "fixed", "value": 1024}, "output_tokens": {"kind": "fixed", "value": 128}})
    >>> s = estimate(get_model("llama-3.1-8b"), Deployment(gpu="h100", max_model_len=8192), traffic, gpu,
    ...              PerformanceProfile.spec_default(gpu)).summary
    >>> s.method, s.saturated, 0.005 < s.tpot_s.mean < 0.05
    ('analytic', False, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..architectures import ModelSpec
from ..deployment import Deployment
from ..hardware import GPUSpec
from ..profile import PerformanceProfile
from .metrics import ClassSummary, LatencyStats, ServingSummary
from .predictor import StepComposition
from .prefix_cache import retained_history
from .priority import ClassLoad, class_waits
from .queueing import NO_WAIT, Wait, gg_wait
from .requests import DrawnRequests, draw_requests, session_history
from .compiled import DECODE, PREFILL, REPLICA, CompiledDeployment, Role, compile_deployment
from .simulator import SimulationResult
from .slo import SLO
from .traffic import Traffic

QUANTILES = (0.5, 0.9, 0.99)
Z = {0.5: 0.0, 0.9: 1.2816, 0.99: 2.3263}  # standard normal quantiles
MOMENT_SAMPLES = 4096  # draws that give length moments and quantiles (clipping included)
MAX_ITERATIONS = 60
PREFILL_GRID = 16  # prompt lengths whose prefill time is computed exactly; others are interpolated
# Fixed draws for the samples of TTFT's parts (the estimate is deterministic).
_UNIFORMS = np.random.default_rng(1).random((3, MOMENT_SAMPLES))
_EXPONENTIALS = np.random.default_rng(2).exponential(size=(2, MOMENT_SAMPLES))


@dataclass(frozen=True)
class TrafficMoments:
    """What the formulas need from a traffic: rates, length moments and quantiles."""

    rate_per_s: float | None  # None: closed loop
    concurrency: int
    think_time_s: float
    arrival_cv2: float
    input_mean: float
    input_cv2: float
    output_mean: float
    output_cv2: float
    output_q: dict[float, float]
    cached_mean: float
    num_requests: int
    prompt_samples: np.ndarray  # uncached prompt tokens of up to MOMENT_SAMPLES drawn requests
    output_kappa: float  # integral of the output lengths' squared survival function / their mean (see _kappa)


_DRAWN: dict[tuple, tuple[Traffic, DrawnRequests]] = {}
_MOMENTS: dict[tuple, tuple[Traffic, tuple[TrafficMoments, list[TrafficMoments]]]] = {}
_KEPT = 64  # traffics and contexts remembered by each cache


def _remembered(cache: dict, key: tuple, traffic: Traffic, make):
    """``make()``, kept in ``cache`` under ``key`` while ``traffic`` (the first part of the key, by id) lives."""
    hit = cache.get(key)
    if hit is None or hit[0] is not traffic:
        if len(cache) >= _KEPT:
            cache.clear()
        hit = cache[key] = (traffic, make())
    return hit[1]


def class_moments(traffic: Traffic, compiled: CompiledDeployment,
                  retention_s: float = math.inf) -> tuple[TrafficMoments, list[TrafficMoments]]:
    """Moments of the whole traffic and of each of its classes (none without classes), as this
    deployment sees it (clipped to its context, its prefix cache): drawn once per traffic and context
    (a search estimates many deployments of one traffic).

    Multi-turn sessions hit their history in the prefix cache when their previous turn ran on the
    same engine (one in the role's engines: the routers do not follow sessions) and its blocks were
    freed less than ``retention_s`` before the turn (:func:`~.prefix_cache.retained_history`).
    """
    d = compiled.deployment
    context = (id(traffic), compiled.max_model_len, d.block_size, d.enable_prefix_caching)
    drawn = _remembered(_DRAWN, context, traffic, lambda: draw_requests(
        traffic, None if traffic.arrival.kind == "trace" else MOMENT_SAMPLES, np.random.default_rng(0),
        max_model_len=compiled.max_model_len, block_size=d.block_size, prefix_caching=d.enable_prefix_caching,
        context_source=compiled.context_source))
    if drawn.session is None or not d.enable_prefix_caching:
        return _remembered(_MOMENTS, context, traffic,
                           lambda: _class_moments(traffic, drawn, drawn.cached_tokens.astype(float)))
    engines = compiled.roles[0].engines * d.pp

    def with_history() -> tuple[TrafficMoments, list[TrafficMoments]]:
        history = session_history(drawn.input_tokens, drawn.output_tokens, drawn.follow_up, d.block_size)
        return _class_moments(traffic, drawn, retained_history(history, drawn.think_s, retention_s) / engines)

    return _remembered(_MOMENTS, context + (engines, retention_s), traffic, with_history)


def _class_moments(traffic: Traffic, drawn: DrawnRequests,
                   cached: np.ndarray) -> tuple[TrafficMoments, list[TrafficMoments]]:
    """Moments of the whole traffic and of each class, given each prompt's cached tokens."""
    aggregate = _moments(traffic, drawn, cached, np.ones(len(drawn), dtype=bool), 1.0)
    if drawn.classes is None:
        return aggregate, []
    return aggregate, [_moments(traffic, drawn, cached, drawn.classes == k, c.share)
                       for k, c in enumerate(traffic.classes)]


def _moments(traffic: Traffic, drawn: DrawnRequests, cached: np.ndarray, pick: np.ndarray,
             share: float) -> TrafficMoments:
    """Moments of the drawn requests ``pick`` (a class with ``share`` of the arrivals, or all)."""
    if not pick.any():  # a class too small to be drawn: its share of the whole
        pick = np.ones(len(drawn), dtype=bool)
    inputs, outputs = drawn.input_tokens[pick].astype(float), drawn.output_tokens[pick].astype(float)

    def cv2(x: np.ndarray) -> float:
        return float(x.var() / x.mean() ** 2)

    def quantiles(x: np.ndarray) -> dict[float, float]:
        ordered = np.sort(x)
        return {q: float(ordered[min(int(q * len(x)), len(x) - 1)]) for q in QUANTILES}

    rate, concurrency, think, ca2 = None, 0, 0.0, 1.0
    kind = traffic.arrival.kind
    if kind == "closed_loop":
        concurrency, think = traffic.arrival.concurrency, traffic.arrival.think_time_s
    elif kind == "trace":
        gaps = np.diff(drawn.arrival_s)
        span = float(drawn.arrival_s[-1] - drawn.arrival_s[0])
        if span > 0:
            rate, ca2 = (len(gaps)) / span, cv2(gaps) if gaps.mean() > 0 else 1.0
        else:  # one burst: as many clients as requests, each sending one
            concurrency = len(inputs)
    elif kind == "sessions":  # requests per second: sessions per second times their turns
        sessions = len(np.unique(drawn.session))
        rate, ca2 = traffic.arrival.rate_per_s * len(drawn) / sessions, traffic.arrival.interarrival_cv2
    else:
        rate, ca2 = traffic.arrival.rate_per_s, traffic.arrival.interarrival_cv2
    prompts = np.maximum(inputs - cached[pick], 1.0)
    if len(prompts) > MOMENT_SAMPLES:  # a long trace: evenly spaced requests of it
        prompts = prompts[np.linspace(0, len(prompts) - 1, MOMENT_SAMPLES).astype(int)]
    return TrafficMoments(
        None if rate is None else rate * share, concurrency, think, ca2,
        float(inputs.mean()), cv2(inputs),
        float(outputs.mean()), cv2(outputs), quantiles(outputs),
        float(cached[pick].mean()), len(inputs), prompts, _kappa(outputs),
    )


def _kappa(lengths: np.ndarray) -> float:
    """The integral of the squared survival function over the mean, for service times proportional
    to ``lengths``: 1 for equal lengths, 1/2 for exponential ones (:meth:`EngineModel.peakedness`)."""
    ordered = np.sort(lengths)
    survival = 1.0 - np.arange(len(ordered)) / len(ordered)  # P(length > t) between ordered[i-1] and ordered[i]
    widths = np.diff(ordered, prepend=0.0)
    return float(np.dot(survival**2, widths) / max(ordered.mean(), 1e-12))


@dataclass(frozen=True)
class EnginePoint:
    """Steady state of one engine at one arrival rate."""

    rate_per_s: float
    decode_step_s: float
    mixed_step_s: float
    mean_step_s: float
    mixed_share: float
    batch: float
    decode_step_slope_s: float  # d(decode step)/d(batch)
    prefill_room: float  # prefill tokens a step can take next to the decodes
    prefill_service_s: float  # a prompt's share of full-budget steps: the prefill server's service time
    slot_wait: Wait
    chunk: float  # prefill tokens of a mixed step

    @property
    def prefill_utilization(self) -> float:
        return self.rate_per_s * self.prefill_service_s


def _root(f, low: float, high: float, tolerance: float = 1e-3) -> float:
    """Root of an increasing-then-crossing ``f`` with f(low) > 0 >= f(high) (Illinois regula falsi)."""
    f_low, f_high = f(low), f(high)
    side = 0
    for _ in range(MAX_ITERATIONS):
        if not (math.isfinite(f_low) and math.isfinite(f_high)) or f_low == f_high:
            return _bisect(f, low, high, tolerance)
        x = high - f_high * (high - low) / (f_high - f_low)
        if not low < x < high:
            x = (low + high) / 2
        fx = f(x)
        if fx > 0:
            low, f_low = x, fx
            if side == 1:
                f_high /= 2
            side = 1
        else:
            high, f_high = x, fx
            if side == -1:
                f_low /= 2
            side = -1
        if high - low <= tolerance * high:
            break
    return high


def _bisect(f, low: float, high: float, tolerance: float) -> float:
    while high - low > tolerance * high:
        mid = (low + high) / 2
        if f(mid) > 0:
            low = mid
        else:
            high = mid
    return high


@dataclass(frozen=True)
class Routing:
    """How a router and the replica's own balancing (pipeline lanes, data-parallel ranks) split the
    arrivals between the engines of a role.

    Each engine gets every ``engines``-th arrival on average: for a renewal stream cut round-robin
    that is a renewal stream with ``c_a^2 / engines`` (the sum of ``engines`` gaps); least-outstanding
    routing is taken to be as even (it is, while the engines' counts are balanced; in the simulation
    its per-replica arrivals are burstier, c_a^2 0.2-0.35 at 4-16 replicas of a Poisson stream where
    round robin gives 1 / N, since a replica that just finished requests draws the next ones, so
    the estimate's prefill queue is low there). Sequence slots are queued for as one pool of engines: with least-outstanding
    routing, all the role's engines, fed the whole stream; round-robin routing picks the replica
    blindly, so the pool is the replica's own engines (balanced by the replica), fed its share.
    """

    engine_cv2: float
    pool: int
    pool_cv2: float

    @classmethod
    def of(cls, arrival_cv2: float, router: str, replicas: int, engines_per_replica: int) -> Routing:
        engines = replicas * engines_per_replica
        if router == "round_robin":
            return cls(arrival_cv2 / engines, engines_per_replica, arrival_cv2 / replicas)
        return cls(arrival_cv2 / engines, engines, arrival_cv2)


class EngineModel:
    """Steady-state formulas of one engine role (an aggregated replica prefills and decodes; a P/D
    instance does one of the two)."""

    def __init__(self, role: Role, m: TrafficMoments, pp: int, routing: Routing):
        self.role, self.m, self.mode, self.routing = role, m, role.name, routing
        self.batch_peakedness = self.peakedness(routing.engine_cv2)
        p = role.predictor
        self.predictor = p
        self.q = p.query_per_seq
        self.tau = p.tokens_per_step
        self.budget = role.limits.max_num_batched_tokens
        self.seats = role.limits.max_num_seqs
        self.capacity_tokens = role.plan.kv_capacity_tokens / pp
        self.prefill_tokens = 0.0 if self.mode == DECODE else max(m.input_mean - m.cached_mean, 1.0)
        self.decode_tokens = 0.0 if self.mode == PREFILL else max(m.output_mean - 1, 0.0)
        self.context = m.input_mean + (1 if self.mode == PREFILL else m.output_mean / 2)
        self._last_step_s = 0.0
        self._decode_cache: dict[int, float] = {}
        self._mixed_cache: dict[tuple[int, int], float] = {}

    def peakedness(self, arrival_cv2: float) -> float:
        """Variance over mean of the number of requests in an infinite-server queue with these
        arrivals and requests (Whitt's G/GI/infinity formula, 1 + (c_a^2 - 1) kappa; see :func:`_kappa`)."""
        return max(1.0 + (arrival_cv2 - 1.0) * self.m.output_kappa, 0.0)

    @property
    def slots(self) -> float:
        """Requests the engine holds at once: ``max_num_seqs``, or fewer when the KV cache is smaller."""
        return min(self.seats, self.capacity_tokens / max(self.context, 1.0))

    # --- step times -----------------------------------------------------------------------------
    def _interp(self, f, batch: float) -> float:
        lo = math.floor(batch)
        frac = batch - lo
        low = f(lo)
        return low if frac < 1e-9 else low + frac * (f(lo + 1) - low)

    def decode_step(self, batch: float) -> float:
        """A decode-only step (a step runs at least one sequence, so below one it is one's step)."""
        def f(b: int) -> float:
            if b not in self._decode_cache:
                ctx = b * self.context
                self._decode_cache[b] = self.predictor.decode_s(b, ctx, ctx)
            return self._decode_cache[b]
        return self._interp(f, max(batch, 1.0))

    def _composition(self, b: int, chunk: float) -> StepComposition:
        m = self.m
        length = self.prefill_tokens
        if chunk >= length:  # whole prompts
            prompts = chunk / length
            pairs = prompts * (length**2 * (1 + m.input_cv2) + length) / 2 + chunk * m.cached_mean
            kv = prompts * (m.cached_mean + length)
        else:  # a slice of a longer prompt, at a mean offset halfway through its remainder
            prompts = 1.0
            offset = m.cached_mean + (length - chunk) / 2
            pairs = chunk * offset + chunk * (chunk + 1) / 2
            kv = offset + chunk
        ctx = b * self.context
        return StepComposition(b, ctx, ctx, int(round(chunk)), max(1, int(round(prompts))), pairs, pairs, kv, kv)

    def mixed_step(self, batch: float, chunk: float) -> float:
        def f(b: int) -> float:  # the chunk never overfills the step's token budget
            tokens = int(round(max(min(chunk, self.budget - b * self.q), 1.0)))
            if (b, tokens) not in self._mixed_cache:
                self._mixed_cache[b, tokens] = self.predictor.step_s(self._composition(b, tokens))
            return self._mixed_cache[b, tokens]
        return self._interp(f, batch)

    def prefill_time(self, prompt_tokens: float, batch: float) -> float:
        """A prompt's own prefill: its chunks, each a step next to ``batch`` decodes."""
        if prompt_tokens <= 0 or not self.prefill_tokens:
            return 0.0
        room = max(self.budget - batch * self.q, 1.0)
        chunks = max(math.ceil(prompt_tokens / room), 1)
        return chunks * self.mixed_step(batch, min(prompt_tokens, room))

    def prefill_times(self, prompts: np.ndarray, batch: float) -> np.ndarray:
        """:meth:`prefill_time` of many prompts: exact at up to :data:`PREFILL_GRID` lengths, linear between."""
        grid = np.unique(np.quantile(prompts, np.linspace(0.0, 1.0, PREFILL_GRID)))
        return np.interp(prompts, grid, [self.prefill_time(float(x), batch) for x in grid])

    def mean_ttft_s(self, point: EnginePoint, prompts: np.ndarray | None = None,
                    waits: tuple[Wait, Wait] | None = None) -> float:
        """Mean TTFT at the engine (see :func:`_latencies`): of its traffic, or of one class's
        ``prompts`` (uncached prompt samples) that wait ``waits`` (prefill, slot)."""
        prompts = self.m.prompt_samples if prompts is None else prompts
        prefill_wait, slot_wait = waits or self.waits(point)
        own_s = float(self.prefill_times(prompts, point.batch).mean()) if self.prefill_tokens else 0.0
        return point.decode_step_s / 2 + prefill_wait.mean_s + slot_wait.mean_s + own_s

    def waits(self, point: EnginePoint) -> tuple[Wait, Wait]:
        """The whole traffic's waits for prefill capacity and for a sequence slot."""
        return self.prefill_wait(point), point.slot_wait

    def prefill_wait(self, point: EnginePoint) -> Wait:
        """Waiting for prefill capacity: a G/G/1 server of prompt tokens (its utilization is below 1
        at any steady state)."""
        if not self.prefill_tokens:
            return NO_WAIT
        z = (self.routing.engine_cv2 + self.m.input_cv2) / 2
        return gg_wait(1, point.prefill_utilization, point.prefill_service_s, z, z) or NO_WAIT

    # --- steady state ---------------------------------------------------------------------------
    def point(self, rate: float) -> EnginePoint | str:
        """The steady state at ``rate`` requests/s, or why there is none."""
        if self.mode == PREFILL:
            return self._prefill_point(rate)
        steps_per_request = self.decode_tokens / self.tau

        def batch_at(step_s: float) -> float:
            return rate * steps_per_request * step_s

        def mixed(step_s: float) -> tuple[float, float, float, float]:
            batch = batch_at(step_s)
            room = self.budget - batch * self.q
            if self.prefill_tokens == 0 or room <= 0:
                return batch, room, 0.0, self.decode_step(batch)
            chunk = min(room, max(self.prefill_tokens, rate * self.prefill_tokens * step_s))
            t_m = self.mixed_step(batch, chunk)
            share = min(rate * self.prefill_tokens * step_s / chunk, 1.0)
            return batch, room, share, t_m

        def excess(step_s: float) -> float:
            batch, room, share, t_m = mixed(step_s)
            return (1 - share) * self.decode_step(batch) + share * t_m - step_s

        # An engine with no prefill work (a decode instance) idles at a one-sequence step even when
        # requests need no decode step either (one output token: the prefill instance produced it).
        floor = (self.decode_step(1.0) if self.decode_tokens or not self.prefill_tokens
                 else self.mixed_step(0, min(self.prefill_tokens, self.budget)))
        limit_batch = self.slots
        if batch_at(floor) > limit_batch:
            # The fixed point lies above the floor, so its batch does too: no steady state, and no
            # step of more sequences than the engine holds is ever costed (at absurd rates the
            # step tables would grow to the batch).
            return self._limit_reason(rate, batch_at(floor), limit_batch)
        # The smallest fixed point T = F(T) lies above the one-sequence step (F(floor) >= floor).
        # Bracket it starting from the last solution: nearby rates have nearby step times.
        high = max(floor, self._last_step_s)
        if excess(high) <= 0:
            low = high
            while low > floor and excess(low) <= 0:
                high, low = low, max(floor, low / 1.5)
            step_s = low if excess(low) <= 0 else _root(excess, low, high)
        else:
            for _ in range(MAX_ITERATIONS):
                if batch_at(high) > limit_batch:
                    return self._limit_reason(rate, batch_at(high), limit_batch)
                low, high = high, high * 1.5
                if excess(high) <= 0:
                    break
            else:
                return f"no steady state at {rate:.3g} req/s"
            step_s = _root(excess, low, high)
        self._last_step_s = step_s
        batch, room, share, t_m = mixed(step_s)
        if batch > limit_batch:
            return self._limit_reason(rate, batch, limit_batch)
        if self.prefill_tokens and room <= 0:
            return f"decodes fill the {self.budget}-token step budget at {rate:.3g} req/s"
        t_d = self.decode_step(batch)
        # Prompts queue for prefill as tokens at a server that, when they wait, fills whole steps: its
        # capacity is the room of a step over the time of a step that full.
        full_s = self.mixed_step(batch, room) if self.prefill_tokens else 0.0
        service_s = self.prefill_tokens * full_s / room if self.prefill_tokens else 0.0
        if rate * service_s >= 1:
            return (f"prefill needs {rate * self.prefill_tokens:.0f} tokens/s but steps next to {batch:.0f} decodes "
                    f"take only {room / full_s:.0f}")
        slope = self.decode_step(batch + 1) - t_d
        # The busy slots fluctuate like an infinite-server count (variance: the count times the batch
        # peakedness), amplified by the steps: each prompt that arrives stalls every running request by
        # its prefill's extra step time, keeping more of them in (a share of time, ``stall``), and a
        # larger batch slows every decode step (elasticity B T'(B) / T).
        stall = share * (t_m - t_d) / step_s
        elasticity = min(batch * slope / step_s, 0.9)
        amplification = (1 + stall) / (1 - elasticity)
        slot = self._slot_wait(rate, step_s, steps_per_request, limit_batch, amplification)
        if slot is None:
            return self._limit_reason(rate, rate * (steps_per_request * step_s + self.prefill_time(
                self.prefill_tokens, 0)), limit_batch)
        return EnginePoint(rate, t_d, t_m, step_s, share, batch, slope, room, service_s, slot,
                           min(room, self.prefill_tokens))

    def _prefill_point(self, rate: float) -> EnginePoint | str:
        """A prefill-only instance: a prompt's steps, whole budgets of prompt tokens when prompts wait."""
        chunk = min(self.budget, max(self.prefill_tokens, 1.0))
        t_m = self.mixed_step(0, chunk)
        service_s = self.prefill_tokens * self.mixed_step(0, self.budget) / self.budget
        if rate * service_s >= 1:
            return (f"prefill instances need {rate * self.prefill_tokens:.0f} tokens/s but serve "
                    f"{self.prefill_tokens / service_s:.0f}")
        return EnginePoint(rate, 0.0, t_m, t_m, 1.0, 0.0, 0.0, float(self.budget), service_s, NO_WAIT, chunk)

    def _limit_reason(self, rate: float, batch: float, limit: float) -> str:
        what = "max_num_seqs" if limit >= self.seats else "the KV cache"
        return f"{rate:.3g} req/s would keep {batch:.0f} requests decoding but {what} holds {limit:.0f}"

    def _slot_wait(self, rate, step_s, steps_per_request, limit_batch, amplification) -> Wait | None:
        """Waiting for a sequence slot when the KV cache or ``max_num_seqs`` bounds concurrency: a
        G/G/c queue whose servers are the slots and whose service is a request's residence."""
        residence = steps_per_request * step_s + self.prefill_time(self.prefill_tokens, 0)
        r, m = self.routing, self.m
        return gg_wait(max(int(limit_batch), 1), rate * residence, residence, self.peakedness(r.pool_cv2) * amplification**2,
                       (r.pool_cv2 + m.output_cv2) / 2, r.pool)

    def compute_bound_share(self, point: EnginePoint) -> float:
        """Share of steps whose compute-limited operators dominate, over decode-only and mixed steps."""
        batch, share, chunk = point.batch, point.mixed_share, point.chunk
        b = max(int(round(batch)), 0)
        rows = [StepComposition(b, b * self.context, b * self.context, 0, 0, 0.0, 0.0, 0.0, 0.0)]
        chunk = min(chunk, self.budget - b * self.q)
        if chunk > 0:
            rows.append(self._composition(b, chunk))
        columns = {name: np.asarray([getattr(r, name) for r in rows], dtype=float)
                   for name in StepComposition._fields}
        flags = self.predictor.compute_bound(columns).astype(float)
        weights = np.asarray([1 - share, share][: len(rows)])
        return float(np.dot(flags, weights) / weights.sum()) if weights.sum() > 0 else 0.0


# --- latencies ----------------------------------------------------------------------------------
def _normal_mixture_quantiles(parts: list[tuple[float, float, float]], qs) -> list[float]:
    """Quantiles of a mixture of normals given as (weight, mean, sd)."""
    weights = np.asarray([w for w, _, _ in parts])
    means = np.asarray([mu for _, mu, _ in parts])
    sds = np.maximum(np.asarray([sd for _, _, sd in parts]), 1e-12)
    weights = weights / weights.sum()
    grid = np.linspace(float((means - 4 * sds).min()), float((means + 4 * sds).max()), 512)
    from math import erf, sqrt  # noqa: PLC0415 - scalar erf vectorised below

    cdf = np.zeros_like(grid)
    for w, mu, sd in zip(weights, means, sds):
        cdf += w * 0.5 * (1 + np.vectorize(erf)((grid - mu) / (sd * sqrt(2))))
    return [float(grid[min(np.searchsorted(cdf, q), len(grid) - 1)]) for q in qs]


@dataclass(frozen=True)
class _Latencies:
    ttft: LatencyStats
    tpot: LatencyStats
    itl: LatencyStats
    e2e: LatencyStats
    queue_share: float


def _stats(mean: float, quantiles: list[float]) -> LatencyStats:
    return LatencyStats(mean, *quantiles)


def _e2e(ttft: LatencyStats, tpot: LatencyStats, m: TrafficMoments) -> LatencyStats:
    """TTFT plus the decode time; the deviations of TTFT, TPOT and output length add in quadrature."""
    decode_mean = (m.output_mean - 1) * tpot.mean
    mean = ttft.mean + decode_mean
    values = []
    for q, t_q, p_q in zip(QUANTILES, (ttft.p50, ttft.p90, ttft.p99), (tpot.p50, tpot.p90, tpot.p99)):
        if q == 0.5:
            values.append(ttft.p50 + (m.output_q[0.5] - 1) * tpot.p50)
            continue
        spread = math.sqrt((t_q - ttft.mean) ** 2 + ((m.output_mean - 1) * (p_q - tpot.mean)) ** 2
                           + ((m.output_q[q] - m.output_mean) * tpot.mean) ** 2)
        values.append(mean + spread)
    return _stats(mean, values)


def _latencies(m: TrafficMoments, front: EngineModel, fp: EnginePoint, dec: EngineModel, dp: EnginePoint,
               handoff_s: float, waits: tuple[Wait, Wait] | None = None) -> _Latencies:
    """Latency distributions from the steady state of the front (prefill-capable) and decode engines.

    Without disaggregation ``front is dec`` and ``handoff_s`` is zero. ``m`` may be one class's
    moments, with that class's ``waits`` (prefill, slot; default: the whole traffic's).
    """
    # TTFT: the decode step in progress (a prefill in progress is the prefill queue's), waiting for
    # prefill capacity and for a sequence slot, then the prompt's own chunks. The parts are independent:
    # the quantiles of their sum come from samples of each.
    n = len(m.prompt_samples)
    uniform, exponential = _UNIFORMS[:, :n], _EXPONENTIALS[:, :n]
    waits = waits or front.waits(fp)
    prefill_wait, slot_wait = waits
    waited = prefill_wait.sample(uniform[0], exponential[0]) + slot_wait.sample(uniform[1], exponential[1])
    waited += fp.decode_step_s * uniform[2]
    own = front.prefill_times(m.prompt_samples, fp.batch)
    samples = waited + own
    ttft = _stats(front.mean_ttft_s(fp, m.prompt_samples, waits), [float(v) for v in np.quantile(samples, QUANTILES)])
    tail = samples >= ttft.p99
    queue_share = float(np.mean(waited[tail] / samples[tail])) if tail.any() and ttft.p99 > 0 else 0.0
    # TPOT and ITL from the decode engine's step mixture (the request's own number of steps).
    steps = max(max(m.output_mean - 1, 0.0) / dec.tau, 1.0)
    share = dp.mixed_share
    # The decoding batch fluctuates like the count of an infinite-server queue (variance: the batch times
    # its peakedness), amplified by its own feedback: a larger batch slows every step, which keeps
    # requests longer (elasticity B T'(B) / T).
    elasticity = min(dp.batch * dp.decode_step_slope_s / max(dp.mean_step_s, 1e-12), 0.9)
    sd_batch = dp.decode_step_slope_s * math.sqrt(max(dp.batch * dec.batch_peakedness, 0.0)) / (1 - elasticity)
    sd_mix = (dp.mixed_step_s - dp.decode_step_s) * math.sqrt(share * (1 - share) / steps)
    spread = math.hypot(sd_batch, sd_mix)
    # A decode instance's slot wait comes after the first token; a replica's is part of TTFT.
    gap = handoff_s + (dp.slot_wait.mean_s if dec is not front else 0.0)
    per_token = max(m.output_mean - 1, 1.0)
    tpot = _stats((dp.mean_step_s * steps + gap) / per_token,
                  [(dp.mean_step_s * steps + gap + steps * Z[q] * spread) / per_token for q in QUANTILES])
    parts = [(1 - share, dp.decode_step_s, sd_batch)]
    if share > 0:
        chunk_sd = 0.0
        if dec.prefill_tokens and dec.prefill_tokens <= dp.prefill_room:
            # Mixed steps vary with the prompt that fills them.
            longer = dec.mixed_step(dp.batch, dec.prefill_tokens * 1.1)
            chunk_sd = (longer - dp.mixed_step_s) / 0.1 * math.sqrt(m.input_cv2)
        parts.append((share, dp.mixed_step_s, math.hypot(sd_batch, chunk_sd)))
    if handoff_s > 0:
        parts.append((1 / per_token, handoff_s + dp.decode_step_s, sd_batch))
    itl_mean = sum(w * mu for w, mu, _ in parts) / sum(w for w, _, _ in parts)
    itl = _stats(itl_mean, _normal_mixture_quantiles(parts, QUANTILES))
    return _Latencies(ttft, tpot, itl, _e2e(ttft, tpot, m), queue_share)


def _attainment(stats: LatencyStats, target: float) -> float:
    """Share of requests at or below ``target``, interpolating the quantiles (exponential tail)."""
    points = [(0.5, stats.p50), (0.9, stats.p90), (0.99, stats.p99)]
    if target >= stats.p99:
        return 0.99 + 0.01 * (1 - math.exp(-(target - stats.p99) / max(stats.p99 - stats.p90, 1e-9)))
    if target < stats.p50:
        return 0.5 * target / stats.p50 if stats.p50 > 0 else 0.0
    for (q0, v0), (q1, v1) in zip(points, points[1:]):
        if v0 <= target <= v1:
            return q0 + (q1 - q0) * (target - v0) / (v1 - v0) if v1 > v0 else q1
    return 0.0


# --- the estimate -------------------------------------------------------------------------------
@dataclass
class _Solution:
    rate: float
    front: EnginePoint
    decode: EnginePoint


class _Analysis:
    def __init__(self, compiled: CompiledDeployment, m: TrafficMoments):
        self.compiled, self.m = compiled, m
        d = compiled.deployment
        pp = d.pp

        def engine(name: str) -> EngineModel:
            role = compiled.role(name)
            routing = Routing.of(m.arrival_cv2, d.router, d.replicas, role.per_replica * role.dp * pp)
            return EngineModel(role, m, pp, routing)

        if compiled.disaggregated:
            self.front, self.dec = engine(PREFILL), engine(DECODE)
            self.shares = (self.front.role.engines * pp, self.dec.role.engines * pp)
        else:
            self.front = self.dec = engine(REPLICA)
            # Data-parallel ranks share the load evenly (their step model pads each to the same tokens).
            self.shares = (self.front.role.engines * pp,) * 2
        self.handoff_s = compiled.transfer_s(int(round(m.input_mean))) if compiled.disaggregated else 0.0
        # A closed-loop client's next request reaches the engine after its think time and the front end.
        self.tokenize_s = compiled.tokenize_s_per_token * m.input_mean
        self.cycle_gap_s = m.think_time_s + compiled.request_overhead_s + self.tokenize_s

    def retention_s(self) -> float:
        """How long a freed block stays cached at the steady state of the offered rate: the engine's
        free KV over the tokens its finished requests free per second (0 when saturated)."""
        solution = self.solve(self.m.rate_per_s)
        if isinstance(solution, str):
            return 0.0
        engine, point = self.front, solution.front
        free = max(engine.capacity_tokens - point.batch * engine.context, 0.0)
        freed_per_s = point.rate_per_s * (self.m.input_mean + self.m.output_mean)
        return free / freed_per_s if freed_per_s > 0 else math.inf

    def front_end_wait_s(self, rate: float) -> float:
        """Mean wait at a replica's tokenizer (M/G/1, Pollaczek-Khinchine); inf past its capacity."""
        busy = rate / self.shares[0] * self.compiled.deployment.pp * self.tokenize_s
        if busy >= 1.0:
            return math.inf
        second_moment = self.tokenize_s**2 * (1.0 + self.m.input_cv2)
        return busy * second_moment / (2.0 * self.tokenize_s * (1.0 - busy)) if self.tokenize_s else 0.0

    def solve(self, rate: float) -> _Solution | str:
        front = self.front.point(rate / self.shares[0])
        if isinstance(front, str):
            return front
        if self.dec is self.front:
            return _Solution(rate, front, front)
        dec = self.dec.point(rate / self.shares[1])
        return dec if isinstance(dec, str) else _Solution(rate, front, dec)

    def latencies(self, sol: _Solution) -> _Latencies:
        return _latencies(self.m, self.front, sol.front, self.dec, sol.decode, self.handoff_s)

    def capacity(self, start: float, floor: float | None = None) -> _Solution:
        """The highest stable rate below ``start`` (bisection in log rate; ``floor`` is stable)."""
        low, high = (floor, start) if floor else (start, start)
        # Keep the last stable solution itself: the fixed points are warm-started, so solving the
        # same rate again from another starting point can land on the other side of the edge.
        best = self.solve(low)
        while isinstance(best, str):
            high, low = low, low / 4
            if low < 1e-6:
                raise ValueError("no stable arrival rate")
            best = self.solve(low)
        while high > low * 1.002:
            mid = math.sqrt(low * high)
            solution = self.solve(mid)
            if isinstance(solution, str):
                high = mid
            else:
                low, best = mid, solution
        return best

    @property
    def lockstep(self) -> bool:
        """Closed-loop clients with identical requests and no think time move in groups: each group's
        prompts fill one step, and a group's clients return together (as the simulation shows)."""
        m = self.m
        return (m.rate_per_s is None and m.think_time_s == 0 and m.input_cv2 + m.output_cv2 < 1e-12
                and self.dec is self.front)

    def lockstep_state(self) -> tuple[_Latencies, _Solution] | None:
        """Latencies and steady state of lockstep clients, or None when they do not all fit."""
        engine, m = self.front, self.m
        n = math.ceil(m.concurrency / self.shares[0])
        if n > min(engine.seats, engine.capacity_tokens / engine.context):
            return None
        prompt = engine.prefill_tokens
        group = max(1, min(n, int(engine.budget // prompt)))
        groups = math.ceil(n / group)
        decoders = n - group
        chunks = max(math.ceil(prompt / max(engine.budget - decoders * engine.q, 1)), 1)
        t_mixed = engine.mixed_step(decoders, min(group * prompt, engine.budget - decoders * engine.q))
        t_decode = engine.decode_step(n)
        steps = max(engine.decode_tokens / engine.tau, 1.0)
        interfered = min(groups - 1, steps)
        ttft = chunks * t_mixed
        tpot = (interfered * t_mixed + (steps - interfered) * t_decode) / max(m.output_mean - 1, 1.0)
        itl_q = _normal_mixture_quantiles([(steps - interfered, t_decode, 0.0), (interfered, t_mixed, 0.0)]
                                          if interfered else [(1.0, t_decode, 0.0)], QUANTILES)
        itl_mean = (interfered * t_mixed + (steps - interfered) * t_decode) / steps
        ttft_stats, tpot_stats = _stats(ttft, [ttft] * 3), _stats(tpot, [tpot] * 3)
        e2e = ttft + (m.output_mean - 1) * tpot
        lat = _Latencies(ttft_stats, tpot_stats, _stats(itl_mean, itl_q), _stats(e2e, [e2e] * 3), 0.0)
        rate = m.concurrency / (e2e + self.cycle_gap_s)
        room = engine.budget - decoders * engine.q
        point = EnginePoint(rate / self.shares[0], t_decode, t_mixed, itl_mean, interfered / steps, float(n), 0.0,
                            room, 0.0, NO_WAIT, min(group * prompt, room))
        return lat, _Solution(rate, point, point)

    def mean_e2e(self, sol: _Solution) -> float:
        """Mean end-to-end latency (the closed-loop fixed point needs only this)."""
        dec, dp = self.dec, sol.decode
        decode = dp.mean_step_s * dec.decode_tokens / dec.tau + self.handoff_s
        return self.front.mean_ttft_s(sol.front) + decode + (dp.slot_wait.mean_s if dec is not self.front else 0.0)

    def closed_loop(self) -> tuple[_Solution, float]:
        """Throughput of N clients: N = X (E2E(X) + think); returns the state and the extra wait
        (clients beyond what the deployment sustains queue for admission)."""
        m = self.m
        n = m.concurrency

        def excess(rate: float) -> float:  # increasing in rate; inf where there is no steady state
            sol = self.solve(rate)
            return math.inf if isinstance(sol, str) else rate * (self.mean_e2e(sol) + self.cycle_gap_s) - n

        single = self.solve(1e-9)
        if isinstance(single, str):
            raise ValueError(single)
        high = n / (self.mean_e2e(single) + self.cycle_gap_s)  # latency only grows with load
        over = high
        while math.isinf(excess(high)):  # step down to a rate with a steady state
            over, high = high, high / 1.3
        if excess(high) < 0 and over > high:
            cap = self.capacity(over, floor=high)
            if excess(cap.rate) < 0:
                # More clients than the deployment sustains: it runs at capacity and the rest queue.
                return cap, n / cap.rate - self.cycle_gap_s - self.mean_e2e(cap)
            high = cap.rate
        low = high / 2
        while excess(low) > 0:
            low /= 2
        return self.solve(_root(lambda r: -excess(r), low, high, tolerance=1e-3)), 0.0


def estimate(model: ModelSpec, deployment: Deployment, traffic: Traffic, gpu: GPUSpec, profile: PerformanceProfile,
             slo: SLO | None = None) -> SimulationResult:
    """The simulator's result shape from queueing approximations (see the module docstring): its
    ``summary`` has every field of a simulated one; it has no per-request rows and no steps."""
    return estimate_compiled(compile_deployment(model, deployment, gpu, profile), traffic, slo)


def estimate_compiled(compiled: CompiledDeployment, traffic: Traffic, slo: SLO | None = None) -> SimulationResult:
    """:func:`estimate` of a deployment compiled already (InputError when vLLM would not start it)."""
    compiled.require()
    m, by_class = class_moments(traffic, compiled)
    analysis = _Analysis(compiled, m)
    saturated, reason, extra_wait = False, "", 0.0
    notes = ["analytic estimate: Little's-law decode fixed point, G/G/1 prefill and G/G/c slot queues; "
             "no preemption or warm-up"]
    if traffic.arrival.kind == "sessions" and compiled.deployment.enable_prefix_caching:
        # Turns hit their history while it is still cached: solve once with every history cached,
        # read how long freed blocks stay, then solve with the hits that retention allows.
        retention = analysis.retention_s()
        m, by_class = class_moments(traffic, compiled, retention)
        analysis = _Analysis(compiled, m)
        notes.append(f"multi-turn sessions: freed blocks stay cached ~{retention:.3g} s (free KV over blocks freed "
                     f"per second); turns whose think time is shorter hit their history on the same engine: "
                     f"{m.cached_mean / m.input_mean:.0%} of prompt tokens")
    lockstep = analysis.lockstep_state() if analysis.lockstep else None
    if lockstep is not None:
        notes.append("identical requests from closed-loop clients: they run in lockstep groups")
    if lockstep is not None:
        lat, solution = lockstep
    elif m.rate_per_s is None:
        solution, extra_wait = analysis.closed_loop()
        if extra_wait > 0:
            notes.append(f"{m.concurrency} clients exceed what the deployment sustains; each request also waits "
                         f"~{extra_wait:.3g} s for admission")
        rate = solution.rate
    else:
        rate = m.rate_per_s
        solution = analysis.solve(rate)
        if isinstance(solution, str):
            saturated = True
            cap = analysis.capacity(rate)
            reason = (f"offered load {rate:.3g} req/s exceeds the estimated capacity of {cap.rate:.3g} req/s "
                      f"({solution}); the queue grows without bound")
            solution = cap
    if lockstep is None:
        lat = analysis.latencies(solution)
    front_end_wait = analysis.front_end_wait_s(solution.rate)

    def delayed(stats: LatencyStats, moments: TrafficMoments) -> LatencyStats:
        """Front end and admission wait added (unbounded when saturated)."""
        if saturated:
            return LatencyStats(math.inf, math.inf, math.inf, math.inf)
        delay = (extra_wait + compiled.request_overhead_s + compiled.tokenize_s_per_token * moments.input_mean
                 + front_end_wait)
        return LatencyStats(*(v + delay for v in (stats.mean, stats.p50, stats.p90, stats.p99)))

    ttft, e2e = delayed(lat.ttft, m), delayed(lat.e2e, m)
    served = solution.rate
    attainment, slo_met = _slo_figures({"ttft": ttft, "tpot": lat.tpot, "e2e": e2e}, slo)
    classes = ()
    if by_class:
        classes = _class_summaries(traffic, analysis, solution, by_class, lat if lockstep is not None else None, delayed)
        notes.append(_class_note(compiled.deployment.scheduling_policy, saturated))
    dec, dp = analysis.dec, solution.decode
    batch = dp.batch
    kv_util = batch * dec.context / dec.capacity_tokens if dec.capacity_tokens else 0.0
    prefilling = solution.rate / analysis.shares[0] * analysis.front.prefill_time(analysis.front.prefill_tokens, dp.batch)
    summary = ServingSummary(
        method="analytic", ttft_s=ttft, tpot_s=lat.tpot, itl_s=lat.itl, e2e_s=e2e, p99_ci_s={},
        requests_per_s=served, input_tokens_per_s=served * m.input_mean, output_tokens_per_s=served * m.output_mean,
        goodput_requests_per_s=served * (attainment if attainment is not None else 1.0),
        slo_attainment=attainment, slo_met=slo_met, kv_utilization=min(kv_util, 1.0),
        mean_batch_size=batch + (0.0 if compiled.disaggregated or lockstep is not None else prefilling),
        compute_bound_share=dec.compute_bound_share(dp), preemptions=0, saturated=saturated, saturation_reason=reason,
        num_requests=0, num_measured=0, warmup_excluded=0,
        queueing_share_p99_ttft=math.nan if saturated else lat.queue_share + (extra_wait / ttft.p99 if extra_wait else 0.0),
        notes=tuple(notes), classes=classes,
    )
    return SimulationResult(summary)


def _slo_figures(stats: dict[str, LatencyStats], slo: SLO | None) -> tuple[float | None, bool | None]:
    """(share of requests within every target, whether every P99 meets its target); None without targets."""
    if slo is None or not slo.targets():
        return None, None
    attainment = 1.0
    for metric, target in slo.targets().items():
        attainment *= _attainment(stats[metric], target)
    return attainment, all(stats[metric].p99 <= target for metric, target in slo.targets().items())


def _class_note(policy: str, saturated: bool) -> str:
    if saturated:
        return ("classes: the whole traffic saturates the estimate, so every class is reported unbounded; under "
                "priority scheduling the higher classes may still be served (the simulation shows which)")
    how = ("waits in (priority, arrival) order: non-preemptive priority queues (Cobham) for prefill and slots"
           if policy == "priority" else "wait first come, first served: every class waits as the whole traffic does")
    return f"classes {how}; a class's own lengths set its prefill and decode times; no preemption by priority"


def _class_summaries(traffic: Traffic, analysis: _Analysis, solution: _Solution, by_class: list[TrafficMoments],
                     lockstep: _Latencies | None, delayed) -> tuple[ClassSummary, ...]:
    """Each class's latencies at the whole traffic's steady state (:mod:`.priority` for its waits)."""
    policy = analysis.compiled.deployment.scheduling_policy
    front, fp, dec, dp = analysis.front, solution.front, analysis.dec, solution.decode
    prefill_wait, slot_wait = front.waits(fp)
    # The prefill server's time per prompt token: a class's service is its own uncached prompt's tokens.
    per_token_s = fp.prefill_service_s / front.prefill_tokens if front.prefill_tokens else 0.0
    prefill_loads, slot_loads = [], []
    for c, mk in zip(traffic.classes, by_class):
        rate = fp.rate_per_s * c.share
        prompt = max(mk.input_mean - mk.cached_mean, 1.0)
        prefill_loads.append(ClassLoad(rate, prompt * per_token_s, c.priority))
        residence = max(mk.output_mean - 1, 0.0) / dec.tau * dp.mean_step_s + front.prefill_time(prompt, 0)
        slot_loads.append(ClassLoad(rate, residence / max(front.slots, 1.0), c.priority))
    waits = zip(class_waits(policy, prefill_loads, prefill_wait), class_waits(policy, slot_loads, slot_wait))
    out = []
    for c, mk, wait in zip(traffic.classes, by_class, waits):
        lat = lockstep or _latencies(mk, front, fp, dec, dp, analysis.handoff_s, wait)
        ttft, e2e = delayed(lat.ttft, mk), delayed(lat.e2e, mk)
        attainment, slo_met = _slo_figures({"ttft": ttft, "tpot": lat.tpot, "e2e": e2e}, c.slo)
        rate = solution.rate * c.share
        out.append(ClassSummary(
            name=c.name, priority=c.priority, share=c.share, ttft_s=ttft, tpot_s=lat.tpot, itl_s=lat.itl, e2e_s=e2e,
            p99_ci_s={}, requests_per_s=rate, goodput_requests_per_s=rate * (1.0 if attainment is None else attainment),
            slo=c.slo.targets(), slo_attainment=attainment, slo_met=slo_met, num_measured=0, preemptions=0))
    return tuple(out)

