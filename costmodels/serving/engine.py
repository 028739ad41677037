"""One engine: a scheduler, a step-time predictor and a clock (a replica, a PP lane or a P/D instance).

The engine alternates two kinds of work. When the scheduler says the batch is fixed (decodes only, no
admission possible), it advances a *run* of ``K`` steps at once: step ``j`` lasts ``a + b (j - 1)``
because decode time is a line in the summed context, which grows by the same amount every step. The
run stops at the first finish, at a full KV pool, where attention turns compute-bound, and, when a new
request could join, before the first step that would start after the next arrival. Any other step
(prefill chunks, admissions, preemptions) is planned and timed one at a time.

Every step is recorded compactly (a run is one record of ``K`` steps), which is enough to recover
every token's time: a decode's token gap is the duration of the step that produced it.

Plans are computed without changing state and applied by :meth:`Engine.commit`, so that a driver
coordinating several engines can re-plan when an earlier event (a new arrival) changes the picture.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass

import numpy as np

from ..errors import InputError
from .predictor import StepComposition, StepTimePredictor
from .requests import DECODE, WAITING
from .scheduler import RunPlan, Scheduler, StepPlan

RECORD_FIELDS = ("start_s", "steps", "first_s", "slope_s", "itl_decodes", "num_running", "kv_tokens",
                 *StepComposition._fields)
# A record is packed as doubles, RECORD_FIELDS in order: appending its bytes costs less than keeping a
# tuple of Python numbers, and numpy reads all records at once instead of converting value by value.
_RECORD = struct.Struct(f"{len(RECORD_FIELDS)}d")
_pack_record = _RECORD.pack


def record_rows(engines: list[Engine]) -> np.ndarray:
    """The engines' step records, one row of :data:`RECORD_FIELDS` each, engine after engine."""
    return np.frombuffer(b"".join(e.records for e in engines), dtype=float).reshape(-1, len(RECORD_FIELDS))


class PipelineStages:
    """The stages that the ``pp`` lanes of one replica share.

    Every stage runs each lane's micro-batch in turn, so a lane's step lasts its own full pass or, when
    the lanes' work is uneven, one stage's share of all lanes' passes:
    ``period_i = max(pass_i, sum_j pass_j / pp)``. A lane heavy with a prefill chunk therefore slows
    the decodes of the others. Each lane's latest full-pass time stands for its current work.
    """

    def __init__(self, lanes: int):
        self.lanes = lanes
        self.pass_s = [0.0] * lanes
        self.engines: list[Engine] = []

    def others_s(self, lane: int) -> float:
        return sum(t for i, t in enumerate(self.pass_s) if i != lane and self.engines[i].scheduler.busy)

    def period_s(self, lane: int, pass_s: float) -> float:
        return max(pass_s, (pass_s + self.others_s(lane)) / self.lanes)


@dataclass(slots=True)
class Plan:
    """The next piece of work of one engine: one step, or a run of identical decode steps."""

    start_s: float
    end_s: float
    last_start_s: float
    step: StepPlan | None = None
    run: RunPlan | None = None
    steps: int = 1
    first_s: float = 0.0  # duration of the first step
    slope_s: float = 0.0  # growth of the duration per step (runs)
    pass_s: float = 0.0  # the last step's own full pass (pipeline lanes share stages)


def plan_step(sched: Scheduler) -> StepPlan:
    """The scheduler's next step; InputError when the head of the queue can never be scheduled."""
    step = sched.plan_step()
    if not step.chunks and not step.decodes:
        raise unschedulable(sched)
    return step


def unschedulable(sched: Scheduler) -> InputError:
    """The error of a step that runs nothing: the head of the queue can never be scheduled."""
    rid = sched.waiting[0]
    t = sched.table
    return InputError(
        f"a request of {t.prompt[rid]} prompt + {t.output[rid]} output tokens cannot be scheduled: it needs "
        f"more KV blocks or batched tokens than one engine has ({sched.limits.num_blocks} blocks, "
        f"max_num_batched_tokens {sched.limits.max_num_batched_tokens}); lower max_model_len or "
        "traffic.max_context, or give the engine more memory"
    )


