"""Benchmark clients as they ran: what ``vllm bench serve`` and aiperf sent, when, and what the server had cached.

A measured run is only comparable with a simulation of the same load. This module turns a client's
settings into the traffic it sent, following each tool's source:

- **vllm bench serve** (``vllm/benchmarks/serve.py``; ``benchmarks/benchmark_serving.py`` before it).
  ``main`` seeds Python's and numpy's global generators with ``--seed`` (default 0). With a finite
  ``--request-rate`` the gaps between requests are gamma draws (shape ``burstiness``, scale
  ``1 / (rate x burstiness)``: exponential, so Poisson arrivals, at burstiness 1) from numpy's
  global generator, so a run's send times are reproducible from its seed:

  - up to 0.9 the generator yields a request, then sleeps for the next draw: request 0 goes at
    time 0 and request ``i`` after the first ``i`` gaps;
  - from 0.10 (PR #21108, "Sending request strictly follows the random intervals") all gaps are
    drawn first and their running sums are rescaled so that the last request goes at exactly
    ``num_prompts / rate``; request ``i`` goes at the ``i``-th rescaled sum (request 0 after one gap).

  ``--request-rate inf`` sends every request at once (behind ``--max-concurrency`` if given).
  Before the run the tool sends the first prompt alone and waits for it ("Starting initial single
  prompt test run"), so with prefix caching on that prompt's blocks are cached when the run starts.
  The ShareGPT and sonnet samplers draw from Python's generator, not numpy's, so the gap draws start
  from the freshly seeded numpy state; older random-dataset samplers (numpy's global ``randint``)
  draw before the gaps and are marked approximate by :func:`vllm_bench_send_times`'s caller.
- **aiperf** in concurrency mode (``aiperf/timing/request_rate_strategy.py``, concurrency-burst
  mode): a semaphore of ``--concurrency`` credits; the warm-up phase runs to completion (every
  credit returned) before the profiling phase opens, so profiling starts with every client at once
  on an idle server: :class:`~servopt.costmodels.serving.traffic.ClosedLoopArrival` with
  ``requests_per_client``.

**Why closed-loop clients stay in step (issue 18).** This is aiperf's protocol on the dense silicon
rows: fixed lengths (``--synthetic-input-tokens-stddev 0``, ``min_tokens`` = ``max_tokens``), no
think time, the warm-up drained before profiling. (InferenceX's MiniMax rows draw every length from
``[0.8 x len, len]``, :mod:`.silicon`, so nothing holds those clients in step.) With identical
requests the simulation's
clients settle into a fixed point: each client's cycle is the same number of engine steps (its
wait, one prefill step, ``OSL - 1`` decode steps), so the step offsets between clients that the
opening burst creates (one step each: the burst is prefilled one prompt per step) are kept round
after round. A client that finishes one step after another arrives while the other's prefill step
runs (a request can only join the next step: vLLM's EngineCore drains its input queue between
steps, and the client's round trip is longer than zero), and waits for it: the steady state is
(1, 2, 2, 2) prefills for four clients. Measured on the simulator (Llama-3.1-70B fp8, H100 TP8,
ISL 8192, OSL 1024, 4 clients, aiconfigurator's generator budget): lone prefill 271 ms, opening
round 316/634/954/1093 ms, every later round 282/545/545/545 ms, mean 1.87x the lone prefill.
Nothing in the clients' sources spreads them (aiperf drains its warm-up and releases all credits
at once; its concurrency-burst interval is 0), and nothing in vLLM's V1 scheduler does (a finished
request frees its slot at the end of its step; waiting requests are scheduled FCFS into the next
step's budget). The development rows do not show a spread either: Qwen3-32B on H100 (the same
aiconfigurator protocol) measures 741 ms mean TTFT at ISL 4096, TP2, 8 clients, against 541 ms
simulated in step and about 340 ms if the clients were spread (opening round plus one prefill per
request); at ISL 1024 the simulation is 35% high instead. So the lockstep is kept as the mechanism
gives it; closed-loop runs with per-request TTFTs (none are in the development data: the
per-request traces are open-loop ``vllm bench serve`` runs) are what would settle it.

**Prompts a server has seen.** vLLM's prefix cache keeps freed blocks (hashed by their tokens) until
new allocations evict them, oldest first. Benchmark sessions often send the same prompts again:
``vllm bench serve`` with the same seed samples the same ShareGPT conversations, and its random
dataset builds prompt ``i`` from token ids ``(offset_i + i + 0, 1, 2, ...) mod vocab`` with offsets
drawn from the seed, so a longer prompt ``i`` starts with the shorter prompt ``i`` of an earlier
run. :class:`SessionCache` follows what a session's runs left in the cache: after each run the
blocks of its requests, most recently finished last, up to the cache's capacity; a prompt that
shares a prefix with a cached one hits that prefix. (Evictions within a run are not followed: a run
whose own blocks overflow the cache is rare in these sessions and shows up as preemptions.)

Example:
    >>> send = vllm_bench_send_times(4, request_rate=2.0, seed=0, vllm_version="0.8.3")
    >>> [round(t, 3) for t in send]
    [0.0, 0.398, 1.026, 1.488]
    >>> later = vllm_bench_send_times(4, request_rate=2.0, seed=0, vllm_version="0.14.0")
    >>> round(later[-1], 6)
    2.0
    >>> cache = SessionCache(capacity_tokens=10_000)
    >>> cache.hits(prompt_keys=[0, 1], input_tokens=[1000, 1000]).tolist()
    [0, 0]
    >>> cache.record(prompt_keys=[0, 1], input_tokens=[1000, 1000], output_tokens=[100, 100])
    >>> cache.hits(prompt_keys=[0, 1, 2], input_tokens=[2000, 500, 2000]).tolist()
    [1000, 500, 0]
"""

