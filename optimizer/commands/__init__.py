"""Subcommands of the ``servopt`` CLI, one module each (see ``optimizer/cli.py``)."""

from . import calibrate, catalog, diagnose, export, optimize, plan, predict, report, validate

COMMAND_MODULES = [plan, predict, diagnose, catalog, calibrate, validate, optimize, report, export]
