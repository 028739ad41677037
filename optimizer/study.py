"""The Optuna study: sampler, objective, workers, the trial budget, and the final front's re-check.

Two objectives, both minimized and named with :meth:`optuna.Study.set_metric_names`: the workload's
cost (``usd_per_hour``, ``usd_per_output_mtoken`` or ``usd_per_total_mtoken``) and its P99 latency
(``p99_e2e_s``, ...). A trial ends in one of two states:

- COMPLETE with the predicted values, feasible or not (a configuration over an SLO keeps the
  latency it was predicted to have);
- PRUNED when nothing was predicted: a rule that needs no simulation rejects it (memory, TP,
  accuracy, ...), or the estimate finds the queue growing without bound (no finite P99).

Either way the constraints (one value per :data:`~servopt.optimizer._evaluate.CONSTRAINT_GROUPS`
entry, <= 0 when met, named in the study's ``constraint_names`` user attribute) are stored as the
``constraints`` system attribute, the form Optuna's samplers (NSGA-II's constrained domination,
TPE's feasibility split) and optuna-dashboard read; flat user attributes (gpu, tp, quantization,
model, p99_ttft_s, usd_per_hour, feasible, reason, ...) make trials easy to filter, and the full
record (knobs, deployment, predictions) that the results package reads is the ``record`` attribute.

Example:
    >>> sampler = make_sampler("tpe", seed=1, trials=100)
    >>> type(sampler).__name__
    'TPESampler'
    >>> metric_names({"cost": "usd_per_hour", "latency": "e2e"})
    ['usd_per_hour', 'p99_e2e_s']
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from ..costmodels.objectives import metric_names
from ..results import TrialRecord, latency_tied
from ._evaluate import CONSTRAINT_GROUPS, SLO_CONSTRAINTS, Evaluator, ScreenFront, p99_low
from ._problem import Problem
from ._sampler import DistinctSampler
from ._screen import Screened, open_candidates, plan_screen, screen_round
from ._storage import JournalWriteError, journal_errors

DIRECTIONS = ("minimize", "minimize")
RECORD_ATTR = "record"
WORKER_ATTR = "worker"
# A live worker names itself on its trial within the sampler's proposal time (milliseconds; a second
# for a TPE over thousands of trials) of the storage creating it.
UNNAMED_TRIAL_S = 30.0
RECHECK_PREFIX = "recheck:"
# Optuna's own key for a trial's constraint values (a list, <= 0 when met).
CONSTRAINTS_ATTR = "constraints"
CONSTRAINT_NAMES_ATTR = "constraint_names"
# The study's record of the whole-space screen (:func:`screen_space`), and the mark of a trial it ran.
SCREEN_ATTR = "screen"
SCREENED_ATTR = "screened"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
# Trials that hold a slot of the trial budget: finished ones and those still running.
_BUDGETED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)


def make_sampler(kind: str, seed: int, trials: int | None,
                 evaluator: Evaluator | None = None) -> optuna.samplers.BaseSampler:
    """NSGA-II (``nsga2``, and ``screen`` where the space is too large to screen) or multivariate TPE,
    sized for the trial budget; with ``evaluator``, wrapped
    so that it proposes deployments the study has not scored yet, the most promising of several by
    the analytic estimate (:class:`DistinctSampler`, :class:`EstimateChooser`)."""
    if kind == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                                 n_startup_trials=min(20, max((trials or 200) // 10, 5)))
    else:
        # Several generations fit in a small budget only with a small population.
        population = int(np.clip((trials or 400) // 8, 12, 50))
        sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=population)
    if evaluator is None:
        return sampler
    return DistinctSampler(sampler, evaluator.scored_key, seed, EstimateChooser(evaluator),
                           complete=evaluator.problem.space.complete)


class EstimateChooser:
    """Picks the proposal that the analytic estimate predicts to extend the study's front most.

    Proposals are compared with the feasible trials by their estimates (estimate against estimate,
    so the estimate's bias for similar deployments cancels), with the multiplicative epsilon
    distance min over front points f of max(f_cost / cost, f_latency / latency): above 1 for a
    proposal no trial's estimate dominates or equals. Those rank first, the largest distance first;
    when none is predicted to extend the front, the wrapped sampler's first proposal stands (its own
    exploration); proposals the estimate calls infeasible beyond the screen margin, or that break a
    rule, rank last, by how far they miss.
    """

    def __init__(self, evaluator: Evaluator):
        self.evaluator = evaluator

    def __call__(self, study: optuna.Study, proposals: list[dict[str, Any]]) -> int:
        front = estimated_front(study)

        def rank(params: dict[str, Any]) -> tuple[int, float]:
            values, miss = self.evaluator.forecast(params)
            if values is None or miss > 0:
                return 2, miss
            reach = float(np.min(np.maximum(front[:, 0] / values[0], front[:, 1] / values[1]))) if len(front) \
                else math.inf
            return (0, -reach) if reach > 1 else (1, 0.0)

        ranks = [rank(p) for p in proposals]
        return min(range(len(proposals)), key=ranks.__getitem__)


def estimated_front(study: optuna.Study) -> np.ndarray:
    """Estimated objective values of the study's feasible trials, non-dominated ones, as an (n, 2) array."""
    points = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        estimated = t.user_attrs.get(RECORD_ATTR, {}).get("estimate_objectives")
        if estimated and all(c <= 0 for c in t.system_attrs.get(CONSTRAINTS_ATTR, [1.0])):
            points.append(estimated)
    points = np.asarray(points, dtype=float).reshape(-1, 2)
    return points[pareto_mask(points)] if len(points) else points


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def fail_dead_workers_trials(study: optuna.Study) -> int:
    """Mark RUNNING trials of dead processes on this host as FAIL; returns how many.

    A killed job leaves its last trial RUNNING; without this it would linger until the heartbeat's
    grace period ends. Trials of live processes and of other hosts are left alone. A trial that
    names no worker ``UNNAMED_TRIAL_S`` after it started was left by a worker killed between the
    storage creating it and the objective naming its worker (while the sampler proposed its point).
    """
    host = socket.gethostname()
    now = datetime.datetime.now()
    failed = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(trial.user_attrs.get(WORKER_ATTR, ""))
        name, _, pid = owner.rpartition(":")
        dead = name == host and pid.isdigit() and not _alive(int(pid))
        unnamed = not owner and trial.datetime_start is not None and \
            (now - trial.datetime_start).total_seconds() > UNNAMED_TRIAL_S
        if dead or unnamed:
            study._storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            failed += 1
    return failed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def evaluated_trials(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """Finished trials (complete or pruned) with their record, in trial-number order."""
    return [t for t in study.get_trials(deepcopy=False, states=FINISHED) if RECORD_ATTR in t.user_attrs]


# --- the trial budget, shared by every worker of a study -----------------------------------------
class BudgetSpent(Exception):
    """Raised inside a trial that another worker's trial beat to the budget's last slot."""


class TrialBudget:
    """At most ``total`` trials finish, however many workers share the study.

    Before each trial a worker stops once the finished and running trials fill the budget. Two
    workers may still both start a trial for the last slot; trial numbers are given in order by
    the storage, so the one whose lower-numbered trials already fill the budget marks its trial
    FAIL ("not run: budget spent") instead of running it.
    """

    def __init__(self, total: int | None):
        self.total = total

    def _held(self, study: optuna.Study, below: int | None = None) -> int:
        trials = study.get_trials(deepcopy=False, states=_BUDGETED)
        return sum(1 for t in trials if below is None or t.number < below)

    def remaining(self, study: optuna.Study) -> int | None:
        if self.total is None:
            return None
        return max(self.total - len(study.get_trials(deepcopy=False, states=FINISHED)), 0)

    def claim(self, trial: optuna.Trial) -> None:
        """Raise :class:`BudgetSpent` when trials numbered before ``trial`` fill the budget."""
        if self.total is not None and self._held(trial.study, below=trial.number) >= self.total:
            reason = f"not run: other workers' trials spent the budget of {self.total} trials"
            trial.set_user_attr("reason", reason)
            raise BudgetSpent(reason)  # the trial fails; stop_when_spent then ends this worker

    def spent(self, study: optuna.Study) -> bool:
        """Whether finished and running trials fill the budget (no slot is left for another trial)."""
        return self.total is not None and self._held(study) >= self.total

    def stop_when_spent(self, study: optuna.Study, _trial: optuna.trial.FrozenTrial) -> None:
        """An Optuna callback: stop this worker once no slot is left for another trial."""
        if self.spent(study):
            study.stop()


class AlreadyScored(Exception):
    """Raised inside a trial whose deployment a lower-numbered trial of another worker is still scoring
    after :data:`OWNER_WAIT_S`: the trial fails, not run."""


# A trial's deployment, as it is scored (:meth:`~servopt.optimizer._evaluate.Evaluator.scored_key`),
# stored once it is drawn: how workers of one study see that they drew the same one.
DEPLOYMENT_ATTR = "deployment"
# A trial that drew an earlier trial's deployment takes that trial's outcome and names it here.
SAME_AS_ATTR = "same_as"
_CLAIM_POLL_S = 0.02
# How long a trial waits for a lower-numbered trial that scores the same deployment (its simulation).
OWNER_WAIT_S = 600.0


def claim_deployment(trial: optuna.Trial, key: str, wait_s: float = OWNER_WAIT_S) -> FrozenTrial | None:
    """Store ``key`` as ``trial``'s deployment. Return the lowest-numbered earlier trial that drew the same
    one, once it has finished (its outcome is this trial's: no deployment is scored twice), or None when
    this trial is the first to draw it and scores it.

    Two workers may draw one deployment at once, each before the other's parameters reach the storage.
    The lowest-numbered trial scores it: a trial first waits until every lower-numbered running trial
    has stored its deployment (they do so within the sampler's proposal time; one that has not after
    :data:`UNNAMED_TRIAL_S` belongs to a dead worker), so that of two trials that drew the same
    deployment, the higher-numbered always sees the lower one, and waits for it to finish. A trial of a
    dead worker is failed (:func:`fail_dead_workers_trials`), and the next one that drew it scores it;
    one still running after ``wait_s`` raises :class:`AlreadyScored`.
    """
    trial.storage.set_trial_system_attr(trial._trial_id, DEPLOYMENT_ATTR, key)
    start = time.monotonic()
    polls = 0
    while True:
        now = datetime.datetime.now()
        pending = False
        owner = None
        for other in trial.study.get_trials(deepcopy=False, states=_BUDGETED):  # in trial-number order
            if other.number >= trial.number:
                break
            theirs = other.system_attrs.get(DEPLOYMENT_ATTR)
            if theirs == key:
                owner = other
                break
            pending |= (theirs is None and other.state == TrialState.RUNNING and other.datetime_start is not None
                        and (now - other.datetime_start).total_seconds() < UNNAMED_TRIAL_S)
        if owner is not None and owner.state != TrialState.RUNNING:
            return owner
        if owner is None and not pending:
            return None
        if time.monotonic() - start > wait_s:
            raise AlreadyScored(f"not run: trial {owner.number if owner else '?'} of another worker still scores the "
                                f"same deployment after {wait_s:.0f} s")
        polls += 1
        if polls % 50 == 0:  # about once a second: an owner whose worker died is failed, and scored here
            fail_dead_workers_trials(trial.study)
        time.sleep(_CLAIM_POLL_S)


class _QuietCaught(logging.Filter):
    """Optuna logs a caught exception with its traceback, then 'Trial N failed with value None.'; a trial
    that was never run needs neither, nor does a failed journal write (the command says it in one line)."""

    def __init__(self) -> None:
        super().__init__()
        self._quieted: set[str] = set()  # 'Trial N failed' records still to come for a quieted exception

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if record.exc_info and isinstance(record.exc_info[1], (BudgetSpent, AlreadyScored, JournalWriteError)):
            self._quieted.add(" ".join(message.split()[:2]))
            return False
        head = " ".join(message.split()[:2])
        if head in self._quieted and " failed with value " in message:
            self._quieted.discard(head)
            return False
        return True


logging.getLogger("optuna.study._optimize").addFilter(_QuietCaught())


class Objective:
    """Samples a candidate, scores it (cached for repeated points) and reports to Optuna. With
    ``screened`` (the whole-space screen's trials) every deployment whose estimate is bounded is
    simulated, whatever its estimate's margin, and the trial is marked :data:`SCREENED_ATTR`."""

    def __init__(self, problem: Problem, evaluator: Evaluator, screen: ScreenFront, budget: TrialBudget,
                 screened: bool = False):
        self.problem = problem
        self.evaluator = evaluator
        self.screen = screen
        self.budget = budget
        self.screened = screened
        self._outcomes: dict[tuple, Any] = {}

    def __call__(self, trial: optuna.Trial) -> Sequence[float]:
        trial.set_user_attr(WORKER_ATTR, worker_id())
        if self.screened:
            trial.set_user_attr(SCREENED_ATTR, True)
        self.budget.claim(trial)
        candidate = self.problem.space.sample(trial)
        scored = self.evaluator.scored_key(trial.params)
        owner = None if scored is None else claim_deployment(trial, repr(scored))
        if owner is not None:
            return self._same_as(trial, owner)
        outcome = self._outcomes.get(candidate.key)
        if outcome is None:
            outcome = self._outcomes[candidate.key] = self.evaluator.evaluate(candidate, self.screen,
                                                                              simulate=self.screened)
        trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_ATTR,
                                            list(outcome.grouped_constraints().values()))
        for key, value in outcome.attrs().items():
            trial.set_user_attr(key, value)
        trial.set_user_attr(RECORD_ATTR, outcome.record.model_dump())
        if outcome.values is None:
            raise optuna.TrialPruned(outcome.record.reason)
        return outcome.values

    @staticmethod
    def _same_as(trial: optuna.Trial, owner: FrozenTrial) -> Sequence[float]:
        """``owner``'s outcome as ``trial``'s, scored once (by whichever worker drew the deployment first)."""
        trial.storage.set_trial_system_attr(trial._trial_id, CONSTRAINTS_ATTR, owner.system_attrs.get(CONSTRAINTS_ATTR))
        for key, value in owner.user_attrs.items():
            if key != WORKER_ATTR:
                trial.set_user_attr(key, value)
        trial.set_user_attr(SAME_AS_ATTR, owner.number)
        if owner.state == TrialState.PRUNED:
            raise optuna.TrialPruned(owner.user_attrs.get("reason", ""))
        return owner.values