def run_steps(run: RunPlan, line, growth: float) -> tuple[int, float, float]:
    """(steps before a limit of the line, first step's duration, growth per step) of a decode run."""
    steps = run.max_steps
    if line.context_limit < math.inf:
        steps = min(steps, int((line.context_limit - run.context) / (run.num_seqs * growth)) + 1)
    if line.window_limit < math.inf and run.windowed_growing:
        steps = min(steps, int((line.window_limit - run.context_windowed) / (run.windowed_growing * growth)) + 1)
    first = line.intercept_s + line.slope_s * run.context + line.slope_window_s * run.context_windowed
    slope = (line.slope_s * run.num_seqs + line.slope_window_s * run.windowed_growing) * growth
    return steps if steps > 1 else 1, first, slope


def steps_starting_before(window_s: float, first_s: float, slope_s: float) -> int:
    """How many steps of durations ``first + slope (j - 1)`` start within ``window_s`` (at least 1)."""

    # Step m + 1 starts at m first_s + slope_s m (m - 1) / 2: m from the quadratic, then corrected
    # for rounding.
    if slope_s > 0:
        half = first_s - slope_s / 2
        m = int((-half + math.sqrt(half * half + 2 * slope_s * window_s)) / slope_s)
    else:
        m = int(window_s / first_s)
    while m > 0 and m * first_s + slope_s * m * (m - 1) / 2 >= window_s:
        m -= 1
    while (m + 1) * first_s + slope_s * (m + 1) * m / 2 < window_s:
        m += 1
    return m + 1


