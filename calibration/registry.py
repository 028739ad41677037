"""Which performance profile a GPU uses: a user's file, a shipped fit, or spec-derived defaults.

Shipped profiles are JSON files in ``calibration/profiles/<gpu>.json`` (fitted by
``scripts/fit_shipped_profiles.py``). A GPU without one gets
:meth:`PerformanceProfile.spec_default`, whose ``calibrated`` flag is False so that every report
can say the prediction is uncalibrated; when a reference GPU (:data:`REFERENCE_BY_ARCHITECTURE`) has
a shipped fit, its efficiencies are transferred onto this GPU's datasheet peaks (still marked
uncalibrated).

Example:
    >>> from servopt.costmodels.hardware import get_gpu
    >>> load_profile(get_gpu("l4")).calibrated
    False
    >>> load_profile(get_gpu("h100")).calibrated
    True
    >>> p = load_profile(get_gpu("h100-pcie"))
    >>> p.calibrated, "H100 80GB" in p.source
    (False, True)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path


from ..costmodels.errors import InputError, quote, validate_spec
from ..costmodels.hardware import GPUSpec, builtin_catalog
from ..costmodels.outfiles import write_text
from ..costmodels.profile import PerformanceProfile
from ..costmodels.userfiles import read_json, shown


def read_profile(path: str | Path, gpu: GPUSpec | None = None) -> PerformanceProfile:
    """Read a profile JSON file (as written by ``servopt calibrate fit``); with ``gpu``, one fitted
    for that GPU only (a profile's efficiencies are its kernels' on its own silicon)."""
    profile = validate_spec(PerformanceProfile, read_json(path, "profile"), f"profile '{shown(path)}'")
    if gpu is not None and not gpu.answers_to(profile.gpu):
        raise InputError(f"profile '{shown(path)}' was fitted for the GPU {quote(profile.gpu)}, not this "
                         f"deployment's {gpu.name}; give a profile of the {gpu.name} (servopt calibrate fit), or "
                         "leave the profile out for the shipped one")
    return profile


def shipped_profile(gpu_name: str) -> PerformanceProfile | None:
    """The profile shipped for this GPU, or None."""
    entry = resources.files(__package__).joinpath("profiles", f"{gpu_name}.json")
    if not entry.is_file():
        return None
    return PerformanceProfile.model_validate(json.loads(entry.read_text()))


def shipped_gpus() -> list[str]:
    """The GPUs with a shipped profile."""
    return sorted(entry.name.removesuffix(".json") for entry in resources.files(__package__).joinpath("profiles").iterdir()
                  if entry.name.endswith(".json"))


# Which fitted GPU stands in for an unmeasured one: the most common fitted part of its architecture
# (same tensor cores, same kernels; L40S shares the L4's and RTX 4090's GDDR memory system too). Its
# efficiencies are a better prior than textbook values; the profile stays marked uncalibrated.
REFERENCE_BY_ARCHITECTURE = {"hopper": "h100", "ampere": "a100-80gb", "ada": "l40s", "blackwell": "b200"}


def spec_default_profile(gpu: GPUSpec,
                         fitted: Callable[[str], PerformanceProfile | None] = shipped_profile) -> PerformanceProfile:
    """Uncalibrated defaults: a reference GPU's fit (``fitted(name)``) moved onto this datasheet, else textbook values."""
    reference_name = REFERENCE_BY_ARCHITECTURE.get(gpu.architecture)
    reference = fitted(reference_name) if reference_name else None
    if reference is None:
        return PerformanceProfile.spec_default(gpu)
    return PerformanceProfile.spec_default(gpu, reference, builtin_catalog().get(reference_name))


def profile_origin(gpu: GPUSpec) -> str:
    """The shipped fit a GPU's kernel efficiencies come from: its own, else its architecture's
    reference GPU's (:func:`spec_default_profile`), else its own name (textbook values)."""
    if shipped_profile(gpu.name) is not None:
        return gpu.name
    reference = REFERENCE_BY_ARCHITECTURE.get(gpu.architecture)
    return reference if reference and shipped_profile(reference) is not None else gpu.name


def load_profile(gpu: GPUSpec, path: str | Path | None = None) -> PerformanceProfile:
    """The profile for ``gpu``: ``path`` when given, else the shipped fit, else spec defaults."""
    if path is not None:
        return read_profile(path, gpu)
    return shipped_profile(gpu.name) or spec_default_profile(gpu)


def _rounded(value, digits: int = 4):
    """Floats to ``digits`` significant digits, so that a profile stays readable."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    if isinstance(value, dict):
        return {k: _rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v, digits) for v in value]
    return value


def write_profile(profile: PerformanceProfile, path: str | Path) -> Path:
    """Write a profile as indented JSON with 4 significant digits (validated again after rounding)."""
    data = _rounded(profile.model_dump(mode="json"))
    PerformanceProfile.model_validate(data)
    # One line per list of numbers keeps the knots readable at a glance.
    text = re.sub(r"\[\s+([^\[\]{}]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", json.dumps(data, indent=1))
    return write_text(path, text + "\n")
