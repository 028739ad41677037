"""Routers: which replica (or P/D instance) a new request goes to.

The policies that ``servopt export`` can start are those of the vLLM Router (``vllm-router``,
vllm-project/router@03e9af5 ``src/main.rs``: ``--policy`` takes random, round_robin, cache_aware,
power_of_two, consistent_hash, sticky_least_loaded or rendezvous_hash; its default is cache_aware).
Two of them depend only on the load, which is what the simulation knows of a request:

- ``round_robin`` (:class:`RoundRobinRouter`): targets in turn. servopt's default
  (``Deployment.router``; a workload's ``space: {router: [...]}`` searches others): exported as
  ``--policy round_robin``, and a fleet of N replicas is simulated exactly by one replica fed every
  N-th arrival (:func:`~servopt.costmodels.serving.simulator.simulated_share`).
- ``power_of_two`` (:class:`PowerOfTwoRouter`): two distinct targets drawn at random, the one with
  fewer requests in flight taken, the first on a tie (``src/policies/power_of_two.rs``: the worker's
  load is the router's count of its in-flight requests).

``least_outstanding`` (the fewest outstanding requests of all targets, join-the-shortest-queue) is
kept for predictions of other front ends; the vLLM Router has no such policy.

Example:
    >>> router = make_router("least_outstanding")
    >>> router.choose([3, 1, 1]), router.choose([3, 1, 1])
    (1, 2)
    >>> rr = make_router("round_robin")
    >>> [rr.choose([0, 0, 0]) for _ in range(4)]
    [0, 1, 2, 0]
    >>> two = make_router("power_of_two", seed=0)
    >>> sorted(set(two.choose([5, 0, 5]) for _ in range(50)))  # target 1 wins whenever it is drawn
    [0, 1, 2]
    >>> make_router("power_of_two", seed=0).choose([9, 0])  # of two targets, always the less loaded
    1
"""

from __future__ import annotations

import numpy as np

from ..errors import unknown_name_error

class Router:
    """Picks one of several targets given each one's outstanding (routed, unfinished) requests."""

    name: str

    def choose(self, outstanding: list[int]) -> int:
        raise NotImplementedError


class RoundRobinRouter(Router):
    """Targets in turn, whatever their load."""

    name = "round_robin"

    def __init__(self, seed: int = 0) -> None:
        self._next = 0

    def choose(self, outstanding: list[int]) -> int:
        index = self._next % len(outstanding)
        self._next = index + 1
        return index


class LeastOutstandingRouter(Router):
    """The target with the fewest outstanding requests; ties rotate so that no target is favoured."""

    name = "least_outstanding"

    def __init__(self, seed: int = 0) -> None:
        self._start = 0

    def choose(self, outstanding: list[int]) -> int:
        n = len(outstanding)
        best = min(range(n), key=lambda i: (outstanding[(self._start + i) % n], i))
        index = (self._start + best) % n
        self._start = index + 1
        return index


class PowerOfTwoRouter(Router):
    """The vLLM Router's ``power_of_two``: of two distinct targets drawn at random, the one with fewer
    requests in flight (the first drawn on a tie). Draws come from the router's own seeded stream, so
    the traffic's draws are the same whichever router a deployment has."""

    name = "power_of_two"

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng([seed, 2])
        self._pairs: list[tuple[int, int]] = []
        self._targets = 0

    def choose(self, outstanding: list[int]) -> int:
        n = len(outstanding)
        if n == 1:
            return 0
        if n != self._targets or not self._pairs:
            self._refill(n)
        first, second = self._pairs.pop()
        return first if outstanding[first] <= outstanding[second] else second

    def _refill(self, n: int, batch: int = 1024) -> None:
        """Draw pairs in batches (one numpy call per thousand requests, not two per request)."""
        first = self._rng.integers(0, n, batch)
        second = (first + self._rng.integers(1, n, batch)) % n  # uniform over the other n - 1
        self._pairs = list(zip(first.tolist(), second.tolist()))[::-1]
        self._targets = n


ROUTERS = {cls.name: cls for cls in (RoundRobinRouter, PowerOfTwoRouter, LeastOutstandingRouter)}


def make_router(name: str, seed: int = 0) -> Router:
    try:
        return ROUTERS[name](seed)
    except KeyError:
        raise unknown_name_error("router", name, ROUTERS) from None
