"""The one exception type for bad user input.

Everything a user can get wrong (an unknown GPU, a TP size that does not divide the heads, a
malformed config.json) raises :class:`InputError` with a message that names the field and the fix.
The CLI prints that message and exits with code 2; library callers can catch it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

SpecT = TypeVar("SpecT", bound=BaseModel)


class InputError(ValueError):
    """A user-facing input problem. ``str(err)`` is a complete, one-line explanation."""


def unknown_name_error(kind: str, name: str, known: Iterable[str], hint: str = "") -> InputError:
    """Build the error for a name that is not in a catalog, listing the names that are."""
    listing = ", ".join(sorted(known))
    extra = f" {hint}" if hint else ""
    return InputError(f"unknown {kind} '{name}'; known {kind}s: {listing}.{extra}")


def format_validation_error(err: Exception, source: str = "") -> str:
    """Turn a pydantic ValidationError into one line per problem, each naming its field path."""
    errors = getattr(err, "errors", None)
    if errors is None:
        return f"{source}: {err}" if source else str(err)
    lines = []
    for item in errors():
        loc = ".".join(str(part) for part in item.get("loc", ())) or "(top level)"
        msg = item.get("msg", "invalid value")
        if item.get("type") == "extra_forbidden":
            msg = "unknown key (check its spelling)"
        elif item.get("type") == "missing":
            msg = "required key is missing"
        prefix = f"{source}: " if source else ""
        lines.append(f"{prefix}{loc}: {msg}")
    return "; ".join(lines)


def validate_spec(spec: type[SpecT], data: Any, source: str) -> SpecT:
    """Validate user data against a pydantic spec; every problem becomes one InputError naming its field."""
    try:
        return spec.model_validate(data)
    except ValidationError as err:
        raise InputError(format_validation_error(err, source)) from None
