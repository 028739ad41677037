"""Each tenant class's queueing delay at a shared queue, under FCFS and under priority scheduling.

The analytic estimate (:mod:`.analytic`) models two queues in front of a request's first token: the
prefill server (prompt tokens at the rate of full-budget steps) and the sequence slots (KV cache or
``max_num_seqs``). For traffic with classes it first solves the aggregate (every class together:
the FCFS wait ``W`` of each queue, a :class:`~.queueing.Wait` with probability of waiting ``P``, and
its utilization ``rho``), then gives each class its share:

- ``fcfs``: every class waits as the aggregate does (arrival order ignores the class).
- ``priority``: vLLM's priority scheduling admits waiting requests in ``(priority, arrival)`` order
  but never preempts a running request for a waiting one (a running chunked prefill finishes its
  chunks first), so each queue is a non-preemptive priority queue. Cobham's formula gives the
  mean wait of class ``k`` as ``W_k = W0 / ((1 - s_{k-1}) (1 - s_k))``, where ``s_k`` is the
  utilization of the classes served before or with it (classes of equal priority share a level and
  wait first come, first served among themselves) and ``W0`` the mean residual work, which is
  ``W (1 - rho)`` of the FCFS queue with the same load. Exact for M/G/1; for M/M/c with a common
  service rate the same scaling of the Erlang-C wait is exact too, and it is used for the slot
  queue (whose classes' residences differ) as an approximation. A request waits at all with the
  aggregate's probability ``P`` (it finds the server busy), so a class's wait is ``P`` times an
  exponential of mean ``W_k / P``.

Not modelled here: vLLM preempts the lowest-priority running request when the KV cache runs out,
which shifts decode time from the high-priority to the low-priority class under KV pressure; the
estimate has no preemption (the simulation has it).

Example:
    >>> loads = [ClassLoad(rate_per_s=5, service_s=0.1, priority=0), ClassLoad(5, 0.06, 1)]
    >>> fcfs, prio = (class_waits(p, loads, Wait(0.8, 1.0)) for p in ("fcfs", "priority"))
    >>> [round(w.mean_s, 3) for w in fcfs], [round(w.mean_s, 3) for w in prio]
    ([0.8, 0.8], [0.32, 1.6])
    >>> round(sum(l.rate_per_s * l.service_s * w.mean_s for l, w in zip(loads, prio)), 6)  # work conserved
    0.64
"""

from __future__ import annotations

from dataclasses import dataclass

from .queueing import Wait


@dataclass(frozen=True)
class ClassLoad:
    """One class at a queue: its arrival rate there and its mean service (or residence) time."""

    rate_per_s: float
    service_s: float
    priority: int

    @property
    def utilization(self) -> float:
        return self.rate_per_s * self.service_s


def class_waits(policy: str, loads: list[ClassLoad], aggregate: Wait) -> list[Wait]:
    """Each class's wait at a queue whose classes together wait ``aggregate`` under FCFS."""
    if policy != "priority" or aggregate.mean_s <= 0 or len({c.priority for c in loads}) < 2:
        return [aggregate] * len(loads)
    rho = sum(c.utilization for c in loads)
    base = aggregate.mean_s * max(1.0 - rho, 0.0)  # the residual work W0 of Cobham's formula
    waits = []
    for c in loads:
        before = sum(o.utilization for o in loads if o.priority < c.priority)
        through = before + sum(o.utilization for o in loads if o.priority == c.priority)
        mean = base / max((1.0 - before) * (1.0 - through), 1e-12)
        waits.append(Wait(aggregate.p, mean / aggregate.p if aggregate.p > 0 else 0.0))
    return waits
