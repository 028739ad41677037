"""The vLLM V1 step rule: which requests a step runs, with how many tokens, and what that leaves in KV.

Follows ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``), as summarised in
``shared/data/reference/serving_facts.md`` section E.3:

1. Running requests first: every decode gets its ``1 + g`` tokens (``g`` speculative), then requests
   still in chunked prefill get what they need, each capped by the remaining token budget
   (``max_num_batched_tokens``).
2. Blocks are allocated for those tokens; when the pool runs out, the newest running request is
   preempted (RECOMPUTE: its blocks are freed and it goes back to the front of the waiting queue).
3. Only if nothing was preempted, waiting requests are admitted in queue order while budget
   remains and fewer than ``max_num_seqs`` run: a long prompt gets the rest of the budget as a chunk
   (with chunked prefill off it must fit whole), a prefix-cache hit skips its cached tokens, and
   admission stops at the first request whose blocks do not fit.

Scheduling policy (``--scheduling-policy``, vLLM's ``SchedulingPolicy``): under ``fcfs`` the queue is
first come, first served and the newest running request is the one preempted
(``self.running.pop()``). Under ``priority`` the waiting queue is ordered by ``(priority,
arrival_time)``, lower first (:mod:`.request_queue`), and when a running request cannot get its
blocks, the running request with the largest ``(priority, arrival_time)`` is preempted
(``max(self.running, key=lambda r: (r.priority, r.arrival_time))``), whether or not it was already
scheduled in this step: a scheduled victim gives its tokens back to the step's budget
(``token_budget += num_scheduled_tokens.pop(...)``), frees its blocks, restarts from zero computed
tokens (recompute) and re-enters the waiting queue at its (priority, arrival) place. A waiting
request never preempts a running one: admission still stops at the first request that does not fit,
and nothing is admitted in a step that preempted (vllm/v1/core/sched/scheduler.py, ``schedule``).
Preemption is resolved here for the step as a whole (victims in that order until the step's blocks
fit); vLLM resolves it request by request in running order and, when the request being scheduled is
itself the worst, skips the running requests after it for one step instead of preempting further.

The scheduler also decides when the batch is *fixed*: only decodes run and no waiting request could
be admitted. Then every step is identical but for context growth, and :meth:`Scheduler.plan_run`
says how many such steps can run before something changes (a finish, a full KV pool, a sliding
window filling up).

Example:
    >>> import numpy as np
    >>> from servopt.costmodels.serving.requests import RequestTable, DrawnRequests
    >>> table = RequestTable(DrawnRequests(np.zeros(2), np.array([3000, 100]), np.array([5, 5]),
    ...                                    np.zeros(2, dtype=int), 0))
    >>> sched = Scheduler(table, EngineLimits(max_num_seqs=8, max_num_batched_tokens=2048,
    ...                   chunked_prefill=True, num_blocks=1000), BlockCounter([-(-c // 16) for c in range(5000)]))
    >>> sched.waiting.extend([0, 1])
    >>> plan = sched.plan_step()
    >>> plan.chunks, plan.admitted
    ([(0, 2048)], 1)
"""

from __future__ import annotations

import heapq
import math
import sys
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from .predictor import StepComposition
from .prefix_cache import NO_OWNER, PrefixCache
from .request_queue import waiting_queue
from .requests import DECODE, DONE, PREFILL, WAITING, RequestTable

_new_tuple = tuple.__new__


@dataclass(frozen=True)
class EngineLimits:
    """Scheduling limits of one engine."""

    max_num_seqs: int
    max_num_batched_tokens: int
    chunked_prefill: bool
    num_blocks: int
    prefill_only: bool = False  # a P/D prefill instance: hand a request off after its first token
    scheduling_policy: str = "fcfs"  # or "priority" (vLLM --scheduling-policy)


