"""Subcommands of the ``servopt`` CLI, one module each (see ``optimizer/cli.py``)."""

from . import calibrate, catalog, plan, validate

COMMAND_MODULES = [plan, catalog, calibrate, validate]