def prepare_study(study: optuna.Study, objective: dict[str, str]) -> None:
    """Name the metrics and the constraints (once, by whichever worker creates the study)."""
    if not study.metric_names:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(metric_names(objective))
    if CONSTRAINT_NAMES_ATTR not in study.user_attrs:
        study.set_user_attr(CONSTRAINT_NAMES_ATTR, list(CONSTRAINT_GROUPS))


def seed_from_study(study: optuna.Study, evaluator: Evaluator, screen: ScreenFront) -> None:
    """Reload finished trials: their summaries go to the caches, simulated feasible ones to the
    screen, so a resumed or second worker repeats no simulation."""
    search_requests = evaluator.problem.workload.fidelity.search_requests
    for trial in evaluated_trials(study):
        record = trial.user_attrs[RECORD_ATTR]
        evaluator.remember(record)
        if record.get("feasible") and record.get("fidelity") == "simulate" and record.get("estimate_objectives"):
            screen.add(*record["estimate_objectives"])
            if record.get("simulated_requests") == search_requests and trial.values:
                screen.add_simulated(*trial.values)


# --- the whole-space screen (:mod:`._screen`) --------------------------------------------------
def screen_space(problem: Problem, study: optuna.Study, evaluator: Evaluator, budget: TrialBudget,
                 timeout_s: float | None = None,
                 callbacks: Sequence[Callable] = ()) -> tuple[dict[str, Any], WorkerResult]:
    """Screen every deployment of the space and simulate, as trials of ``study``, those that may
    reach the front (:func:`~._screen.plan_screen`, :func:`~._screen.open_candidates`), round by round
    (:func:`~._screen.screen_round`, cheapest first), until none is left, the budget is spent or
    ``timeout_s`` passes. Each is a new trial, run as any trial is (storages, resumes and other
    workers see it), whose parameters a :class:`GivenPoint` sampler hands out: an enqueued trial,
    popped from the storage's queue, can be taken by two processes at once where the storage locks
    no row, as SQLite does. One at a time, in an order that depends on the results only, so the same
    seed gives the same trials whatever runs the rest of the job. Returns what it covered, also
    stored as the study's :data:`SCREEN_ATTR` (``fallback``: a space too large to screen, or none of
    whose deployments can reach the front; the sampler searches it), and this process's share of
    the trials."""
    start = time.monotonic()
    plan = plan_screen(evaluator)
    covered: dict[str, Any] = {"points": plan.points, "gridded": plan.gridded, "deployments": plan.deployments}
    if plan.fallback is not None:
        covered["fallback"] = plan.fallback
        study.set_user_attr(SCREEN_ATTR, covered)
        return covered, WorkerResult(worker_id(), 0, 0)
    screen = ScreenFront()
    stale = fail_dead_workers_trials(study)
    ran = FinishedHere()
    seed_from_study(study, evaluator, screen)
    objective = Objective(problem, evaluator, screen, budget, screened=True)
    given = GivenPoint()
    sampler, study.sampler = study.sampler, given
    round_: list[Screened] = []
    try:
        while True:
            done, points, drops = _screen_state(study)
            left = open_candidates(plan, points, drops, done)
            stopped = None
            if not left:
                break
            still = {s.key for s in left}
            round_ = [s for s in round_ if s.key in still] or screen_round(left)
            if budget.spent(study):
                stopped = f"the budget of {budget.total} trials was spent"
            elif timeout_s is not None and time.monotonic() - start > timeout_s:
                stopped = f"the time limit of {timeout_s:g} s passed"
            if stopped:
                break
            given.params = round_.pop(0).params
            with journal_errors():
                study.optimize(objective, n_trials=1, callbacks=[ran, *callbacks], catch=(BudgetSpent, AlreadyScored),
                               gc_after_trial=False)
            if ran.last is not None and ran.last.state == TrialState.FAIL:  # not run (other workers took the budget, ...)
                stopped = ran.last.user_attrs.get("reason") or "a trial failed"
                break
    finally:
        study.sampler = sampler
    simulated = sum(1 for c in plan.candidates if c.key in done)
    covered.update(ruled_out=plan.ruled_out, out_of_reach=plan.out_of_reach,
                   candidates=len(plan.candidates), simulated=simulated, left=len(left),
                   dropped=len(plan.candidates) - simulated - len(left))
    if stopped:
        covered["stopped"] = stopped
    study.set_user_attr(SCREEN_ATTR, covered)
    return covered, WorkerResult(worker_id(), ran.count, stale)