class BlockCounter:
    """Paged blocks a request of a given context occupies, from ``MemoryPlan.blocks_needed``.

    Tabulated up to the longest context the engine can see, so the event loop looks counts up.
    """

    def __init__(self, table: list[int], groups: float = 1.0, block_size: int = 16):
        self.table = table
        self.array = np.asarray(table, dtype=np.int64)
        # blocks(c) <= groups x (c / block_size + 1): the cheap upper bound used before exact sums.
        self.groups = groups
        self.block_size = block_size

    @classmethod
    def from_plan(cls, plan, max_tokens: int) -> BlockCounter:
        counts = plan.blocks_needed(np.arange(max_tokens + 1))
        return cls(counts.tolist(), float(plan.layout.groups), plan.block_size)


@dataclass(slots=True)
class StepPlan:
    """One scheduled step: who is preempted, which chunks run, and the step's sums."""

    victims: list[int]
    chunks: list[tuple[int, int]]  # (request, tokens): running prefills, then new admissions
    admitted: int  # how many waiting requests the chunks admit (the last chunks; the queue's head when planned)
    decodes: int  # running decodes this step (their token gap is the step's duration)
    composition: StepComposition
    num_running: int
    kv_tokens: float


@dataclass(slots=True)
class RunPlan:
    """A fixed decode-only batch that can advance ``max_steps`` steps (before time limits)."""

    max_steps: int
    num_seqs: int
    context: float
    context_windowed: float
    windowed_growing: int  # sequences whose windowed context still grows
    horizon_matters: bool  # a new arrival could join: the run must stop at the next arrival


