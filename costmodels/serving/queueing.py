"""Queueing delays shared by the analytic estimate and its per-class split: the shape of a wait
(:class:`Wait`) and the wait of a G/G/c queue (:func:`gg_wait`).

Example (M/M/4 at 3 erlangs: Erlang C exactly; burstier arrivals wait more often and longer):
    >>> w = gg_wait(servers=4, offered=3.0, service_s=1.0, busy_variability=1.0, wait_variability=1.0)
    >>> round(w.p, 3), round(w.mean_s, 3)
    (0.509, 0.509)
    >>> bursty = gg_wait(servers=4, offered=3.0, service_s=1.0, busy_variability=2.0, wait_variability=1.5)
    >>> round(bursty.p, 3), round(bursty.mean_s, 3)
    (0.625, 0.937)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _erlang_c(servers: int, offered: float) -> float:
    """Probability of waiting in M/M/c: Erlang B = P(X = c) / P(X <= c) for X ~ Poisson(offered), then
    C = B / (1 - rho + rho B). The Poisson terms are summed in log space relative to P(X = c), down
    to where they fall below 1e-30 of the mode's (12 standard deviations), so a large c costs one
    vector operation."""
    if offered >= servers:
        return 1.0
    if offered <= 0:
        return 0.0
    low = max(int(offered - 12 * math.sqrt(offered)) - 10, 0)
    k = np.arange(servers, low, -1, dtype=float)
    logs = np.cumsum(np.log(k / offered))  # log P(X = k - 1) / P(X = c)
    b = math.exp(-float(np.logaddexp.reduce(np.append(logs, 0.0))))
    rho = offered / servers
    return b / (1 - rho + rho * b)


@dataclass(frozen=True)
class Wait:
    """A queueing delay: zero with probability ``p``'s complement, else exponential with mean
    ``scale_s`` (the shape of the G/G/c wait in the heavy-traffic diffusion, and of Allen-Cunneen's)."""

    p: float
    scale_s: float

    @property
    def mean_s(self) -> float:
        return self.p * self.scale_s

    def sample(self, uniform: np.ndarray, exponential: np.ndarray) -> np.ndarray:
        return np.where(uniform < self.p, self.scale_s * exponential, 0.0)


NO_WAIT = Wait(0.0, 0.0)


def gg_wait(servers: int, offered: float, service_s: float, busy_variability: float, wait_variability: float,
            pool: int = 1) -> Wait | None:
    """The wait of a G/G/c queue of ``servers`` at ``offered`` erlangs (None: unstable), among
    ``pool`` such queues fed by a join-the-shortest-queue router.

    The probability of waiting is Erlang C at the load that gives an M/M/c the square-root-staffing
    margin beta = (c - a) / sqrt(a) of the G/G/c divided by sqrt(``busy_variability``): the
    Halfin-Whitt diffusion limit, whose only traffic parameter is beta over the square root of the
    busy-server count's variance-to-mean ratio (1 for Poisson arrivals; Erlang C exactly; no wait at
    0). The wait, given one, is exponential with mean ``wait_variability`` x S / (c - a), as in
    Kingman's and Allen-Cunneen's formulas (``wait_variability`` = (c_a^2 + c_s^2) / 2). For one
    server both variabilities are Kingman's.

    Join-the-shortest-queue keeps the pool's queues even, so it behaves as one queue of all their
    servers: a request waits only when every server is busy, and then behind its queue's share of
    the pool's waiting requests, which the queue's servers clear as fast as the pool's clear the whole.
    """
    if offered >= servers:
        return None
    if offered <= 0 or busy_variability <= 0:
        return NO_WAIT
    c, a = servers * pool, offered * pool
    beta = (c - a) / math.sqrt(a * busy_variability)
    root = (math.sqrt(beta**2 + 4 * c) - beta) / 2
    return Wait(_erlang_c(c, root**2), wait_variability * service_s / (c - a))
