"""The progress bar: finished trials, the current feasible front size, and simulations run.

In one process it is an Optuna callback; with ``--jobs N`` the parent polls the shared storage.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import optuna
from tqdm import tqdm

from .study import FINISHED, RECORD_ATTR, evaluated_trials, pareto_mask


class Progress:
    """A tqdm bar over the trial budget (or elapsed seconds when only a time budget is set)."""

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
        self._bar.set_postfix(front=self._front_size(), refresh=False)

    def update_from(self, study: optuna.Study) -> None:
        trials = evaluated_trials(study)
        self._feasible = [tuple(t.values) for t in trials
                          if t.user_attrs.get(RECORD_ATTR, {}).get("feasible")
                          and t.user_attrs.get(RECORD_ATTR, {}).get("fidelity") == "simulate"]
        self._bar.update(len(trials) - self._bar.n)
        self._bar.set_postfix(front=self._front_size(), refresh=False)

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
