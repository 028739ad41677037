"""The serving engines servopt models, by name: each engine's rules behind one small base class.

What differs between engines (release defaults, the step formula's engine parameters, how the KV
pool is sized, host and front-end costs, launch flags) is a :class:`EngineRules`; the cost
models ask :func:`get_engine` for a deployment's engine instead of importing one engine's rules.
A new engine is a module with its subclass, plus one line in :data:`ENGINES`.

Example:
    >>> from servopt.costmodels.hardware import get_gpu
    >>> vllm = get_engine("vllm")
    >>> vllm.batch_limits(get_gpu("a100-80gb")), vllm.block_size
    ((2048, 256), 16)
    >>> get_engine("sglang")
    Traceback (most recent call last):
    ...
    servopt.costmodels.errors.InputError: framework 'sglang' is not modelled; servopt models: vllm
"""

from __future__ import annotations

from ..errors import InputError, quote
from ._base import EngineDefaults, EngineRules, StepRule, Version
from .vllm import VllmEngine

ENGINES: dict[str, EngineRules] = {engine.name: engine for engine in (VllmEngine(),)}
# The engine a deployment that names none runs on (the one servopt's exports target by default).
DEFAULT_ENGINE = VllmEngine.name


def get_engine(name: str | None = None) -> EngineRules:
    """The registered engine called ``name`` (None: :data:`DEFAULT_ENGINE`); one InputError line otherwise."""
    engine = ENGINES.get(DEFAULT_ENGINE if name is None else name)
    if engine is None:
        raise InputError(f"framework {quote(name)} is not modelled; servopt models: {', '.join(ENGINES)}")
    return engine


__all__ = ["DEFAULT_ENGINE", "ENGINES", "EngineDefaults", "EngineRules", "StepRule", "Version", "VllmEngine",
           "get_engine"]
