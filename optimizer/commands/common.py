"""Argument types and options that several subcommands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from typing import TYPE_CHECKING

from ...costmodels.errors import quote

if TYPE_CHECKING:
    from ...costmodels.deployment import Deployment

# The modules behind these helpers are imported where they are used, so that a command's --help
# and its argument checks start without them.


def _given(text: str) -> str:
    """The user's text as an argument error quotes it: one line, clipped."""
    return quote(text)


def whole_number(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from ``low`` to ``high`` (where every numeric flag is bounded:
    beyond them a value is a typo, and would exhaust memory or numpy's ranges)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:  # also 5,000 digits and more (Python's own limit)
            raise argparse.ArgumentTypeError(f"expected a whole number from {low:,} to {high:,}, got {_given(text)}") \
                from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected a whole number from {low:,} to {high:,}, got {_given(text)}")
        return value
    parse.__name__ = "whole number"  # what argparse names the type in its own messages
    return parse


def number_in(low: float, high: float, low_open: bool = True) -> Callable[[str], float]:
    """An argparse type: a finite number above ``low`` (or from it, when not ``low_open``) up to ``high``."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {_given(text)}") from None
        if not (low < value if low_open else low <= value) or not value <= high:
            raise argparse.ArgumentTypeError(f"expected a number in {interval}, got {_given(text)}")
        return value
    parse.__name__ = "number"
    return parse


def given(text: str) -> str:
    """An argparse type for paths, names and URLs: an empty value (``--out ""``, which meant the
    default folder) is refused; leaving the option out is how to ask for its default."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty; give a value, or leave the option out for its default")
    return text


given.__name__ = "value"  # what argparse names the type in its own messages

# numpy's random generators take seeds from 0 to 2**32 - 1 (as the workload's seed does).
random_seed = whole_number(0, 2**32 - 1)


def request_count(text: str) -> int:
    """Requests to simulate: a whole number up to what one run simulates."""
    from ...costmodels.serving.traffic import MAX_BENCHMARK_REQUESTS

    return whole_number(1, MAX_BENCHMARK_REQUESTS)(text)


def add_hardware_args(parser: argparse.ArgumentParser) -> None:
    """--hardware (GPU/price overrides) and --profile (a calibration profile JSON)."""
    parser.add_argument("--hardware", type=given, default=None, metavar="YAML",
                        help="YAML file that overrides or adds GPUs and prices (gpus: {...})")
    parser.add_argument("--profile", type=given, default=None, metavar="JSON",
                        help="performance profile to use instead of the shipped one (servopt calibrate fit)")


def load_deployment(path: str | Path) -> Deployment:
    """Read and validate a deployment YAML file (the fields themselves, or under a top-level
    ``deployment:`` key); errors name the field."""
    from ...costmodels.deployment import Deployment
    from ...costmodels.errors import validate_spec
    from ...costmodels.userfiles import read_yaml_mapping, shown

    raw = read_yaml_mapping(path, "deployment file")
    if set(raw) == {"deployment"} and isinstance(raw["deployment"], dict):
        raw = raw["deployment"]
    return validate_spec(Deployment, raw, f"deployment file '{shown(path)}'")
