"""The Optuna study: storage, sampler, objective, workers, and the final front's re-check.

Two objectives, both minimized: the workload's cost (fleet $/hour or $/Mtoken) and its P99
latency. Constraints go to Optuna with :meth:`optuna.Trial.set_constraint` (grouped as in
:data:`~servopt.optimizer._evaluate.CONSTRAINT_GROUPS`), so NSGA-II's constrained domination and
TPE's feasibility split steer away from infeasible configurations; each trial's full record
(knobs, deployment, predictions, reason) is a user attribute.

Example:
    >>> sampler = make_sampler("tpe", seed=1, trials=100)
    >>> type(sampler).__name__
    'TPESampler'
"""

from __future__ import annotations

import math
import os
import socket
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.storages import RDBStorage
from optuna.trial import TrialState
import sqlalchemy.exc
from sqlalchemy import event

from ._evaluate import Evaluator, ScreenFront, p99
from ._problem import Problem

DIRECTIONS = ("minimize", "minimize")
RECORD_ATTR = "record"
WORKER_ATTR = "worker"
RECHECK_PREFIX = "recheck:"
# A worker that dies leaves its trial RUNNING; the heartbeat lets any later worker fail it.
HEARTBEAT_INTERVAL_S = 10
GRACE_PERIOD_S = 30
SCHEMA_RETRIES = 5