from __future__ import annotations

import math
import random
import zlib
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..costmodels.errors import InputError
from ..costmodels.serving.traffic import Traffic
from ..costmodels.engines.vllm import parse_vllm_version

# The release whose benchmark precomputes and rescales the request gaps (vLLM PR #21108).
RESCALED_GAPS_FROM = (0, 10, 0)


def vllm_bench_send_times(num_prompts: int, request_rate: float, *, burstiness: float = 1.0, seed: int = 0,
                          vllm_version: str | None = None, draws_before: int = 0) -> list[float]:
    """When ``vllm bench serve`` sent each of ``num_prompts`` requests (seconds from the run's start).

    ``draws_before``: values the dataset sampler drew from numpy's global generator before the gaps
    (0 for ShareGPT and sonnet, which use Python's generator). ``inf`` sends everything at time 0.
    """
    if not math.isfinite(request_rate):
        return [0.0] * num_prompts
    rng = np.random.RandomState(seed)
    if draws_before:
        rng.random_sample(draws_before)
    theta = 1.0 / (request_rate * burstiness)
    if parse_vllm_version(vllm_version) < RESCALED_GAPS_FROM:
        gaps = [rng.gamma(burstiness, theta) for _ in range(num_prompts - 1)]
        return np.concatenate([[0.0], np.cumsum(gaps)]).tolist()
    delays = np.cumsum([rng.gamma(burstiness, theta) for _ in range(num_prompts)])
    if delays[-1] > 0:
        delays = delays * (num_prompts / request_rate) / delays[-1]
    return delays.tolist()


def routed_hits(hits: np.ndarray, engines: int, seed_text: str) -> np.ndarray:
    """Prefix hits that survive routing over ``engines`` schedulers (replicas or data-parallel ranks).

    vLLM's load balancers route by load, not by prefix: a prompt reaches the engine that cached it
    with probability 1 / engines (seeded by ``seed_text``, so a run is reproducible).
    """
    if engines <= 1:
        return hits
    rng = np.random.default_rng(zlib.crc32(seed_text.encode()))
    return np.where(rng.random(len(hits)) < 1.0 / engines, hits, 0)


class SessionCache:
    """The prompts a server's prefix cache still holds across the runs of one benchmark session.

    A prompt is known by its key (its index in a seeded sampler): two prompts with the same key
    share their first ``min(length)`` tokens. ``capacity_tokens`` is the KV cache's size in tokens.
    """

    def __init__(self, capacity_tokens: float):
        self.capacity_tokens = capacity_tokens
        self._held: OrderedDict[object, int] = OrderedDict()  # key -> cached prompt tokens, oldest first
        self._sizes: dict[object, int] = {}  # key -> blocks' tokens it occupies (prompt + output)

    def hits(self, prompt_keys: Sequence[object], input_tokens: Sequence[int]) -> np.ndarray:
        """Prefix tokens of each prompt the cache holds now."""
        return np.array([min(self._held.get(key, 0), int(n)) for key, n in zip(prompt_keys, input_tokens)],
                        dtype=np.int64)

    def warm(self, prompt_key: object, input_tokens: int, output_tokens: int) -> None:
        """One request served alone before a run (vllm bench serve's initial test prompt)."""
        self.record([prompt_key], [input_tokens], [output_tokens])

    def record(self, prompt_keys: Sequence[object], input_tokens: Sequence[int], output_tokens: Sequence[int]) -> None:
        """A run finished these requests (in this order); its blocks are now the newest in the cache."""
        for key, prompt, output in zip(prompt_keys, input_tokens, output_tokens):
            prompt, size = int(prompt), int(prompt) + int(output)
            if key in self._held:
                prompt = max(prompt, self._held.pop(key))
                size = max(size, self._sizes.pop(key))
            self._held[key] = prompt
            self._sizes[key] = size
        total = sum(self._sizes.values())
        while total > self.capacity_tokens and self._held:
            key, _ = self._held.popitem(last=False)
            total -= self._sizes.pop(key)


