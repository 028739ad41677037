"""Data-parallel ranks of one vLLM instance: the load balancer that picks a rank, and MoE ranks in lockstep.

vLLM runs each of ``--data-parallel-size`` ranks as its own engine core (scheduler, KV cache,
``max_num_seqs``); the API server sends a new request to the rank with the lowest
``4 x waiting + running`` requests (``DPLBAsyncMPClient``, :func:`pick_rank`; servopt reads the
counts when the request arrives, where vLLM reads a snapshot the coordinator refreshes every
100 ms plus its own assignments since). A dense model's ranks are independent engines.

An MoE model's ranks are not (``docs/serving/data_parallel_deployment.md``): their forward passes
are aligned because every MoE layer's dispatch and combine spans all ranks, and while any rank has
work the idle ones run dummy steps. :class:`LockstepGroup` steps them together: each step pads
every rank to the largest rank's token count (vLLM's DP padding, so collectives and CUDA graphs line
up), so the token-count operators run at that count everywhere, while attention and sampling cover
each rank's own requests; the step lasts as long as its slowest rank (a dummy step: the padded
operators and the engine's fixed CPU time). Fixed decode batches on every busy rank advance many
steps in closed form, as in :class:`~servopt.costmodels.serving.engine.Engine`, while the same rank
stays the slowest.
"""

from __future__ import annotations

import math

from ..engines import get_engine
from .engine import Engine, Plan, plan_step, run_steps, steps_starting_before
from .predictor import StepComposition
from .scheduler import RunPlan, StepPlan

_EMPTY = StepComposition(0, 0.0, 0.0, 0, 0, 0.0, 0.0, 0.0, 0.0)


def dp_score(engine: Engine) -> int:
    """The serving engine's load score of a data-parallel rank (vLLM's: waiting requests count four times)."""
    sched = engine.scheduler
    weight = get_engine(engine.predictor.cost.framework).dp_waiting_weight
    return weight * len(sched.waiting) + len(sched.running)


def pick_rank(ranks: list[Engine]) -> Engine:
    """The rank vLLM's DP load balancer sends a new request to (lowest score, first on ties)."""
    return min(ranks, key=dp_score)


class LockstepGroup:
    """The data-parallel ranks of one MoE instance, stepping together (see the module docstring).

    It offers the driver the interface of an :class:`Engine` (plan, commit, enqueue); each rank is an
    :class:`Engine` that keeps its own scheduler and step records.
    """

    prefill_only = False

    def __init__(self, index: int, ranks: list[Engine]):
        self.index = index
        self.ranks = ranks
        self.clock = 0.0
        self.plan: Plan | None = None
        self._work: list[tuple[Engine, Plan]] = []

    @property
    def busy(self) -> bool:
        return any(r.scheduler.busy for r in self.ranks)

    def outstanding_at(self, time_s: float) -> int:
        return sum(r.outstanding_at(time_s) for r in self.ranks)

    def enqueue(self, rid: int, time_s: float, handed_off: bool = False) -> None:
        if not self.busy:
            self.clock = max(self.clock, time_s)
        rank = pick_rank(self.ranks)
        rank.enqueue(rid, time_s, handed_off)
        if self.plan is not None and self.plan.start_s >= time_s:
            self.plan = None

    # --- planning --------------------------------------------------------------------------------
    def cut(self, plan: Plan, time_s: float) -> Plan | None:
        """The work that starts before ``time_s``: the ranks plan again (what each can do depends on the others')."""
        return self.plan_next(time_s)

    def plan_next(self, horizon_s: float) -> Plan | None:
        """The group's next step (or run of decode steps) that starts before ``horizon_s``."""
        if self.clock >= horizon_s or not self.busy:
            return None
        busy = [r for r in self.ranks if r.scheduler.busy]
        idle = len(self.ranks) - len(busy)
        runs = {r.index: r.scheduler.plan_run() for r in busy}
        if all(run is not None for run in runs.values()):
            return self._plan_runs(busy, runs, idle, horizon_s)
        return self._plan_step(busy, runs, idle)

    def _dummy_s(self, padded: int) -> float:
        """An idle rank's step: the padded token-count operators and the engine's fixed CPU time."""
        return self.ranks[0].predictor.step_s(_EMPTY, padded)

    def _plan_step(self, busy: list[Engine], runs: dict[int, RunPlan | None], idle: int) -> Plan:
        steps: dict[int, StepPlan] = {r.index: plan_step(r.scheduler) for r in busy if runs[r.index] is None}
        tokens = [r.predictor.tokens(steps[r.index].composition) if r.index in steps
                  else runs[r.index].num_seqs * r.predictor.query_per_seq for r in busy]
        padded = max(tokens)
        durations = []
        for r in busy:
            if r.index in steps:
                durations.append(r.predictor.step_s(steps[r.index].composition, padded))
            else:
                run = runs[r.index]
                line = r.predictor.decode_line(run.num_seqs, run.context, run.context_windowed, padded)
                durations.append(run_steps(run, line, r.scheduler.growth)[1])
        duration = max(durations + ([self._dummy_s(padded)] if idle else []))
        start, end = self.clock, self.clock + duration
        self._work = [(r, Plan(start, end, start, step=steps[r.index], first_s=duration) if r.index in steps
                       else Plan(start, end, start, run=runs[r.index], steps=1, first_s=duration)) for r in busy]
        return Plan(start, end, start, first_s=duration)

    def _plan_runs(self, busy: list[Engine], runs: dict[int, RunPlan], idle: int, horizon_s: float) -> Plan:
        padded = max(runs[r.index].num_seqs * r.predictor.query_per_seq for r in busy)
        lines = []  # (steps limit, first duration, slope) per busy rank, then the idle ranks' dummy
        for r in busy:
            run = runs[r.index]
            line = r.predictor.decode_line(run.num_seqs, run.context, run.context_windowed, padded)
            lines.append(run_steps(run, line, r.scheduler.growth))
        if idle:
            lines.append((math.inf, self._dummy_s(padded), 0.0))
        _, first, slope = max(lines, key=lambda item: (item[1], item[2]))
        steps = min(limit for limit, _, _ in lines)
        for _, f, s in lines:
            if s > slope:  # this rank overtakes the slowest after (first - f) / (s - slope) more steps
                steps = min(steps, int((first - f) / (s - slope)) + 1)
        if idle or any(run.horizon_matters for run in runs.values()):
            # A new request could start on some rank: stop before the first step after it arrives.
            if horizon_s < math.inf:
                steps = min(steps, steps_starting_before(horizon_s - self.clock, first, slope))
        steps = max(int(steps), 1)
        total = steps * first + slope * steps * (steps - 1) / 2
        last = first + slope * (steps - 1)
        start, end = self.clock, self.clock + total
        self._work = [(r, Plan(start, end, end - last, run=runs[r.index], steps=steps, first_s=first, slope_s=slope))
                      for r in busy]
        return Plan(start, end, end - last, steps=steps, first_s=first, slope_s=slope)

    # --- applying --------------------------------------------------------------------------------
    def commit(self, plan: Plan) -> list[int]:
        """Carry the planned step out on every busy rank; returns the requests that finished."""
        finished: list[int] = []
        for rank, work in self._work:
            finished += rank.commit(work)
        self._work = []
        self.clock = plan.end_s
        for rank in self.ranks:
            rank.clock = plan.end_s
        return finished
