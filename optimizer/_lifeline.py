"""Worker processes that end with the process that started them.

``servopt optimize --jobs N`` runs its workers in processes of their own (joblib's loky backend).
Killed in the middle of a trial, a parent leaves them running: loky notices a dead parent only when a
worker asks for its next task, and each worker's one task is the whole search. :func:`exit_with_parent`,
called first thing in a worker, watches the parent from a daemon thread and ends the worker within
:data:`POLL_S` of the parent's death. The worker is then as if killed: its running trial is failed by the
next run (:func:`~servopt.optimizer.study.fail_dead_workers_trials`), a journal line it was writing is cut
off when the journal is next opened, and every finished trial is kept.

Example:
    >>> exit_with_parent() is None  # a thread watches os.getppid(); the doctest's parent lives on
    True
"""

from __future__ import annotations

import os
import threading
import time

POLL_S = 0.5
# The exit status of a worker whose parent died (as if killed by SIGKILL).
ORPHAN_EXIT = 128 + 9
_watching: set[int] = set()


def exit_with_parent() -> None:
    """End this process when its parent dies (see the module docstring); once per process."""
    if os.getpid() in _watching:
        return
    _watching.add(os.getpid())
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(POLL_S)
            if os.getppid() != parent:  # re-parented: the parent is gone
                os._exit(ORPHAN_EXIT)

    threading.Thread(target=watch, name="servopt-exit-with-parent", daemon=True).start()
