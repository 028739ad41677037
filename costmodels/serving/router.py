"""Routers: which replica (or P/D instance) a new request goes to.

Example:
    >>> router = make_router("least_outstanding")
    >>> router.choose([3, 1, 1]), router.choose([3, 1, 1])
    (1, 2)
    >>> rr = make_router("round_robin")
    >>> [rr.choose([0, 0, 0]) for _ in range(4)]
    [0, 1, 2, 0]
"""

from __future__ import annotations

from ..errors import unknown_name_error


class Router:
    """Picks one of several targets given each one's outstanding (routed, unfinished) requests."""

    name: str

    def choose(self, outstanding: list[int]) -> int:
        raise NotImplementedError


class RoundRobinRouter(Router):
    """Targets in turn, whatever their load."""

    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def choose(self, outstanding: list[int]) -> int:
        index = self._next % len(outstanding)
        self._next = index + 1
        return index


class LeastOutstandingRouter(Router):
    """The target with the fewest outstanding requests; ties rotate so that no target is favoured."""

    name = "least_outstanding"

    def __init__(self) -> None:
        self._start = 0

    def choose(self, outstanding: list[int]) -> int:
        n = len(outstanding)
        best = min(range(n), key=lambda i: (outstanding[(self._start + i) % n], i))
        index = (self._start + best) % n
        self._start = index + 1
        return index


ROUTERS = {cls.name: cls for cls in (RoundRobinRouter, LeastOutstandingRouter)}


def make_router(name: str) -> Router:
    try:
        return ROUTERS[name]()
    except KeyError:
        raise unknown_name_error("router", name, ROUTERS) from None
