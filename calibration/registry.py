"""Which performance profile a GPU uses: a user's file, a shipped fit, or spec-derived defaults.

Shipped profiles are JSON files in ``calibration/profiles/<gpu>.json`` (fitted by
``scripts/fit_shipped_profiles.py``). A GPU without one gets
:meth:`PerformanceProfile.spec_default`, whose ``calibrated`` flag is False so that every report
can say the prediction is uncalibrated.

Example:
    >>> from servopt.costmodels.hardware import get_gpu
    >>> load_profile(get_gpu("l4")).calibrated
    False
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from ..costmodels.errors import InputError, format_validation_error
from ..costmodels.hardware import GPUSpec
from ..costmodels.profile import PerformanceProfile


def read_profile(path: str | Path) -> PerformanceProfile:
    """Read a profile JSON file (as written by ``servopt calibrate fit``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise InputError(f"profile '{path}' cannot be read: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise InputError(f"profile '{path}' is not valid JSON (line {err.lineno}: {err.msg})") from None
    try:
        return PerformanceProfile.model_validate(data)
    except ValidationError as err:
        raise InputError(format_validation_error(err, f"profile {path}")) from None


def shipped_profile(gpu_name: str) -> PerformanceProfile | None:
    """The profile shipped for this GPU, or None."""
    entry = resources.files(__package__).joinpath("profiles", f"{gpu_name}.json")
    if not entry.is_file():
        return None
    return PerformanceProfile.model_validate(json.loads(entry.read_text()))


def load_profile(gpu: GPUSpec, path: str | Path | None = None) -> PerformanceProfile:
    """The profile for ``gpu``: ``path`` when given, else the shipped fit, else spec defaults."""
    if path is not None:
        return read_profile(path)
    return shipped_profile(gpu.name) or PerformanceProfile.spec_default(gpu)
