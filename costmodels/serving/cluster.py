"""The driver: arrivals, routing, P/D hand-offs and closed-loop clients over many engines.

Engines are grouped in pools: one pool for a plain deployment (every replica, each with ``pp``
pipeline lanes or ``dp`` data-parallel ranks), or a prefill pool and a decode pool under P/D
disaggregation. A replica's data-parallel ranks take requests by vLLM's DP load balancer; an MoE
model's ranks step in lockstep as one :class:`~servopt.costmodels.serving.data_parallel.LockstepGroup`
(:mod:`.data_parallel`). A request enters the
front pool at its arrival; a prefill instance hands it, after the KV transfer, to the decode pool.

Every request reaches its engine ``request_overhead_s`` after the client sent it (the profile's
front-end latency: HTTP, chat template, tokenization, and the first token's way back), so a
closed-loop client's next request misses the step that starts right after its previous one
finished, as it does on a real server. Arrival times in the request table stay the clients' send
times, so TTFT and end-to-end latency include the front end.

Time advances by always committing the engine plan that ends first; every plan stops before the next
known arrival (unless that engine's queue is blocked anyway), so when an arrival is routed, every
engine has simulated exactly the steps that started before it. A finish can create an earlier event
(a closed-loop client's next request, a P/D hand-off); plans that reach past it are then re-cut.

Pipeline parallelism follows vLLM's virtual engines: ``pp`` micro-batches are in flight, each lane's
step is a full pass through all stages, each lane owns ``1/pp`` of the KV blocks, and a new request
joins the lane with the fewest unfinished requests (vLLM V0's ``min_cost_scheduler``; V1 keeps the
same ``pp`` in-flight batches over a shared pool). Lanes share the stages: when one lane's step is
heavier (a prefill chunk), the others wait for it stage by stage
(:class:`~servopt.costmodels.serving.engine.PipelineStages`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from .data_parallel import pick_rank
from .engine import Engine
from .requests import RequestTable
from .router import Router

ARRIVAL, HANDOFF = 0, 1


@dataclass
class Pool:
    """Engines of one role, grouped by replica (a group holds the replica's pipeline lanes, or its
    data-parallel ranks when ``data_parallel``)."""

    groups: list[list[Engine]]
    router: Router
    data_parallel: bool = False

    @property
    def engines(self) -> list[Engine]:
        return [e for group in self.groups for e in group]

    def route(self, time_s: float) -> Engine:
        group = self.groups[0]
        if len(self.groups) > 1:
            loads = [sum(e.outstanding_at(time_s) for e in g) for g in self.groups]
            group = self.groups[self.router.choose(loads)]
        if len(group) == 1:
            return group[0]
        if self.data_parallel:
            return pick_rank(group)
        return min(group, key=lambda e: e.outstanding_at(time_s))


@dataclass
class ClosedLoop:
    """``concurrency`` clients, each sending its next request ``think_time_s`` after the last finished."""

    concurrency: int
    think_time_s: float


class Cluster:
    """All pools of a deployment, driven through one request stream."""

    def __init__(self, table: RequestTable, front: Pool, decode: Pool | None = None,
                 transfer_s: Callable[[int], float] | None = None, request_overhead_s: float = 0.0):
        self.table = table
        self.request_overhead_s = request_overhead_s
        self.front = front
        self.decode = decode
        self.transfer_s = transfer_s
        self.engines = front.engines + (decode.engines if decode else [])

    def run(self, arrival_s: list[float] | None, closed_loop: ClosedLoop | None) -> None:
        """Simulate until every request has finished."""
        table = self.table
        n = table.size
        front_end = self.request_overhead_s
        if closed_loop is not None:
            first = min(closed_loop.concurrency, n)
            events = [(front_end, rid, ARRIVAL) for rid in range(first)]
            for rid in range(first):
                table.arrival_s[rid] = 0.0
            next_rid = first
        else:
            events = [(t + front_end, rid, ARRIVAL) for rid, t in enumerate(arrival_s)]
            next_rid = n
        heapq.heapify(events)
        engines = self.engines
        single = engines[0] if len(engines) == 1 else None
        inf = math.inf
        while True:
            horizon = events[0][0] if events else inf
            if single is not None:
                best = single
                if best.plan is None:
                    best.plan = best.plan_next(horizon)
                if best.plan is None:
                    best = None
            else:
                best = None
                for engine in engines:
                    if engine.plan is None:
                        engine.plan = engine.plan_next(horizon)
                    if engine.plan is not None and (best is None or engine.plan.end_s < best.plan.end_s):
                        best = engine
            if best is None:
                if not events:
                    break
                time_s, rid, kind = heapq.heappop(events)
                pool = self.front if kind == ARRIVAL else self.decode
                pool.route(time_s).enqueue(rid, time_s, handed_off=kind == HANDOFF)
                continue
            plan, best.plan = best.plan, None
            finished = best.commit(plan)
            if not finished:
                continue
            end = plan.end_s
            for rid in finished:
                if best.prefill_only:
                    ready = end + self.transfer_s(table.prompt[rid])
                    table.kv_ready_s[rid] = ready
                    heapq.heappush(events, (ready, rid, HANDOFF))
                elif closed_loop is not None and next_rid < n:
                    start = end + closed_loop.think_time_s
                    table.arrival_s[next_rid] = start
                    heapq.heappush(events, (start + front_end, next_rid, ARRIVAL))
                    next_rid += 1
            if single is None and events and events[0][0] < horizon:
                cut = events[0][0]
                for engine in engines:
                    if engine.plan is not None and engine.plan.last_start_s >= cut:
                        engine.plan = None
