"""Argument types and options that several subcommands share."""

from __future__ import annotations

import argparse
from pathlib import Path

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ...costmodels.deployment import Deployment

# The modules behind these helpers are imported where they are used, so that a command's --help
# and its argument checks start without them.


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def request_count(text: str) -> int:
    """Requests to simulate: a positive integer up to what one run can hold."""
    from ...costmodels.serving.traffic import MAX_BENCHMARK_REQUESTS

    value = positive_int(text)
    if value > MAX_BENCHMARK_REQUESTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_BENCHMARK_REQUESTS:,} requests in one run, got {value:,}")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got '{text}'") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive finite number, got {value}")
    return value


def add_hardware_args(parser: argparse.ArgumentParser) -> None:
    """--hardware (GPU/price overrides) and --profile (a calibration profile JSON)."""
    parser.add_argument("--hardware", default=None, metavar="YAML",
                        help="YAML file that overrides or adds GPUs and prices (gpus: {...})")
    parser.add_argument("--profile", default=None, metavar="JSON",
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
