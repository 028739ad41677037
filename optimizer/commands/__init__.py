"""Subcommands of the ``servopt`` CLI, one module each (see ``optimizer/cli.py``).

:data:`COMMANDS` names each command's module and its one-line help (what ``servopt --help``
lists), so the CLI imports the module of the command that runs and no other: start-up does not
pay for what the other commands import (pandas, Optuna, SciPy).
"""

from __future__ import annotations

from importlib import import_module
from types import ModuleType

# command -> (module, one-line help), in the order ``servopt --help`` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("plan", "memory fit, KV cost per request, and step times of a model on a GPU"),
    "predict": ("predict", "simulate one deployment under a workload: P50/P90/P99 of TTFT, TPOT, ITL, end-to-end"),
    "diagnose": ("diagnose", "say what limits a live deployment, from its vllm bench serve results (and /metrics)"),
    "gpus": ("catalog", "list known GPUs with peaks, memory and prices"),
    "models": ("catalog", "list model presets"),
    "calibrate": ("calibrate", "microbenchmark a GPU, fit a performance profile, import measurements"),
    "validate": ("validate", "score servopt's predictions against measured kernel, memory or end-to-end tables"),
    "optimize": ("optimize", "search deployments for a workload: Pareto front of cost vs P99 latency"),
    "report": ("report", "regenerate trials.csv, pareto.csv and the reports of a job folder"),
    "export": ("export", "write vLLM launch scripts (one per node, plus the router) for a point of a job's front"),
}


def command_module(name: str) -> ModuleType:
    """The module of command ``name`` (its ``register(subparsers)`` adds the command's parser)."""
    return import_module(f".{COMMANDS[name][0]}", __name__)
