"""Subcommands of the ``servopt`` CLI, one module each (see ``optimizer/cli.py``)."""

from . import calibrate, catalog, export, optimize, plan, predict, report, validate

COMMAND_MODULES = [plan, predict, catalog, calibrate, validate, optimize, report, export]
