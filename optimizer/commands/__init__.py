"""Subcommands of the ``servopt`` CLI, one module each (see ``optimizer/cli.py``)."""

from . import calibrate, catalog, export, optimize, plan, report, validate

COMMAND_MODULES = [plan, catalog, calibrate, validate, optimize, report, export]