def _screen_state(study: optuna.Study) -> tuple[set[str], np.ndarray, np.ndarray]:
    """The deployments the study's trials scored (:data:`DEPLOYMENT_ATTR`), and the simulated feasible
    ones' (cost, latency) rows with their accuracy drops."""
    done, points, drops = set(), [], []
    for trial in study.get_trials(deepcopy=False, states=_BUDGETED):
        key = trial.system_attrs.get(DEPLOYMENT_ATTR)
        if key is not None:
            done.add(key)
        record = trial.user_attrs.get(RECORD_ATTR) or {}
        if trial.state == TrialState.COMPLETE and record.get("fidelity") == "simulate" and record.get("feasible"):
            points.append(trial.values)
            drops.append(float(record.get("accuracy_drop_pct") or 0.0))
    return done, np.asarray(points, dtype=float).reshape(-1, 2), np.asarray(drops, dtype=float)


@dataclass
class WorkerResult:
    """One worker's share: the trials it finished, and dead workers' trials it marked failed."""

    worker: str
    trials_run: int
    stale_failed: int


def run_worker(problem: Problem, study: optuna.Study, *, trials: int | None, timeout_s: float | None,
               callbacks: Sequence[Callable] = (), evaluator: Evaluator | None = None) -> WorkerResult:
    """Run trials until the study holds ``trials`` finished ones (counted over every worker) or
    ``timeout_s`` passes."""
    evaluator = evaluator or Evaluator(problem)
    screen = ScreenFront()
    stale = fail_dead_workers_trials(study)
    seed_from_study(study, evaluator, screen)
    budget = TrialBudget(trials)
    remaining = budget.remaining(study)
    if remaining == 0:
        return WorkerResult(worker_id(), 0, stale)
    ran = FinishedHere()
    with journal_errors():
        study.optimize(Objective(problem, evaluator, screen, budget), n_trials=remaining, timeout=timeout_s,
                       callbacks=[ran, budget.stop_when_spent, *callbacks], catch=(BudgetSpent, AlreadyScored),
                       gc_after_trial=False)
    return WorkerResult(worker_id(), ran.count, stale)