class Engine:
    """A vLLM engine core in simulated time."""

    def __init__(self, index: int, scheduler: Scheduler, predictor: StepTimePredictor,
                 stages: PipelineStages | None = None):
        self.index = index
        self.scheduler = scheduler
        self.predictor = predictor
        self.stages = stages
        self.lane = 0
        if stages is not None:
            self.lane = len(stages.engines)
            stages.engines.append(self)
        # A P/D prefill instance (hands each request off after its first token).
        self.prefill_only = scheduler.limits.prefill_only
        self.clock = 0.0
        self.outstanding = 0
        self.plan: Plan | None = None
        self.records = bytearray()  # the step records, packed (record_rows reads them)
        # Decoding requests per tenant class in each record (traffic with classes only).
        self.class_records: list[tuple] | None = [] if scheduler.table.num_classes > 1 else None
        self._last_end_s = -math.inf
        self._last_finished = 0

    @property
    def kv_capacity_tokens(self) -> float:
        """Tokens the engine's KV blocks hold (as vLLM reports capacity)."""
        blocks = self.scheduler.blocks
        return self.scheduler.limits.num_blocks * blocks.block_size / blocks.groups

    @property
    def num_records(self) -> int:
        """Step records kept (a run of decode steps is one)."""
        return len(self.records) // _RECORD.size

    def outstanding_at(self, time_s: float) -> int:
        """Requests routed here and unfinished at ``time_s`` (the last commit may end after it)."""
        return self.outstanding + (self._last_finished if self._last_end_s > time_s else 0)

    def enqueue(self, rid: int, time_s: float, handed_off: bool = False) -> None:
        """A request arrives (a hand-off arrives with its prompt's KV transferred)."""
        sched = self.scheduler
        table = sched.table
        if not (sched.running or sched.waiting):
            self.clock = max(self.clock, time_s)
        table.computed[rid] = table.prompt[rid] if handed_off else sched.cached_prefix(rid)
        table.state[rid] = WAITING
        if handed_off:
            table.prefill_instance[rid] = table.instance[rid]
        table.instance[rid] = self.index
        sched.waiting.append(rid)
        self.outstanding += 1
        if self.plan is not None and self.plan.start_s >= time_s:
            self.plan = None

    def plan_next(self, horizon_s: float) -> Plan | None:
        """The next work that starts before ``horizon_s`` (the next arrival), or None."""
        sched = self.scheduler
        if self.clock >= horizon_s or not (sched.running or sched.waiting):
            return None
        work = sched.plan()
        if work.__class__ is RunPlan:
            return self._plan_run(work, horizon_s)
        step = work
        if not step.chunks and not step.decodes:
            raise unschedulable(sched)
        full_pass = self.predictor.step_s(step.composition)
        duration = self.stages.period_s(self.lane, full_pass) if self.stages else full_pass
        clock = self.clock
        return Plan(clock, clock + duration, clock, step, None, 1, duration, 0.0, full_pass)

    def cut(self, plan: Plan, time_s: float) -> Plan | None:
        """``plan`` (made from the current state) cut to the steps that start before ``time_s``: what
        :meth:`plan_next` would give with that horizon, without planning again."""
        if plan.start_s >= time_s:
            return None
        if plan.run is None or not plan.run.horizon_matters or plan.last_start_s < time_s:
            return plan
        if self.stages is not None:  # a lane's period also depends on the others': plan again
            return self.plan_next(time_s)
        start, first, slope = plan.start_s, plan.first_s, plan.slope_s
        steps = steps_starting_before(time_s - start, first, slope)
        if steps > plan.steps:
            steps = plan.steps
        total = steps * first + slope * steps * (steps - 1) / 2
        last = first + slope * (steps - 1)
        return Plan(start, start + total, start + total - last, None, plan.run, steps, first, slope,
                    plan.pass_s - slope * (plan.steps - steps))

    def _plan_run(self, run: RunPlan, horizon_s: float) -> Plan:
        line = self.predictor.decode_line(run.num_seqs, run.context, run.context_windowed)
        # Full-pass time of step j is pass_first + pass_slope (j - 1).
        steps, pass_first, pass_slope = run_steps(run, line, self.scheduler.growth)
        first, slope = pass_first, pass_slope
        if self.stages is not None:
            others, lanes = self.stages.others_s(self.lane), self.stages.lanes
            if others > (lanes - 1) * pass_first:
                # The shared stages set the period (their share of every lane's work) until this
                # lane's own pass outgrows it.
                if pass_slope > 0:
                    steps = min(steps, int((others / (lanes - 1) - pass_first) / pass_slope) + 1)
                first, slope = (pass_first + others) / lanes, pass_slope / lanes
        clock = self.clock
        if run.horizon_matters and horizon_s < math.inf:
            before = steps_starting_before(horizon_s - clock, first, slope)
            if before < steps:
                steps = before
        total = steps * first + slope * steps * (steps - 1) / 2
        last = first + slope * (steps - 1)
        return Plan(clock, clock + total, clock + total - last, None, run, steps, first, slope,
                    pass_first + pass_slope * (steps - 1))

    def commit(self, plan: Plan) -> list[int]:
        """Carry the plan out; returns the requests that left the engine (finished or handed off)."""
        sched = self.scheduler
        if self.class_records is not None:
            self.class_records.append(self._class_decodes(plan))
        step, start, end = plan.step, plan.start_s, plan.end_s
        if step is not None:
            finished = sched.apply_step(step, start, end)
            # RECORD_FIELDS: the step's own fields, then its composition's in their order.
            self.records += _pack_record(start, 1, plan.first_s, 0.0, step.decodes, step.num_running, step.kv_tokens,
                                         *step.composition)
        else:
            run, k = plan.run, plan.steps
            num_seqs = run.num_seqs
            # The run's mid-point stands for all its steps in the per-step statistics.
            mid = num_seqs * sched.growth * (k - 1) / 2
            num_running = len(sched.running)
            finished = sched.apply_run(k, end)
            context = run.context + mid
            self.records += _pack_record(
                start, k, plan.first_s, plan.slope_s, num_seqs, num_running, context,
                num_seqs, context, run.context_windowed + mid * run.windowed_growing / num_seqs,
                0, 0, 0.0, 0.0, 0.0, 0.0,
            )
        if self.stages is not None:
            self.stages.pass_s[self.lane] = plan.pass_s
        self.clock = end
        left = len(finished)
        self.outstanding -= left
        self._last_end_s, self._last_finished = end, left
        return finished

    def _class_decodes(self, plan: Plan) -> tuple[int, ...]:
        """Decodes of each class that the plan's steps run (before it is applied): a step's victims
        do not decode."""
        sched = self.scheduler
        counts = list(sched.class_decodes)
        if plan.step is not None:
            table = sched.table
            for victim in plan.step.victims:
                if table.state[victim] == DECODE:
                    counts[table.klass[victim]] -= 1
        return tuple(counts)