# --- clients as classes -------------------------------------------------------------------------
# Each client's protocol, cited from its source (repository@version:file:line; the files as the
# version's PyPI wheel ships them, or the repository at a commit).
class BenchmarkClient(ABC):
    """A benchmark client: the traffic it sends for a list of request lengths.

    ``traffic(inputs, outputs)`` is the servopt traffic of one run: when each request goes (a trace
    of send times, possibly behind a concurrency cap, or closed-loop clients) and its lengths.
    """

    name: str

    @abstractmethod
    def arrival(self, n: int) -> dict:
        """The ``traffic.arrival`` of a run of ``n`` requests (their send times or its clients)."""

    def traffic(self, inputs: Sequence[int], outputs: Sequence[int], cached: Sequence[int] | None = None) -> Traffic:
        arrival = self.arrival(len(inputs))
        if arrival["kind"] == "closed_loop":
            # Closed-loop clients send fixed lengths (every request of these clients is alike).
            if len(set(inputs)) != 1 or len(set(outputs)) != 1 or cached:
                raise InputError(f"{self.name}: servopt runs closed-loop clients with one prompt and output length")
            return Traffic.model_validate({"arrival": arrival, "input_tokens": {"kind": "fixed", "value": int(inputs[0])},
                                           "output_tokens": {"kind": "fixed", "value": int(outputs[0])}})
        records = {"arrival_s": arrival.pop("send_s"), "input_tokens": list(inputs), "output_tokens": list(outputs),
                   "cached_tokens": None if cached is None else list(cached)}
        return Traffic.model_validate({"arrival": {**arrival, "records": records}})


def _trace(send_s: Sequence[float], max_concurrency: int | None = None) -> dict:
    return {"kind": "trace", "send_s": [float(t) for t in send_s],
            **({"max_concurrency": max_concurrency} if max_concurrency else {})}


@dataclass(frozen=True)
class VllmBenchServe(BenchmarkClient):
    """``vllm bench serve`` (``benchmark_serving.py`` before 0.10): seeded gamma gaps, an optional cap.

    - ``--seed`` (default 0) seeds numpy's global generator (vllm/benchmarks/serve.py@v0.12.0:1305);
      the gaps are ``gamma(burstiness, 1 / (rate x burstiness))`` (:204-208; constant ``1 / rate`` at
      burstiness inf, :199-202; all at once at rate inf, :197-198), rescaled from 0.10 so the last
      request goes at ``num_prompts / rate`` (:213-226; before it each request after the previous
      one's gap, :func:`vllm_bench_send_times`).
    - ``--max-concurrency``: a semaphore of that many slots around every request (:654-660): a
      request goes at its time or when a slot frees; its latencies count from then.
    - before the run the first prompt is sent alone ("Starting initial single prompt test run", :536),
      and ``--num-warmups`` copies of it behind the same cap (:584-603), all waited for: only that
      prompt's blocks are warm when the run starts (:class:`SessionCache.warm`).

    Example:
        >>> VllmBenchServe(request_rate=2.0, vllm_version="0.8.3").arrival(3)["send_s"]
        [0.0, 0.39..., 1.02...]
        >>> VllmBenchServe(max_concurrency=4).arrival(8)["max_concurrency"]
        4
    """

    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    vllm_version: str | None = None
    draws_before: int = 0
    name: str = "vllm bench serve"

    def arrival(self, n: int) -> dict:
        if not math.isfinite(self.request_rate):
            send = [0.0] * n
        elif math.isinf(self.burstiness):
            send = [i / self.request_rate for i in range(n)]
        else:
            send = vllm_bench_send_times(n, self.request_rate, burstiness=self.burstiness, seed=self.seed,
                                         vllm_version=self.vllm_version, draws_before=self.draws_before)
        cap = self.max_concurrency if self.max_concurrency and self.max_concurrency < n else None
        return _trace(send, cap)


