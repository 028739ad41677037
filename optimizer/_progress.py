"""The progress bars: the search's (finished trials and the search front), then the re-check's.

The search bar shows ``search_front``: the front of the trials simulated feasible at search fidelity,
before any re-check. The re-check bar that follows shows ``front``: the front of the re-checked,
passing points, which is what the job reports when it ends ("front of N"), and how many re-checks
failed. In one process the search bar is an Optuna callback; with ``--jobs N`` the parent polls the
shared storage.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import optuna
from tqdm import tqdm

from .study import FINISHED, RECORD_ATTR, RecheckRound, evaluated_trials, pareto_mask


class Progress:
    """A tqdm bar over the trial budget (or elapsed seconds when only a time budget is set), with the
    size of the search front (``search_front``: not yet re-checked)."""

    def __init__(self, total: int | None, initial: int = 0, time_s: float | None = None, enabled: bool = True):
        self.enabled = enabled
        self._feasible: list[tuple[float, float]] = []
        self._bar = tqdm(total=total, initial=initial, unit="trial", desc="optimize", disable=not enabled,
                         file=sys.stderr, dynamic_ncols=True)
        self._time_s = time_s

    def _front_size(self) -> int:
        if not self._feasible:
            return 0
        return int(pareto_mask(np.array(self._feasible)).sum())

    def callback(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if trial.state not in FINISHED:
            return
        record = trial.user_attrs.get(RECORD_ATTR, {})
        if record.get("feasible") and record.get("fidelity") == "simulate":
            self._feasible.append(tuple(trial.values))
        self._bar.update(1)
        self._bar.set_postfix(search_front=self._front_size(), refresh=False)

    def update_from(self, study: optuna.Study) -> None:
        trials = evaluated_trials(study)
        self._feasible = [tuple(t.values) for t in trials
                          if t.user_attrs.get(RECORD_ATTR, {}).get("feasible")
                          and t.user_attrs.get(RECORD_ATTR, {}).get("fidelity") == "simulate"]
        self._bar.update(len(trials) - self._bar.n)
        self._bar.set_postfix(search_front=self._front_size(), refresh=False)

    def close(self) -> None:
        self._bar.close()


class RecheckProgress:
    """A tqdm bar over the front's re-check simulations: its total grows by each round's batch
    (:func:`~servopt.optimizer.study.next_rechecks` decides a round from the last one's results), its
    ``front`` is the front of the re-checked, passing points so far (the job's final front once the
    last round is in) and ``failed`` counts the re-checks that missed a target.

    Example:
        >>> bar = RecheckProgress(enabled=False)
        >>> bar.update(RecheckRound(round=0, rechecked=0, failed=0, candidates=5, front=0, next_batch=2))
        >>> bar.update(RecheckRound(round=0, rechecked=1, failed=1, candidates=5, front=0, next_batch=1))
        >>> bar.update(RecheckRound(round=1, rechecked=2, failed=1, candidates=5, front=1, next_batch=0))
        >>> bar.shown
        {'total': 2, 'n': 2, 'front': 1, 'failed': 1}
    """

    def __init__(self, enabled: bool = True):
        self._bar = tqdm(total=0, unit="sim", desc="re-check", disable=not enabled, file=sys.stderr,
                         dynamic_ncols=True)
        self.shown: dict[str, int] = {}

    def update(self, where: RecheckRound) -> None:
        """``Job.recheck_front``'s ``on_round``: before each round, after each re-check, at the end."""
        self.shown = {"total": where.rechecked + where.next_batch, "n": where.rechecked, "front": where.front,
                      "failed": where.failed}
        self._bar.total = self.shown["total"]
        self._bar.update(where.rechecked - self._bar.n)
        self._bar.set_postfix({"front": where.front, "failed": where.failed}, refresh=True)

    def close(self) -> None:
        self._bar.close()


@contextmanager
def poll_progress(bar: Progress, open_study: Callable[[], optuna.Study], every_s: float = 1.0) -> Iterator[None]:
    """Refresh ``bar`` from the storage while worker processes run."""
    if not bar.enabled:
        yield
        return
    stop = threading.Event()
    study = open_study()

    def poll() -> None:
        while not stop.wait(every_s):
            bar.update_from(study)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        bar.update_from(study)
