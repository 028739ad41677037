"""Subcommands of the ``servopt`` CLI, one module each (see ``optimizer/cli.py``)."""

from . import catalog, plan

COMMAND_MODULES = [plan, catalog]
