"""The workload file: the model, the traffic it must serve and its latency targets.

Example:
    >>> w = Workload.model_validate({
    ...     "model": "llama-3.1-8b",
    ...     "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 10},
    ...                 "input_tokens": {"kind": "fixed", "value": 1024},
    ...                 "output_tokens": {"kind": "fixed", "value": 256}},
    ...     "slo": {"p99_ttft_s": 2.0}})
    >>> w.slo.p99_ttft_s
    2.0
"""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..costmodels.errors import InputError, format_validation_error
from ..costmodels.serving.slo import SLO
from ..costmodels.serving.traffic import Traffic


class Workload(BaseModel):
    """A user's workload file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(description="preset alias, Hugging Face id, or path to config.json")
    traffic: Traffic
    slo: SLO = Field(default_factory=SLO)


def read_yaml(path: str | Path, what: str) -> dict:
    """Read a YAML mapping, turning every way it can be unreadable into one clear InputError."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise InputError(f"{what} '{path}' cannot be read: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise InputError(f"{what} '{path}' is not valid YAML{where}: {getattr(err, 'problem', err)}") from None
    if data is None:
        raise InputError(f"{what} '{path}' is empty; see examples/ for the format")
    if not isinstance(data, dict):
        raise InputError(f"{what} '{path}' must be a YAML mapping of keys to values, not {type(data).__name__}")
    return data


def load_workload(path: str | Path) -> Workload:
    """Read and validate a workload YAML file."""
    data = read_yaml(path, "workload file")
    try:
        return Workload.model_validate(data)
    except ValidationError as err:
        raise InputError(format_validation_error(err, f"workload file {path}")) from None
