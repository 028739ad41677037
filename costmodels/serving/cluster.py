"""The driver: arrivals, routing, P/D hand-offs and closed-loop clients over many engines.

Engines are grouped in pools: one pool for a plain deployment (every replica, each with ``pp``
pipeline lanes or ``dp`` data-parallel ranks), or a prefill pool and a decode pool under P/D
disaggregation. A replica's data-parallel ranks take requests by vLLM's DP load balancer; an MoE
model's ranks step in lockstep as one :class:`~servopt.costmodels.serving.data_parallel.LockstepGroup`
(:mod:`.data_parallel`). A request enters the
front pool at its arrival; a prefill instance hands it, after the KV transfer, to the decode pool.

Every request passes its replica's front end before its engine sees it: the front end tokenizes
requests one at a time (vLLM's API server hands every prompt to a single tokenizer thread), taking
``tokenize_s_per_token`` per prompt token, and the request then reaches the engine
``request_overhead_s`` later (the profile's front-end latency: HTTP, chat template, the hops to the
engine and the first token's way back). So a burst of long prompts enters the engine spread out, and
a closed-loop client's next request misses the step that starts right after its previous one
finished, as on a real server. Arrival times in the request table stay the clients' send times, so
TTFT and end-to-end latency include the front end.

Time advances by always committing the engine plan that ends first, unless an event comes earlier.
Engines plan their work (a step, or a run of identical decode steps up to the next finish) without
looking at arrivals: routing reads each engine's outstanding requests in the middle of a plan (a
plan finishes requests only at its end), and only the engine that a request reaches has its plan
cut, to the steps that start before the request can join. So the cost of a simulated request does
not grow with the number of engines it could have gone to.

Pipeline parallelism follows vLLM's virtual engines: ``pp`` micro-batches are in flight, each lane's
step is a full pass through all stages, each lane owns ``1/pp`` of the KV blocks, and a new request
joins the lane with the fewest unfinished requests (vLLM V0's ``min_cost_scheduler``; V1 keeps the
same ``pp`` in-flight batches over a shared pool). Lanes share the stages: when one lane's step is
heavier (a prefill chunk), the others wait for it stage by stage
(:class:`~servopt.costmodels.serving.engine.PipelineStages`).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .data_parallel import pick_rank
from .engine import Engine
from .requests import RequestTable
from .router import Router

ARRIVAL, ENQUEUE, HANDOFF = 0, 1, 2


class WorkLimitReached(Exception):
    """The run committed its budget of engine plans before every request finished."""

    def __init__(self, plans: int, time_s: float):
        super().__init__(f"stopped after {plans} engine plans at {time_s:.6g} s")
        self.plans, self.time_s = plans, time_s


@dataclass
class Pool:
    """Engines of one role, grouped by replica (a group holds the replica's pipeline lanes, or its
    data-parallel ranks when ``data_parallel``).

    Each replica has its front end: ``front_end_free_s[g]`` is when its tokenizer is next free and
    ``pending[g]`` counts requests routed there that its engines have not yet received.
    """

    groups: list[list[Engine]]
    router: Router
    data_parallel: bool = False
    front_end_free_s: list[float] = None
    pending: list[int] = None

    def __post_init__(self) -> None:
        self.front_end_free_s = [0.0] * len(self.groups)
        self.pending = [0] * len(self.groups)

    @property
    def engines(self) -> list[Engine]:
        return [e for group in self.groups for e in group]

    def route_group(self, time_s: float) -> int:
        """The replica a new request goes to (requests still in a front end count as outstanding)."""
        if len(self.groups) == 1:
            return 0
        loads = [sum(e.outstanding_at(time_s) for e in g) + pending for g, pending in zip(self.groups, self.pending)]
        return self.router.choose(loads)

    def engine_in(self, group: int, time_s: float) -> Engine:
        lanes = self.groups[group]
        if len(lanes) == 1:
            return lanes[0]
        if self.data_parallel:
            return pick_rank(lanes)
        return min(lanes, key=lambda e: e.outstanding_at(time_s))


@dataclass
class ClosedLoop:
    """``concurrency`` clients, each sending its next request ``think_time_s`` after the last finished.

    With ``schedule_s`` the requests also have send times (an open-loop schedule behind a cap of
    ``concurrency`` in flight, as ``vllm bench serve --max-concurrency`` sends them): request ``i``
    goes at its scheduled time or when a slot frees, whichever is later.
    """

    concurrency: int
    think_time_s: float
    schedule_s: list[float] | None = None


class Cluster:
    """All pools of a deployment, driven through one request stream."""

    def __init__(self, table: RequestTable, front: Pool, decode: Pool | None = None,
                 transfer_s: Callable[[int], float] | None = None, request_overhead_s: float = 0.0,
                 tokenize_s_per_token: float = 0.0):
        self.table = table
        self.request_overhead_s = request_overhead_s
        self.tokenize_s_per_token = tokenize_s_per_token
        self.front = front
        self.decode = decode
        self.transfer_s = transfer_s
        self.engines = front.engines + (decode.engines if decode else [])

    def _front_end_queue(self, arrivals: list[tuple[float, int, int]], group_of: dict[int, int]) -> list[tuple]:
        """The enqueue events of arrivals (in time order) that all go to the front pool's one replica:
        each waits for the tokenizer after the previous one, then reaches the engine
        ``request_overhead_s`` later (what the ARRIVAL events would have scheduled one by one)."""
        front, table = self.front, self.table
        per_token, latency = self.tokenize_s_per_token, self.request_overhead_s
        free = front.front_end_free_s[0]
        out = []
        for time_s, rid, _ in arrivals:
            free = (time_s if time_s > free else free) + per_token * table.prompt[rid]
            out.append((free + latency, rid, ENQUEUE))
            group_of[rid] = 0
        front.front_end_free_s[0] = free
        front.pending[0] += len(out)
        return out

    def run(self, arrival_s: list[float] | None, closed_loop: ClosedLoop | None, max_plans: int | None = None,
            follow_ups: bool = False) -> None:
        """Simulate until every request has finished (see the module docstring); :class:`WorkLimitReached`
        after ``max_plans`` committed engine plans (a plan is one step, or a closed-form run of decode steps).

        ``follow_ups``: the table's requests are turns of conversations (``table.follow_up``): a
        turn's next one arrives its ``think_s`` after it finished; only first turns have arrival
        times to start with (the others' are NaN)."""
        table = self.table
        n = table.size
        latency, per_token = self.request_overhead_s, self.tokenize_s_per_token
        front, decode = self.front, self.decode
        schedule = closed_loop.schedule_s if closed_loop is not None else None
        if closed_loop is not None:
            first = min(closed_loop.concurrency, n)
            for rid in range(first):
                table.arrival_s[rid] = schedule[rid] if schedule is not None else 0.0
            events = [(table.arrival_s[rid], rid, ARRIVAL) for rid in range(first)]
            next_rid = first
        else:
            # (numpy builds one event per request several times faster than a Python loop.)
            times = np.asarray(arrival_s, dtype=float)
            known = np.flatnonzero(~np.isnan(times))
            events = list(zip(times[known].tolist(), known.tolist(), itertools.repeat(ARRIVAL)))
            next_rid = n
        group_of: dict[int, int] = {}
        engines = self.engines
        # Pipeline lanes share their stages: a lane's period depends on the others' current work, so
        # their plans stop at every event, where the others' work may change.
        lanes = [e for e in engines if getattr(e, "stages", None) is not None]
        staged = {id(e) for e in lanes}
        if closed_loop is None and not follow_ups and not lanes and len(front.groups) == 1:
            # Every arrival is known and there is no routing choice to make: each request's time at
            # the engine follows from the replica's tokenizer queue alone, so it is queued directly.
            events = self._front_end_queue(sorted(events), group_of)
        # The events known from the start enter the heap one at a time, in order (the next of them is
        # always in it, so its first entry is still the earliest event): the heap stays small, and
        # popping from it costs a few comparisons instead of one per level of a heap of every request.
        known = iter(sorted(events))
        upcoming = next(known, None)
        events = [] if upcoming is None else [upcoming]
        inf = math.inf
        plans = 0
        budget = max_plans if max_plans is not None else inf
        # Engines whose plan must be (re)made, and the plans made, by end time; an entry whose plan is
        # no longer its engine's is stale. Idle engines are planned again only when work reaches them.
        # A lone engine (no lanes: its horizon is always infinite) needs no heap: its plan is the next.
        dirty = list(engines)
        planned: list = []
        order = itertools.count()
        heappush, heappop = heapq.heappush, heapq.heappop
        alone = engines[0] if len(engines) == 1 else None
        # Whether a finished request can cause an event: a hand-off, a client's or a conversation's next request.
        reacting = decode is not None or closed_loop is not None or follow_ups
        while True:
            if alone is not None:
                best = alone
                plan = best.plan
                if plan is None:
                    plan = best.plan = best.plan_next(inf)
            else:
                for engine in dirty:
                    plan = engine.plan
                    if plan is None:
                        plan = engine.plan = engine.plan_next(
                            events[0][0] if staged and events and id(engine) in staged else inf)
                    if plan is not None:
                        heappush(planned, (plan.end_s, next(order), engine, plan))
                while planned and planned[0][3] is not planned[0][2].plan:
                    heappop(planned)
                best, plan = (planned[0][2], planned[0][3]) if planned else (None, None)
            dirty = []
            if events and (plan is None or events[0][0] < plan.end_s):
                event = heappop(events)
                if event is upcoming:
                    upcoming = next(known, None)
                    if upcoming is not None:
                        heappush(events, upcoming)
                time_s, rid, kind = event
                if kind == ARRIVAL:
                    # Route, then wait for the replica's tokenizer; the engine sees the request later.
                    group = front.route_group(time_s)
                    start = max(time_s, front.front_end_free_s[group])
                    front.front_end_free_s[group] = start + per_token * table.prompt[rid]
                    front.pending[group] += 1
                    group_of[rid] = group
                    heappush(events, (front.front_end_free_s[group] + latency, rid, ENQUEUE))
                elif kind == ENQUEUE:
                    group = group_of.pop(rid)
                    front.pending[group] -= 1
                    dirty.append(_hand_over(front.engine_in(group, time_s), rid, time_s, False))
                else:
                    dirty.append(_hand_over(decode.engine_in(decode.route_group(time_s), time_s), rid, time_s, True))
                if lanes:
                    dirty.extend(lane for lane in lanes if lane.plan is None)
                continue
            if plan is None:
                break
            if alone is None:
                heappop(planned)
            best.plan = None
            plans += 1
            if plans > budget:
                raise WorkLimitReached(plans - 1, plan.end_s)
            finished = best.commit(plan)
            dirty = [best]
            if not finished or not reacting:
                continue
            end = plan.end_s
            earliest = events[0][0] if events else inf
            prefill_only = best.prefill_only
            for rid in finished:
                if prefill_only:
                    ready = end + self.transfer_s(table.prompt[rid])
                    table.kv_ready_s[rid] = ready
                    heappush(events, (ready, rid, HANDOFF))
                elif closed_loop is not None and next_rid < n:
                    start = end + closed_loop.think_time_s
                    if schedule is not None:
                        start = max(start, schedule[next_rid])
                    table.arrival_s[next_rid] = start
                    heappush(events, (start, next_rid, ARRIVAL))
                    next_rid += 1
                elif follow_ups and table.follow_up[rid] >= 0:
                    turn = table.follow_up[rid]
                    table.arrival_s[turn] = end + table.think_s[turn]
                    heappush(events, (table.arrival_s[turn], turn, ARRIVAL))
            # A new event (a hand-off, a closed-loop client's or a conversation's next request) inside
            # a lane's plan: stop the plan there. Other engines are cut when a request reaches them.
            if lanes and events and events[0][0] < earliest:
                for lane in lanes:
                    if lane.plan is not None and lane.plan.last_start_s >= events[0][0]:
                        lane.plan = None
                        dirty.append(lane)


def _hand_over(engine, rid: int, time_s: float, handed_off: bool):
    """A request reaches ``engine`` at ``time_s``: the work it planned is cut to the steps that start
    before then (the request can join only the next step), and the request joins its queue."""
    plan = engine.plan
    if plan is not None and plan.last_start_s >= time_s:
        engine.plan = engine.cut(plan, time_s)
    engine.enqueue(rid, time_s, handed_off)
    return engine