@dataclass(frozen=True)
class AiperfConcurrency(BenchmarkClient):
    """aiperf in concurrency mode (no request rate): a semaphore of ``concurrency`` credits, the next
    credit dropped as soon as one returns.

    - aiperf@0.4.0:aiperf/timing/request_rate_strategy.py:41-43 creates the semaphore, :53-54 takes a
      credit before each request, :87-96 a returned credit frees it; the concurrency-burst interval
      is 0 (:173-179): closed-loop clients without think time.
    - the warm-up phase (``--warmup-request-count``) is sent and waited for in full before the
      profiling phase starts (aiperf/timing/credit_issuing_strategy.py:131-160; aiperf@0.5.0 keeps
      warm-up phases non-seamless, aiperf/timing/config.py:219): profiling opens with
      ``concurrency`` requests at once on an idle server, and every one of ``request_count``
      requests is measured.

    Example:
        >>> AiperfConcurrency(concurrency=8, request_count=80).arrival(80)["requests_per_client"]
        10
    """

    concurrency: int
    request_count: int
    warmup_request_count: int = 0
    name: str = "aiperf"

    def arrival(self, n: int) -> dict:
        if n != self.request_count or self.request_count % self.concurrency:
            raise InputError(f"aiperf: request_count {self.request_count} must be a multiple of concurrency "
                             f"{self.concurrency} (and the run's {n} requests) for servopt's closed loop")
        return {"kind": "closed_loop", "concurrency": self.concurrency,
                "requests_per_client": self.request_count // self.concurrency}


@dataclass(frozen=True)
class GuideLLM(BenchmarkClient):
    """GuideLLM's ``constant`` and ``poisson`` rate types (guidellm@0.3.1:guidellm/scheduler/strategy.py).

    Both send an initial burst of ``floor(rate)`` requests at the start: the code tests
    ``initial_burst is not None`` (:399, :466), which a boolean always is, so the burst comes whatever
    ``initial_burst`` says (:402, :469). ``constant`` then sends one every ``1 / rate`` from the
    start plus one period (:395, :406, :412); ``poisson`` draws exponential gaps of mean ``1 / rate``
    from ``random.Random(random_seed)`` (:476-480; ``random_seed`` default 42, :451).

    Example:
        >>> GuideLLM("constant", rate=2.0).arrival(4)["send_s"]
        [0.0, 0.0, 0.5, 1.0]
    """

    rate_type: str
    rate: float
    random_seed: int = 42
    name: str = "GuideLLM"

    def arrival(self, n: int) -> dict:
        if self.rate_type not in ("constant", "poisson") or not self.rate > 0:
            raise InputError(f"GuideLLM: rate_type '{self.rate_type}' with rate {self.rate}: use constant or poisson, "
                             "rate > 0")
        send = [0.0] * min(math.floor(self.rate), n)
        if self.rate_type == "constant":
            send += [(1 + i) / self.rate for i in range(n - len(send))]
        else:
            rand, t = random.Random(self.random_seed), 0.0
            for _ in range(n - len(send)):
                t += rand.expovariate(self.rate)
                send.append(t)
        return _trace(send)


@dataclass(frozen=True)
class InferencePerf(BenchmarkClient):
    """inference-perf's ``constant`` and ``poisson`` load types
    (kubernetes-sigs/inference-perf@c43eabe:inference_perf/loadgen/load_timer.py).

    ``constant`` draws ``rate x duration`` exponential gaps and rescales them to fill the stage's
    duration (:48-58): Poisson-like gaps whose last request lands at the end of the stage.
    ``poisson`` draws a Poisson count for every second (:80) and spreads that second's requests the
    same way (:88); a second drawn empty passes with none (:83-85). The tool's generator is
    unseeded (``np.random.default_rng()``, :45, :71), so no two runs match; servopt draws with
    ``seed``.

    Example:
        >>> send = InferencePerf("constant", rate=4.0, duration_s=2.0).arrival(8)["send_s"]
        >>> len(send), round(send[-1], 9)
        (8, 2.0)
    """

    load_type: str
    rate: float
    duration_s: float = 0.0
    seed: int = 0
    name: str = "inference-perf"

    def arrival(self, n: int) -> dict:
        rng = np.random.default_rng(self.seed)
        if self.load_type == "constant" and self.rate > 0 and self.duration_s > 0:
            gaps = rng.exponential(1 / self.rate, int(self.rate * self.duration_s))
            send = np.cumsum(gaps * self.duration_s / gaps.sum())[:n].tolist()
        elif self.load_type == "poisson" and self.rate > 0:
            send, second = [], 0.0
            while len(send) < n:
                count = int(rng.poisson(self.rate))
                if count:
                    gaps = rng.exponential(1 / count, count)
                    send += (second + np.cumsum(gaps / gaps.sum())).tolist()
                second += 1.0
            send = send[:n]
        else:
            raise InputError(f"inference-perf: load_type '{self.load_type}' with rate {self.rate}: use constant (with "
                             "duration_s) or poisson, rate > 0")
        if len(send) < n:
            raise InputError(f"inference-perf: a constant stage of {self.rate} req/s for {self.duration_s} s sends "
                             f"{len(send)} requests, not {n}")
        return _trace(send)