@dataclass
class Scheduler:
    """Queues, KV blocks and the step rule of one engine."""

    table: RequestTable
    limits: EngineLimits
    blocks: BlockCounter
    query_per_seq: int = 1
    growth: float = 1.0  # mean context growth of a decode per step (tokens per verify step)
    window: int | None = None
    speculation: object | None = None
    rng: np.random.Generator | None = None
    waiting: deque = field(default_factory=deque)
    running: dict = field(default_factory=dict)  # insertion-ordered set, oldest admission first
    prefilling: list = field(default_factory=list)
    tick: int = 0
    num_decode: int = 0
    decode_context: float = 0.0
    decode_shared_blocks: int = 0
    prefill_blocks: int = 0
    prefill_context: int = 0
    shared_blocks: int = 0
    finish_heap: list = field(default_factory=list)
    gaps_s: list = field(default_factory=list)  # (time, gap) of token gaps across a preemption or hand-off
    gap_requests: list = field(default_factory=list)  # the request of each entry of gaps_s
    cache: PrefixCache | None = None  # conversations' cached prefixes (multi-turn sessions with prefix caching)
    class_decodes: list = field(default_factory=list)  # decoding requests per tenant class (one without classes)
    _decode_cache: tuple | None = field(default=None, repr=False)
    _room_after_run: bool = field(default=False, repr=False)  # a run with room for arrivals was planned (plan)

    def __post_init__(self) -> None:
        t = self.table
        self.waiting = waiting_queue(self.limits.scheduling_policy, t.priority, t.arrival_s)
        self.class_decodes = [0] * t.num_classes

    # --- state helpers ---------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def context(self, rid: int) -> float:
        t = self.table
        return t.base_context[rid] + self.growth * (self.tick - t.base_tick[rid])

    def _decode_arrays(self) -> tuple[list[int], np.ndarray, np.ndarray, np.ndarray]:
        """(ids, base contexts, base ticks, shared-prefix blocks) of the decoding requests, cached until
        one joins or leaves: exact block counts need them often under KV pressure."""
        if self._decode_cache is None:
            t = self.table
            rids = [r for r in self.running if t.state[r] == DECODE]
            n = len(rids)
            self._decode_cache = (
                rids,
                np.fromiter((t.base_context[r] for r in rids), float, n),
                np.fromiter((t.base_tick[r] for r in rids), float, n),
                np.fromiter((self._shared_blocks(r) for r in rids), np.int64, n),
            )
        return self._decode_cache

    def _decoding(self) -> list[int]:
        return self._decode_arrays()[0]

    def _decode_contexts(self) -> np.ndarray:
        """Current contexts of the decoding requests (in :meth:`_decoding` order)."""
        _, base, ticks, _ = self._decode_arrays()
        return base + self.growth * (self.tick - ticks)

    def _own_decode_blocks(self, contexts: np.ndarray, extra: float) -> np.ndarray:
        """Blocks each decode holds at ``contexts + extra`` tokens (lookahead slots included), less its
        shared-prefix blocks (held once for all)."""
        tokens = np.ceil(contexts + extra - 1e-9).astype(np.int64) + self.query_per_seq - 1
        return self.blocks.array[np.minimum(tokens, len(self.blocks.table) - 1)] - self._decode_arrays()[3]

    def _used_upper(self, extra_tokens_per_decode: float = 0.0) -> float:
        b = self.blocks
        tokens = self.decode_context + self.num_decode * (self.query_per_seq + extra_tokens_per_decode)
        decode = b.groups * (tokens / b.block_size + self.num_decode) - self.decode_shared_blocks
        return decode + self.prefill_blocks + self.shared_blocks

    def _used_exact(self) -> int:
        decode = int(self._own_decode_blocks(self._decode_contexts(), 0.0).sum()) if self.num_decode else 0
        return decode + self.prefill_blocks + self.shared_blocks

    def _shared_blocks(self, rid: int) -> int:
        """Blocks of the request's cached prefix that other requests share (held once for all)."""
        t = self.table
        return self.blocks.table[t.cached[rid]] if t.cached_shared[rid] else 0

    def _own_blocks(self, rid: int, tokens: int) -> int:
        return self.blocks.table[tokens] - self._shared_blocks(rid)

    def windowed_sum(self) -> tuple[float, int, int]:
        """(sum of min(context, window), sequences still below the window, steps until the next one
        reaches it) over the decoding sequences."""
        if self.window is None or not self.num_decode:
            return self.decode_context, self.num_decode, sys.maxsize
        ctx = self._decode_contexts()
        below = ctx < self.window
        steps = np.ceil((self.window - ctx[below]) / self.growth)
        return float(np.minimum(ctx, self.window).sum()), int(below.sum()), int(steps.min()) if below.any() else sys.maxsize

    # --- planning --------------------------------------------------------------------------------
    def plan_step(self) -> StepPlan:
        """The next step by the V1 rule (does not change any state; :meth:`apply_step` does)."""
        t, lim, counts = self.table, self.limits, self.blocks.table
        q = self.query_per_seq
        num_decode, decode_context = self.num_decode, self.decode_context
        # (Conditional expressions instead of min() here and below: the built-in costs three times as
        # much, once per simulated step.)
        max_tokens, decode_tokens = lim.max_num_batched_tokens, num_decode * q
        budget = max_tokens - (max_tokens if max_tokens < decode_tokens else decode_tokens)
        chunks: list[tuple[int, int]] = []
        need_prefill = 0
        for rid in self.prefilling:
            if budget <= 0:
                break
            done = t.computed[rid]
            n = t.prompt[rid] + t.generated[rid] - done
            if budget < n:
                n = budget
            chunks.append((rid, n))
            need_prefill += counts[done + n] - counts[done]
            budget -= n
        # A decode needs at most one new block per KV group and per block_size tokens it adds.
        need_decode_upper = num_decode * self.blocks.groups * (1 + q // self.blocks.block_size)
        room = lim.num_blocks - self._used_upper() - need_decode_upper - need_prefill
        victims: list[int] = []
        if room < 0:
            room, victims, chunks, num_decode, decode_context, budget = self._preempt_until_fits(chunks, budget)
        admitted = 0
        exact = bool(victims) or room < 0
        if not victims:
            seats = lim.max_num_seqs - len(self.running)
            for rid in self.waiting:
                if budget <= 0 or seats <= 0:
                    break
                done = t.computed[rid]
                remaining = t.prompt[rid] + t.generated[rid] - done
                n = budget if budget < remaining else remaining
                if n < remaining and not lim.chunked_prefill:
                    break
                shared = counts[t.cached[rid]] if t.cached_shared[rid] else 0
                need = counts[done + n] - shared + (shared - self.shared_blocks if shared > self.shared_blocks else 0)
                if need > room and not exact:
                    exact = True
                    room = self._exact_room(chunks)
                if need > room:
                    break
                room -= need
                chunks.append((rid, n))
                admitted += 1
                budget -= n
                seats -= 1
        composition, kv_tokens = self._compose(chunks, num_decode, decode_context, victims)
        return StepPlan(victims, chunks, admitted, num_decode, composition,
                        len(self.running) - len(victims) + admitted, kv_tokens)

    def _exact_room(self, chunks: list[tuple[int, int]]) -> float:
        """Free blocks after this step's decodes and running chunks, counted exactly."""
        counts = self.blocks.table
        need = sum(counts[self.table.computed[r] + n] - counts[self.table.computed[r]] if r in self.running
                   else self._own_blocks(r, self.table.computed[r] + n) for r, n in chunks)
        if self.num_decode:
            ctx = self._decode_contexts()
            grow = self._own_decode_blocks(ctx, 1.0) - self._own_decode_blocks(ctx, 0.0)
            need += int(grow.sum())
        return self.limits.num_blocks - self._used_exact() - need

    def _preempt_until_fits(self, chunks, budget):
        """Exact block check of the running requests; preempt the newest until the rest fit."""
        t, counts = self.table, self.blocks.table
        rids = self._decoding()
        ctx = self._decode_contexts()
        held = self._own_decode_blocks(ctx, 0.0)
        grow = self._own_decode_blocks(ctx, 1.0) - held
        per = {r: (int(h), int(g), float(c)) for r, h, g, c in zip(rids, held, grow, ctx)}
        chunk_of = dict(chunks)
        need = int(grow.sum()) + sum(counts[t.computed[r] + n] - counts[t.computed[r]] for r, n in chunks)
        free = self.limits.num_blocks - (int(held.sum()) + self.prefill_blocks + self.shared_blocks)
        victims: list[int] = []
        num_decode, decode_context = self.num_decode, self.decode_context
        order = list(self.running)  # oldest admission first: fcfs preempts the newest
        if self.limits.scheduling_policy == "priority":  # the largest (priority, arrival) first
            order.sort(key=lambda r: (t.priority[r], t.arrival_s[r], r))
        while need > free and order:
            victim = order.pop()
            victims.append(victim)
            if victim in per:
                h, g, c = per[victim]
                free += h
                need -= g
                num_decode -= 1
                decode_context -= c
                budget += self.query_per_seq
            else:
                done = t.computed[victim]
                free += self._own_blocks(victim, done)
                n = chunk_of.pop(victim, 0)
                need -= counts[done + n] - counts[done]
                budget += n
        kept = [(r, n) for r, n in chunks if r in chunk_of]
        return free - need, victims, kept, num_decode, decode_context, budget

    def _compose(self, chunks, num_decode, decode_context, victims) -> tuple[StepComposition, float]:
        """Step sums: decodes, plus chunks (a 1-token chunk that completes a hand-off runs as a decode)."""
        t = self.table
        window = self.window
        tokens = count = 0
        pairs = pairs_w = kv = kv_w = 0.0
        handoff_decodes, handoff_context = 0, 0.0
        prefill_context = self.prefill_context
        for rid, n in chunks:
            done = t.computed[rid]
            if n == 1 and done and done == t.prompt[rid] + t.generated[rid] - 1:
                handoff_decodes += 1
                handoff_context += done
                continue
            tokens += n
            count += 1
            full = n * done + n * (n + 1) / 2
            pairs += full
            kv += done + n
            if window:
                pairs_w += min(full, n * window)
                kv_w += min(done + n, window + n)
        if window:
            windowed = self.windowed_sum()[0] if not victims else float(
                np.minimum(self._decode_contexts()[[r not in victims for r in self._decoding()]], window).sum())
            windowed += min(handoff_context, window * handoff_decodes) if handoff_decodes else 0.0
        else:
            pairs_w, kv_w = pairs, kv
            windowed = decode_context + handoff_context
        # tuple.__new__ builds the named tuple without its Python-level __new__ (once per simulated step).
        composition = _new_tuple(StepComposition, (num_decode + handoff_decodes, decode_context + handoff_context,
                                                   windowed, tokens, count, pairs, pairs_w, kv, kv_w))
        return composition, decode_context + prefill_context

    def plan(self) -> RunPlan | StepPlan:
        """The next work: the fixed decode batch's run (:meth:`plan_run`), or else one step (:meth:`plan_step`).

        A step that admits a waiting request without preempting rules a run out: a run needs the
        queue's head to fail :meth:`_head_fits`, which passes every head such a step admits (the
        same tokens and blocks; the step's bound on the free blocks lies below the head check's by
        the decodes' new blocks, and both fall back on the same exact count). So once a run with room
        for one more request was planned (nobody waiting, tokens and seats to spare), the requests
        that arrive next are likely admitted: the step is planned first, and is the plan if it admits
        one. Otherwise, and at any other time, the run is sought first, as the rule reads (either
        order gives the same plan; the order only saves work).
        """
        if self._room_after_run and self.waiting and not self.prefilling and self.num_decode:
            self._room_after_run = False
            step = self.plan_step()
            if step.admitted and not step.victims:
                return step
            run = self.plan_run()
            return step if run is None else run
        run = self.plan_run()
        return self.plan_step() if run is None else run

    def plan_run(self) -> RunPlan | None:
        """The fixed decode-only batch, if the next steps have one; None when a step must be planned."""
        num_decode = self.num_decode
        if self.prefilling or not num_decode:
            return None
        lim = self.limits
        budget = lim.max_num_batched_tokens - num_decode * self.query_per_seq
        seats = lim.max_num_seqs - len(self.running)
        if self.waiting:
            if budget > 0 and seats > 0 and self._head_fits(budget):
                return None
            # The head waits; under priority scheduling a new arrival may wait ahead of it, and fit.
            horizon_matters = budget > 0 and seats > 0 and lim.scheduling_policy == "priority"
        else:
            horizon_matters = budget > 0 and seats > 0
        heap, t = self.finish_heap, self.table
        state, finish_tick = t.state, t.finish_tick
        while True:  # drop entries of requests that left or were preempted (a decode is always in the heap)
            tick, rid = heap[0]
            if state[rid] == DECODE and finish_tick[rid] == tick:
                break
            heapq.heappop(heap)
        max_steps = tick - self.tick
        decode_context = self.decode_context
        if self.window is None:
            windowed, growing = decode_context, num_decode
        else:
            windowed, growing, window_steps = self.windowed_sum()
            max_steps = min(max_steps, max(window_steps, 1))
        max_steps = self._steps_before_blocks_run_out(max_steps)
        if max_steps < 1:
            return None
        self._room_after_run = horizon_matters and not self.waiting
        return RunPlan(max_steps, num_decode, decode_context, windowed, growing, horizon_matters)

    def _head_fits(self, budget: int) -> bool:
        t, counts = self.table, self.blocks.table
        rid = self.waiting[0]
        done = t.computed[rid]
        remaining = t.prompt[rid] + t.generated[rid] - done
        if remaining > budget and not self.limits.chunked_prefill:
            return False
        n = remaining if remaining < budget else budget
        shared = counts[t.cached[rid]] if t.cached_shared[rid] else 0
        need = counts[done + n] - shared + (shared - self.shared_blocks if shared > self.shared_blocks else 0)
        room = self.limits.num_blocks - self._used_upper(1.0)
        return need <= room or need <= self._exact_room([])

    def _steps_before_blocks_run_out(self, steps: int) -> int:
        """Largest k <= steps such that the k-th decode step still finds its blocks."""
        avail = self.limits.num_blocks - self.prefill_blocks - self.shared_blocks
        b = self.blocks
        upper = b.groups * ((self.decode_context + self.num_decode * (self.growth * steps + self.query_per_seq))
                            / b.block_size + self.num_decode) - self.decode_shared_blocks
        if upper <= avail:
            return steps
        ctx = self._decode_contexts()

        def fits(k: int) -> bool:  # step k (1-based) allocates for context + (k - 1) growth + q tokens
            return int(self._own_decode_blocks(ctx, self.growth * (k - 1) + 1).sum()) <= avail

        if not fits(1):
            return 0
        lo, hi = 1, steps
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    # --- prefix cache of conversations ----------------------------------------------------------
    def cached_prefix(self, rid: int) -> int:
        """Tokens of the request's prompt in the prefix cache when it enters the waiting queue: its
        drawn hit, or what its conversation still has cached here (checked again when scheduled)."""
        t = self.table
        if self.cache is None or t.session[rid] < 0:
            return t.cached[rid]
        return self.cache.peek(t.session[rid], t.prompt[rid] + t.generated[rid] - 1)

    def _cache_sync(self) -> None:
        if self.cache is not None:
            self.cache.sync(self.limits.num_blocks - self._used_exact())

    def _release(self, rid: int, held_blocks: int, computed_tokens: int, keep: bool) -> None:
        """The request frees its blocks (the caller synced the cache before its counters dropped);
        ``keep``: its conversation reuses them (a next turn, or itself after a preemption)."""
        t = self.table
        if self.cache is not None:
            owner = t.session[rid] if keep and t.session[rid] >= 0 else NO_OWNER
            self.cache.release(owner, held_blocks, computed_tokens)

    def _decode_held(self, rid: int) -> tuple[int, int]:
        """(blocks, computed tokens) a decoding request holds now (as :meth:`_used_exact` counts them)."""
        context = self.context(rid)
        tokens = min(math.ceil(context - 1e-9) + self.query_per_seq - 1, len(self.blocks.table) - 1)
        return self.blocks.table[tokens] - self._shared_blocks(rid), int(context)

    # --- applying --------------------------------------------------------------------------------
    def apply_step(self, plan: StepPlan, start_s: float, end_s: float) -> list[int]:
        """Carry a planned step out; returns the requests that finished (or were handed off)."""
        t, counts = self.table, self.blocks.table
        for victim in plan.victims:
            self._preempt(victim, start_s)
        # The admitted requests by id: under priority scheduling a request that arrived while the step
        # ran (after it was planned) may now wait ahead of them.
        for rid, _ in plan.chunks[len(plan.chunks) - plan.admitted:]:
            self.waiting.remove(rid)
            if self.cache is not None and t.session[rid] >= 0:
                # The hit found when it was queued, less what was evicted since.
                self._cache_sync()
                hit = self.cache.take(t.session[rid], t.computed[rid])
                if math.isnan(t.scheduled_s[rid]):
                    t.cached[rid] = hit
                t.computed[rid] = hit
            self.running[rid] = None
            self.prefilling.append(rid)
            t.state[rid] = PREFILL
            # A hand-off arrives with its prompt's KV already in place.
            computed = t.computed[rid]
            shared = counts[t.cached[rid]] if t.cached_shared[rid] else 0
            self.prefill_blocks += counts[computed] - shared
            self.prefill_context += computed
            if math.isnan(t.scheduled_s[rid]):
                t.scheduled_s[rid] = start_s
            if shared > self.shared_blocks:
                self.shared_blocks = shared
        finished = self.apply_run(1, end_s)
        computed, prompt, generated = t.computed, t.prompt, t.generated
        for rid, n in plan.chunks:
            done = computed[rid]
            computed[rid] = now = done + n
            self.prefill_blocks += counts[now] - counts[done]
            self.prefill_context += n
            if now == prompt[rid] + generated[rid] and self._emit_after_prefill(rid, end_s):
                finished.append(rid)
        return finished

    def apply_run(self, steps: int, end_s: float) -> list[int]:
        """Advance the decodes by ``steps`` steps ending at ``end_s`` (a fixed batch's run, or a planned
        step's decodes); returns the requests that finished."""
        self.tick = now = self.tick + steps
        self.decode_context += self.num_decode * self.growth * steps
        heap = self.finish_heap
        finished = []
        if not heap or heap[0][0] > now:
            return finished
        t = self.table
        state, finish_tick = t.state, t.finish_tick
        while heap and heap[0][0] <= now:
            tick, rid = heapq.heappop(heap)
            if state[rid] != DECODE or finish_tick[rid] != tick:
                continue
            if self.cache is not None:
                self._cache_sync()
                self._release(rid, *self._decode_held(rid), keep=t.follow_up[rid] >= 0)
            self.num_decode -= 1
            self.class_decodes[t.klass[rid]] -= 1
            self.decode_context -= self.context(rid)
            self.decode_shared_blocks -= self._shared_blocks(rid)
            self._decode_cache = None
            t.generated[rid] = t.output[rid]
            self._finish(rid, end_s)
            finished.append(rid)
        return finished

    def _emit_after_prefill(self, rid: int, end_s: float) -> bool:
        """A request's computed tokens caught up: it samples a token. True when it leaves the engine."""
        t, counts = self.table, self.blocks.table
        generated = t.generated[rid] = t.generated[rid] + 1
        if math.isnan(t.first_token_s[rid]):
            t.first_token_s[rid] = end_s
        else:
            self.gaps_s.append((end_s, end_s - t.last_emit_s[rid]))
            self.gap_requests.append(rid)
        computed = t.computed[rid]
        leaving = generated >= t.output[rid] or self.limits.prefill_only
        if leaving and self.cache is not None:
            self._cache_sync()
            self._release(rid, self._own_blocks(rid, computed), computed,
                          keep=t.follow_up[rid] >= 0 or generated < t.output[rid])
        shared = self._shared_blocks(rid)
        self.prefilling.remove(rid)
        self.prefill_blocks -= counts[computed] - shared
        self.prefill_context -= computed
        if leaving:
            t.last_emit_s[rid] = end_s
            self._finish(rid, end_s)
            return True
        remaining = t.output[rid] - generated
        if self.speculation is not None:
            emitted = self.speculation.steps_to_emit(self.rng, remaining)
            t.emitted[rid] = emitted
            steps = len(emitted)
        else:
            steps = remaining
        tick = self.tick
        t.state[rid] = DECODE
        t.base_context[rid] = float(computed)
        t.base_tick[rid] = tick
        t.finish_tick[rid] = tick + steps
        heapq.heappush(self.finish_heap, (tick + steps, rid))
        self.num_decode += 1
        self.class_decodes[t.klass[rid]] += 1
        self.decode_context += computed
        self.decode_shared_blocks += shared
        self._decode_cache = None
        return False

    def _finish(self, rid: int, end_s: float) -> None:
        t = self.table
        t.state[rid] = DONE
        t.finish_s[rid] = end_s
        del self.running[rid]

    def _preempt(self, rid: int, now_s: float) -> None:
        """RECOMPUTE preemption: free the request's blocks and put it back in the waiting queue (at
        its head under fcfs, at its (priority, arrival) place under priority). With a conversation
        cache its computed blocks stay cached, so that it hits them again unless they are evicted
        first (as vLLM's prefix cache does)."""
        t = self.table
        self._cache_sync()
        if t.state[rid] == DECODE:
            steps = self.tick - t.base_tick[rid]
            emitted = t.emitted.get(rid)
            t.generated[rid] += (int(emitted[steps - 1]) if steps else 0) if emitted is not None else steps
            self._release(rid, *self._decode_held(rid), keep=True)
            self.num_decode -= 1
            self.class_decodes[t.klass[rid]] -= 1
            self.decode_context -= self.context(rid)
            self.decode_shared_blocks -= self._shared_blocks(rid)
            self._decode_cache = None
            t.finish_tick[rid] = -1
            t.last_emit_s[rid] = now_s
        else:
            self._release(rid, self._own_blocks(rid, t.computed[rid]), t.computed[rid], keep=True)
            self.prefilling.remove(rid)
            self.prefill_blocks -= self._own_blocks(rid, t.computed[rid])
            self.prefill_context -= t.computed[rid]
        t.computed[rid] = self.cached_prefix(rid)
        t.state[rid] = WAITING
        t.preemptions[rid] += 1
        del self.running[rid]
        self.waiting.appendleft(rid)
