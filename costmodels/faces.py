"""Package faces that import a module only when one of its names is first used (PEP 562).

A package's ``__init__`` names what the other packages may use; importing every module behind it
at once would make ``servopt predict --help`` pay for pandas, SciPy and Optuna. A lazy face imports
the module that defines a name the first time the name is read, and keeps it.

Example:
    >>> import types
    >>> face = types.ModuleType("servopt.costmodels.example_face")
    >>> face.__getattr__, face.__dir__ = lazy_face("servopt.costmodels", {"GIB": ".hardware"})
    >>> face.GIB == 2**30
    True
"""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_face(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for the package ``package``: each name of ``exports`` comes
    from the module it maps to (relative to the package), imported when the name is first read."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module, package), name)
        import_module(package).__dict__[name] = value  # read once: the next look-up is a plain one
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
