"""Subcommands of the ``servopt`` CLI, one module each (see ``optimizer/cli.py``)."""

from . import catalog, plan, predict

COMMAND_MODULES = [plan, predict, catalog]