def make_sampler(kind: str, seed: int, trials: int | None) -> optuna.samplers.BaseSampler:
    """NSGA-II (default) or multivariate TPE, sized for the trial budget."""
    if kind == "tpe":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                              n_startup_trials=min(20, max((trials or 200) // 10, 5)))
    # Several generations fit in a small budget only with a small population.
    population = int(np.clip((trials or 400) // 8, 12, 50))
    return optuna.samplers.NSGAIISampler(seed=seed, population_size=population)


def open_storage(url: str) -> RDBStorage:
    """An Optuna RDB storage; SQLite gets WAL (concurrent readers, one writer) and a lock timeout."""
    kwargs: dict[str, Any] = {}
    sqlite = url.startswith("sqlite")
    if sqlite:
        kwargs["engine_kwargs"] = {"connect_args": {"timeout": 120}}
    for attempt in range(SCHEMA_RETRIES):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat's
                storage = RDBStorage(url, heartbeat_interval=HEARTBEAT_INTERVAL_S, grace_period=GRACE_PERIOD_S,
                                     **kwargs)
            break
        except sqlalchemy.exc.SQLAlchemyError:
            # Workers started together race to create the schema of a new database: the loser
            # fails on a duplicate row, and finds the schema in place when it tries again.
            if attempt == SCHEMA_RETRIES - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    if sqlite:
        def _pragmas(connection, _record):
            cursor = connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            # Committed transactions survive a killed process (they are in the OS cache); only a
            # power cut may lose the last ones.
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        event.listen(storage.engine, "connect", _pragmas)
        storage.engine.dispose()
    return storage


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def fail_dead_workers_trials(study: optuna.Study) -> int:
    """Mark RUNNING trials of dead processes on this host as FAIL; returns how many.

    A killed job leaves its last trial RUNNING; without this it would linger until the heartbeat's
    grace period ends. Trials of live processes and of other hosts are left alone.
    """
    host = socket.gethostname()
    failed = 0
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = str(trial.user_attrs.get(WORKER_ATTR, ""))
        name, _, pid = owner.rpartition(":")
        if name == host and pid.isdigit() and not _alive(int(pid)):
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


def completed_records(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if RECORD_ATTR in t.user_attrs]


class Objective:
    """Samples a candidate, scores it (cached for repeated points) and reports to Optuna."""

    def __init__(self, problem: Problem, evaluator: Evaluator, screen: ScreenFront):
        self.problem = problem
        self.evaluator = evaluator
        self.screen = screen
        self._outcomes: dict[tuple, Any] = {}

    def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
        trial.set_user_attr(WORKER_ATTR, worker_id())
        candidate = self.problem.space.sample(trial)
        outcome = self._outcomes.get(candidate.key)
        if outcome is None:
            outcome = self._outcomes[candidate.key] = self.evaluator.evaluate(candidate, self.screen)
        for name, amount in outcome.grouped_constraints().items():
            trial.set_constraint(name, amount)
        trial.set_user_attr(RECORD_ATTR, outcome.record)
        return outcome.values


def seed_from_study(study: optuna.Study, evaluator: Evaluator, screen: ScreenFront) -> None:
    """Reload finished trials: their summaries go to the caches, simulated feasible ones to the
    screen, so a resumed or second worker repeats no simulation."""
    for trial in completed_records(study):
        record = trial.user_attrs[RECORD_ATTR]
        evaluator.remember(record)
        if record.get("feasible") and record.get("fidelity") == "simulate" and record.get("estimate_objectives"):
            screen.add(*record["estimate_objectives"])


@dataclass
class WorkerResult:
    trials_run: int
    stale_failed: int


def run_worker(problem: Problem, study: optuna.Study, *, trials: int | None, timeout_s: float | None,
               callbacks: list[Callable] = (), evaluator: Evaluator | None = None) -> WorkerResult:
    """Run trials until the study holds ``trials`` finished ones or ``timeout_s`` passes."""
    evaluator = evaluator or Evaluator(problem)
    screen = ScreenFront()
    stale = fail_dead_workers_trials(study)
    seed_from_study(study, evaluator, screen)
    done = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    remaining = None if trials is None else max(trials - done, 0)
    if remaining == 0:
        return WorkerResult(0, stale)
    stop = [optuna.study.MaxTrialsCallback(trials, states=(TrialState.COMPLETE,))] if trials else []
    before = len(study.trials)
    study.optimize(Objective(problem, evaluator, screen), n_trials=remaining, timeout=timeout_s,
                   callbacks=[*stop, *callbacks], catch=(), gc_after_trial=False)
    return WorkerResult(len(study.trials) - before, stale)


# --- the front --------------------------------------------------------------------------------
def pareto_mask(points: np.ndarray) -> np.ndarray:
    """Non-dominated rows of an (n, 2) array of minimized objectives."""
    n = len(points)
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        dominated = np.all(points <= points[i], axis=1) & np.any(points < points[i], axis=1)
        mask[i] = not dominated.any()
    return mask


def front_layers(points: np.ndarray, layers: int) -> np.ndarray:
    """Indices of the first ``layers`` non-dominated fronts."""
    remaining = np.arange(len(points))
    chosen: list[int] = []
    for _ in range(layers):
        if not len(remaining):
            break
        mask = pareto_mask(points[remaining])
        chosen += remaining[mask].tolist()
        remaining = remaining[~mask]
    return np.array(chosen, dtype=int)


def recheck_candidates(study: optuna.Study, limit: int = 40) -> list[optuna.trial.FrozenTrial]:
    """Feasible simulated trials on the search's first two fronts (the second stands by in case a
    front point fails at higher fidelity), one per distinct deployment."""
    seen, trials = set(), []
    for trial in completed_records(study):
        record = trial.user_attrs[RECORD_ATTR]
        key = (record["model"], str(record["deployment"]))
        if record["feasible"] and record["fidelity"] == "simulate" and key not in seen:
            seen.add(key)
            trials.append(trial)
    if not trials:
        return []
    points = np.array([t.values for t in trials])
    return [trials[i] for i in front_layers(points, 2)[:limit]]


def recheck(problem: Problem, record: dict[str, Any], evaluator: Evaluator | None = None) -> dict[str, Any]:
    """Simulate a trial's deployment again with ``final_requests`` and a fresh seed."""
    from ..costmodels.deployment import Deployment

    evaluator = evaluator or Evaluator(problem)
    w = problem.workload
    deployment = Deployment.model_validate(record["deployment"])
    summary = evaluator.simulate(record["model"], deployment, w.fidelity.final_requests, w.seed + 1)
    violations = evaluator._prediction_violations(summary)
    costs = evaluator.cost(deployment, summary)
    feasible = all(v <= 0 for v in violations.values()) and record["feasible"]
    reasons = [f"{name} {amount:+.0%}" for name, amount in violations.items() if amount > 0]
    return {
        "simulation": summary,
        "requests": w.fidelity.final_requests,
        "feasible": feasible,
        "reason": "re-check: " + ", ".join(reasons) if reasons else "",
        "values": [costs[f"cost_{w.objective.cost}"], p99(summary, w.objective.latency)],
        **costs,
    }


def stored_rechecks(study: optuna.Study) -> dict[int, dict[str, Any]]:
    return {int(k[len(RECHECK_PREFIX):]): v for k, v in study.user_attrs.items() if k.startswith(RECHECK_PREFIX)}


def save_recheck(study: optuna.Study, number: int, result: dict[str, Any]) -> None:
    study.set_user_attr(f"{RECHECK_PREFIX}{number}", result)


def final_front(study: optuna.Study) -> list[int]:
    """Trial numbers on the front of the re-checked, still feasible trials (by re-checked values).

    Deployments whose knobs differ where it makes no difference to the traffic (chunked prefill
    with prompts under the budget, a max_num_seqs never reached) predict identical values; the
    front keeps the lowest-numbered of each group and :func:`front_equivalents` lists the rest.
    """
    return list(front_equivalents(study))


def front_equivalents(study: optuna.Study) -> dict[int, list[int]]:
    """Each front trial with the trials that re-checked to exactly the same objective values."""
    rechecks = {n: r for n, r in stored_rechecks(study).items() if r["feasible"]}
    if not rechecks:
        return {}
    numbers = sorted(rechecks)
    points = np.array([rechecks[n]["values"] for n in numbers], dtype=float)
    points[~np.isfinite(points)] = math.inf
    groups: dict[tuple[float, ...], list[int]] = {}
    for number, point, keep in zip(numbers, points, pareto_mask(points), strict=True):
        if keep:
            groups.setdefault(tuple(point), []).append(number)
    return {group[0]: group[1:] for group in groups.values()}