class GivenPoint(optuna.samplers.BaseSampler):
    """A sampler that hands out ``params``, the point the screen chose: each knob the trial suggests."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        return {}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]) -> dict[str, Any]:
        return {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: Any) -> Any:
        return self.params[param_name]


class FinishedHere:
    """An Optuna callback that counts the trials this process finished (other workers' not counted)
    and keeps the last one it ran, whatever its state."""

    def __init__(self) -> None:
        self.count = 0
        self.last: FrozenTrial | None = None

    def __call__(self, _study: optuna.Study, trial: FrozenTrial) -> None:
        self.count += trial.state in FINISHED
        self.last = trial


# --- the front --------------------------------------------------------------------------------
def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Non-dominated rows of an (n, 2) array of minimized objectives."""
    n = len(points)
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        dominated = np.all(points <= points[i], axis=1) & np.any(points < points[i], axis=1)
        mask[i] = not dominated.any()
    return mask


def preferred_mask(points: np.ndarray, accuracy_drop_pct: Sequence[float]) -> np.ndarray:
    """The front of an (n, 2) array of (cost, latency) with accuracy breaking ties: each point of
    the plain front (:func:`pareto_mask`) gives way to the point of equal cost, latency tied with it
    (:func:`latency_tied`) and the lowest accuracy drop (then the fastest); identical points stay
    together.

    Example (8 x H100 at $23.92/hour, AWQ 70 ms faster than FP8 in 5 s of P99 e2e):
        >>> points = np.array([[23.92, 5.00], [23.92, 5.07], [30.0, 4.0]])
        >>> preferred_mask(points, [2.37, 0.4, 2.37]).tolist()
        [False, True, True]
    """
    accuracy = np.nan_to_num(np.asarray(accuracy_drop_pct, dtype=float), nan=math.inf)
    keep = np.zeros(len(points), dtype=bool)
    for i in np.flatnonzero(pareto_mask(points)):
        cost, latency = points[i]
        same = [j for j in range(len(points)) if np.isclose(points[j, 0], cost, rtol=1e-9, atol=0)
                and points[j, 1] >= latency and latency_tied(points[j, 1], latency)]
        best = min(same, key=lambda j: (accuracy[j], points[j, 1], j))
        keep[[j for j in same if accuracy[j] == accuracy[best] and points[j, 1] == points[best, 1]]] = True
    return keep


# --- the final front: re-checked at final fidelity, cheapest first -------------------------------
@dataclass(frozen=True)
class FrontCandidate:
    """A simulated trial that may belong to the final front: its search-fidelity objective values,
    whether the search found it feasible, and the trials that predicted exactly the same values and
    verdict (deployments whose knobs differ where the traffic never notices: a max_num_seqs never
    reached, a token budget above every step's tokens), which its re-check stands for."""

    number: int
    record: dict[str, Any]
    values: tuple[float, float]
    feasible: bool
    equivalents: tuple[int, ...] = ()


def within_interval(record: dict[str, Any], slo: Any) -> bool:
    """Whether a simulated trial misses only SLOs that its P99's interval straddles (the miss may be
    the noise of a short run): every broken rule is an SLO whose target lies above the lower end of
    the simulated P99's 95% interval."""
    broken = record.get("violations") or {}
    if not broken or not set(broken) <= set(SLO_CONSTRAINTS):
        return False
    return all(p99_low(record["simulation"], SLO_CONSTRAINTS[name][1]) <= getattr(slo, SLO_CONSTRAINTS[name][0])
               for name in broken)


def front_candidates(study: optuna.Study, slo: Any) -> list[FrontCandidate]:
    """Simulated trials that may be on the final front, cheapest first: those the search found
    feasible, and those whose only misses are SLOs within their P99's interval
    (:func:`within_interval`). Trials with identical values and verdicts are one candidate, the
    lowest-numbered standing for the others."""
    groups: dict[tuple, FrontCandidate] = {}
    for trial in evaluated_trials(study):
        record = trial.user_attrs[RECORD_ATTR]
        if record["fidelity"] != "simulate" or trial.values is None:
            continue
        if not (record["feasible"] or within_interval(record, slo)):
            continue
        key = (*trial.values, bool(record["feasible"]))
        first = groups.get(key)
        if first is None:
            groups[key] = FrontCandidate(trial.number, record, tuple(trial.values), bool(record["feasible"]))
        else:
            groups[key] = FrontCandidate(first.number, first.record, first.values, first.feasible,
                                         (*first.equivalents, trial.number))
    return sorted(groups.values(), key=lambda c: (c.values, c.number))


def _settled(rechecks: dict[int, dict[str, Any]], requests: int) -> dict[int, dict[str, Any]]:
    return {n: r for n, r in rechecks.items() if r.get("requests") == requests}


def _passing_points(candidates: Sequence[FrontCandidate], done: dict[int, dict[str, Any]]) -> np.ndarray:
    points = np.array([done[c.number]["values"] for c in candidates if c.number in done and done[c.number]["feasible"]],
                      dtype=float).reshape(-1, 2)
    points[~np.isfinite(points)] = math.inf
    return points


def next_rechecks(candidates: Sequence[FrontCandidate], rechecks: dict[int, dict[str, Any]],
                  requests: int) -> list[FrontCandidate]:
    """The candidates to re-check next (empty when the front is settled).

    A candidate is open while no re-checked, passing point costs no more and is at least as fast
    (that point's values at final fidelity against the candidate's at search fidelity). The open
    candidates that no other open one and no passing point dominates are re-checked next: the
    search's front first; when one of them fails, the points it dominated or tied come up in the
    next round. So every candidate cheaper than the cheapest passing point is re-checked (and
    failed), and at each cost the front's latency is the best that a candidate's search prediction
    offers, within that prediction's P99 interval. The rounds depend on the results only, not on
    how many processes run them.

    Example:
        >>> a, b = FrontCandidate(1, {}, (1.0, 2.0), True), FrontCandidate(2, {}, (2.0, 1.5), True)
        >>> c = FrontCandidate(3, {}, (1.5, 2.2), True)  # dominated by a
        >>> [x.number for x in next_rechecks([a, b, c], {}, 100)]
        [1, 2]
        >>> passed, failed = {"requests": 100, "feasible": True}, {"requests": 100, "feasible": False}
        >>> [x.number for x in next_rechecks([a, b, c], {1: {**passed, "values": [1.0, 2.1]},
        ...                                              2: {**passed, "values": [2.0, 1.5]}}, 100)]
        []
        >>> [x.number for x in next_rechecks([a, b, c], {1: {**failed, "values": [1.0, 2.1]},
        ...                                              2: {**passed, "values": [2.0, 1.5]}}, 100)]
        [3]
    """
    done = _settled(rechecks, requests)
    passing = _passing_points(candidates, done)
    accuracy = _accuracy(c for c in candidates if c.number in done and done[c.number]["feasible"])
    open_ = [c for c in candidates if c.number not in done and not _covered(c, passing, accuracy)]
    if not open_:
        return []
    keep = preferred_mask(np.vstack([np.array([c.values for c in open_], dtype=float), passing]),
                          [*_accuracy(open_), *accuracy])[:len(open_)]
    return [c for c, k in zip(open_, keep, strict=True) if k]


def _accuracy(candidates) -> list[float]:
    return [float(c.record.get("accuracy_drop_pct") or 0.0) for c in candidates]


def _covered(candidate: FrontCandidate, passing: np.ndarray, accuracy: list[float]) -> bool:
    """Whether a passing point costs no more and is at least as fast as a candidate, and does not
    lose the tie to it (equal cost, tied latency and a higher accuracy drop: :func:`preferred_mask`)."""
    cost, latency = candidate.values
    drop = _accuracy([candidate])[0]
    for (c, lat), acc in zip(passing, accuracy, strict=True):
        if c <= cost and lat <= latency:
            tie = np.isclose(c, cost, rtol=1e-9, atol=0) and latency_tied(lat, latency)
            if not (tie and drop < acc):
                return True
    return False


@dataclass(frozen=True)
class RecheckRound:
    """Where the front's re-check stands (for a progress display): the rounds finished and re-checks
    run so far, how many of those failed, the candidates, the front of the passing re-checked points
    so far (what the job reports once the front is settled), and how many re-checks are left in the
    round under way, or before a round how many it runs (0: the front is settled)."""

    round: int
    rechecked: int
    failed: int
    candidates: int
    front: int
    next_batch: int


def recheck_statement(candidates: Sequence[FrontCandidate], rechecks: dict[int, dict[str, Any]],
                      requests: int) -> dict[str, Any]:
    """What the re-check established, as data for the report: how many candidates there were (and
    how many of them only within their P99 interval of the SLOs), how many were re-checked and
    failed, and the cheapest passing cost: every candidate cheaper than it was re-checked and
    failed, and every candidate not re-checked is dominated by a re-checked, passing point."""
    done = _settled(rechecks, requests)
    checked = [c for c in candidates if c.number in done]
    passing = _passing_points(candidates, done)
    return {
        "requests": requests, "candidates": len(candidates), "within_interval": sum(not c.feasible for c in candidates),
        "rechecked": len(checked), "failed": sum(not done[c.number]["feasible"] for c in checked),
        "cheapest_passing": float(passing[:, 0].min()) if len(passing) else None,
        "settled": not next_rechecks(candidates, rechecks, requests),
    }


def recheck(problem: Problem, record: dict[str, Any], evaluator: Evaluator | None = None) -> dict[str, Any]:
    """Simulate a trial's deployment again with ``final_requests`` and a fresh seed (the one after the
    search's, the same for every candidate: common random numbers), scored as the search scored it
    (:meth:`Evaluator.predict`)."""
    evaluator = evaluator or Evaluator(problem)
    w = problem.workload
    compiled = problem.ctx.compile(record["model"], TrialRecord.model_validate(record).deployment.spec)
    scored = evaluator.predict(record["model"], compiled, w.fidelity.final_requests, w.seed + 1)
    # Rules judged before any prediction (memory, accuracy, ...) held, or the trial would not have
    # been simulated; the prediction's rules are judged again at this fidelity.
    before = [k for k in (record.get("violations") or {}) if k not in scored.violations]
    return {
        "simulation": scored.summary,
        "n_minus_1": scored.n_minus_1,
        "requests": scored.requests,
        "seed": scored.seed,
        "feasible": scored.feasible and not before,
        "reason": "re-check: " + "; ".join(scored.reasons) if scored.reasons else "",
        "values": list(scored.values) if scored.values else [math.inf, math.inf],
        **scored.costs,
    }


def stored_rechecks(study: optuna.Study) -> dict[int, dict[str, Any]]:
    return {int(k[len(RECHECK_PREFIX):]): v for k, v in study.user_attrs.items() if k.startswith(RECHECK_PREFIX)}


def save_recheck(study: optuna.Study, number: int, result: dict[str, Any]) -> None:
    study.set_user_attr(f"{RECHECK_PREFIX}{number}", result)


def final_front(study: optuna.Study) -> list[int]:
    """Trial numbers on the front of the re-checked, still feasible trials (by re-checked values),
    accuracy breaking ties at equal cost (:func:`preferred_mask`).

    Deployments whose knobs differ where it makes no difference to the traffic (chunked prefill
    with prompts under the budget, a max_num_seqs never reached) predict identical values; the
    front keeps the lowest-numbered of each group and :func:`front_equivalents` lists the rest.
    """
    return list(front_equivalents(study))


def search_equivalents(study: optuna.Study) -> list[tuple[optuna.trial.FrozenTrial, list[int]]]:
    """Feasible simulated trials, the lowest-numbered of each group with identical objective values
    and its equivalents' numbers (for re-checks stored before they named their equivalents)."""
    groups: dict[tuple[float, ...], tuple[optuna.trial.FrozenTrial, list[int]]] = {}
    for trial in evaluated_trials(study):  # feasible and simulated: complete, with values
        record = trial.user_attrs[RECORD_ATTR]
        if record["feasible"] and record["fidelity"] == "simulate":
            first, others = groups.setdefault(tuple(trial.values), (trial, []))
            if first is not trial:
                others.append(trial.number)
    return list(groups.values())


def front_equivalents(study: optuna.Study) -> dict[int, list[int]]:
    """Each front trial with the trials that predicted exactly the same objective values: in the
    search (the candidate's ``equivalents``, re-checked through it) or at the re-check."""
    rechecks = {n: r for n, r in stored_rechecks(study).items() if r["feasible"]}
    if not rechecks:
        return {}
    numbers = sorted(rechecks)
    points = np.array([rechecks[n]["values"] for n in numbers], dtype=float)
    points[~np.isfinite(points)] = math.inf
    records = {t.number: t.user_attrs.get(RECORD_ATTR) or {} for t in study.get_trials(deepcopy=False)}
    accuracy = [float(records.get(n, {}).get("accuracy_drop_pct") or 0.0) for n in numbers]
    older = None  # re-checks stored before they named their equivalents
    groups: dict[tuple[float, ...], list[int]] = {}
    for number, point, keep in zip(numbers, points, preferred_mask(points, accuracy), strict=True):
        if not keep:
            continue
        same = rechecks[number].get("equivalents")
        if same is None:
            older = older if older is not None else {t.number: others for t, others in search_equivalents(study)}
            same = older.get(number, [])
        groups.setdefault(tuple(point), []).extend([number, *same])
    return {group[0]: sorted(group[1:]) for group in groups.values()}
