"""The built-in workload that ``servopt optimize`` runs when given no file.

Example:
    >>> w = default_workload()
    >>> w.model, w.traffic.arrival.rate_per_s
    ('meta-llama/Llama-3.1-8B-Instruct', 20.0)
"""

from __future__ import annotations

from importlib import resources

from ..costmodels.userfiles import parse_shipped_yaml
from .workload import Workload, parse_workload

DEFAULT_NAME = "default"


def default_workload_text() -> str:
    return resources.files(__package__).joinpath("data/default_workload.yaml").read_text()


def default_workload() -> Workload:
    return parse_workload(parse_shipped_yaml(default_workload_text()), "built-in default workload")
