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
import zlib
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ..costmodels.vllm_defaults import parse_vllm_version

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
