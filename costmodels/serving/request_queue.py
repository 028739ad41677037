"""The scheduler's waiting queue under vLLM's two scheduling policies (``--scheduling-policy``).

As in ``vllm/v1/core/sched/request_queue.py``:

- ``fcfs`` (:class:`collections.deque`): arrivals join the tail; a preempted request is put back at
  the head (``prepend_request``);
- ``priority`` (:class:`PriorityQueue`): requests are ordered by ``(priority, arrival_time)``, lower
  first (``Request.__lt__`` in ``vllm/v1/request.py``; ties by request id); there is no head to
  prepend to, so a preempted request re-enters at its place in that order.

Both offer what the scheduler uses of a deque: ``append``, ``appendleft``, ``extend``, ``popleft``,
``remove``, ``[0]``, iteration from the head, ``len`` and truth.

Example:
    >>> q = PriorityQueue(priority=[1, 0, 1], arrival_s=[0.0, 2.0, 1.0])
    >>> q.extend([0, 1, 2])
    >>> list(q), q.popleft(), list(q)
    ([1, 0, 2], 1, [0, 2])
    >>> q.appendleft(1)
    >>> q[0]
    1
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable, Iterator


class PriorityQueue:
    """Waiting requests sorted by ``(priority, arrival time, id)``: vLLM's ``PriorityRequestQueue``."""

    def __init__(self, priority: list[int], arrival_s: list[float]):
        self.priority, self.arrival_s = priority, arrival_s
        self._keys: list[tuple[int, float, int]] = []

    def append(self, rid: int) -> None:
        bisect.insort(self._keys, (self.priority[rid], self.arrival_s[rid], rid))

    # vLLM's prepend_request of the priority queue is add_request: order by (priority, arrival).
    appendleft = append

    def extend(self, rids: Iterable[int]) -> None:
        for rid in rids:
            self.append(rid)

    def popleft(self) -> int:
        return self._keys.pop(0)[2]

    def remove(self, rid: int) -> None:
        key = (self.priority[rid], self.arrival_s[rid], rid)
        index = bisect.bisect_left(self._keys, key)
        if index == len(self._keys) or self._keys[index] != key:
            raise ValueError(f"request {rid} is not waiting")
        del self._keys[index]

    def __getitem__(self, index: int) -> int:
        return self._keys[index][2]

    def __iter__(self) -> Iterator[int]:
        return (key[2] for key in self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __bool__(self) -> bool:
        return bool(self._keys)


def waiting_queue(policy: str, priority: list[int], arrival_s: list[float]) -> deque | PriorityQueue:
    """An empty waiting queue for ``policy`` (``fcfs`` or ``priority``)."""
    return PriorityQueue(priority, arrival_s) if policy == "priority" else deque()
