"""The one exception type for bad user input, and the strict types every spec model is built from.

Everything a user can get wrong (an unknown GPU, a TP size that does not divide the heads, a
malformed config.json) raises :class:`InputError` with a message that names the field and the fix.
The CLI prints that message as one line and exits with code 2; library callers can catch it.

Spec models (the deployment, the traffic, the workload, SLOs, GPU entries, profiles) derive from
:class:`Spec`: unknown keys are errors, nothing is coerced (``true`` is not 1, ``'1.0'`` is not a
number, ``2.0`` is not an integer), and floats must be finite. The ``Annotated`` types below add
the physical bounds several models share.

Example:
    >>> class Demo(Spec):
    ...     prompt_tokens: Tokens = 1
    ...     rate_per_s: float = 1.0
    >>> for bad in ({"prompt_tokens": True}, {"rate_per_s": "1.0"}, {"rate_per_s": float("inf")}, {"prompt": 2}):
    ...     try:
    ...         validate_spec(Demo, bad, "demo.yaml")
    ...     except InputError as err:
    ...         print(err)
    demo.yaml: prompt_tokens: expected a whole number, not a true/false value (got true)
    demo.yaml: rate_per_s: expected a number, not text (got '1.0')
    demo.yaml: rate_per_s: must be a finite number (got inf)
    demo.yaml: prompt: unknown key (did you mean 'prompt_tokens'?)
    >>> did_you_mean("p99_ttf_s", ["p99_ttft_s", "p99_tpot_s", "p99_e2e_s"])
    " (did you mean 'p99_ttft_s'?)"
"""

from __future__ import annotations

import difflib
import re
import typing
from collections.abc import Iterable
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

SpecT = TypeVar("SpecT", bound=BaseModel)

# Largest token count any length field accepts: ten million tokens is beyond every model's context.
MAX_TOKENS = 10_000_000
# GPU memory, and the KV cache of one GPU: at most 8 TiB.
MAX_MEMORY_GIB = 8 * 1024
# Integers above 2**53 cannot round-trip through a float, and no count servopt reads comes near it.
MAX_INT = 2**53
# How much of a user's value or key an error message quotes.
_QUOTE_CHARS = 60


class InputError(ValueError):
    """A user-facing input problem. ``str(err)`` is a complete, one-line explanation."""


class Spec(BaseModel):
    """Base of every model validated from a user's file: strict, finite, frozen, no unknown keys."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


# Shared field types. Name is a catalog name, id or path.
Tokens = Annotated[int, Field(ge=1, le=MAX_TOKENS)]
Seconds = Annotated[float, Field(gt=0, le=365 * 86400.0)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]*$")]


def quote(value: Any) -> str:
    """A user's value as an error message shows it: YAML spellings, control characters escaped, clipped."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif value is None:
        text = "null"
    elif isinstance(value, (dict, list, tuple)):
        text = f"a {'mapping' if isinstance(value, dict) else 'list'}"
    elif isinstance(value, float):  # numpy floats too, without their type name
        text = repr(float(value))
    else:
        text = repr(value)
    return one_line(text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "...")


def label(key: Any) -> str:
    """A user's key as a field path shows it: unquoted, one line, clipped."""
    text = one_line(str(key))
    return text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "..."


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so that it prints as one line."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode() for ch in text)


def close_matches(name: str, known: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The names in ``known`` closest to ``name`` (difflib's ratio, ignoring case), best first: those
    scoring at least ``cutoff`` and within 0.1 of the best (a clear winner is named alone).

    >>> close_matches("Qwen/Qwen3-8B-FP", ["Qwen/Qwen3-8B-FP8", "Qwen/Qwen3-8B", "openai/gpt-oss-20b"])
    ['Qwen/Qwen3-8B-FP8', 'Qwen/Qwen3-8B']
    """
    spelled: dict[str, str] = {}
    for item in known:
        spelled.setdefault(str(item).lower(), str(item))
    target = str(name).lower()
    scored = []
    for key in spelled:
        matcher = difflib.SequenceMatcher(None, target, key)
        if matcher.real_quick_ratio() >= cutoff and matcher.quick_ratio() >= cutoff and matcher.ratio() >= cutoff:
            scored.append((matcher.ratio(), key))
    scored.sort(key=lambda pair: (-pair[0], pair[1]))
    best = scored[0][0] if scored else 0.0
    return [spelled[key] for ratio, key in scored[:n] if ratio >= best - 0.1]


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest names in ``known``, or ``""`` when none is close.

    The one "did you mean" of servopt: every message about an unknown key, name or id appends it.
    """
    found = close_matches(name, known)
    if not found:
        return ""
    return " (did you mean " + " or ".join(f"'{one_line(item)}'" for item in found) + "?)"


def unknown_name_error(kind: str, name: str, known: Iterable[str], hint: str = "") -> InputError:
    """Build the error for a name that is not in a catalog, listing the names that are."""
    known = sorted(known)
    listing = ", ".join(known)
    extra = f" {hint}" if hint else ""
    return InputError(f"unknown {kind} '{one_line(str(name)[:200])}'{did_you_mean(str(name), known)}; "
                      f"known {kind}s: {listing}.{extra}")


# Pydantic's strict type errors, reworded to say what was given and what is expected.
_TYPE_NAMES = {bool: "a true/false value", str: "text", int: "a whole number", float: "a number",
               dict: "a mapping", list: "a list", type(None): "null"}
_EXPECTED = {"int_type": "a whole number", "int_from_float": "a whole number", "float_type": "a number",
             "bool_type": "true or false", "string_type": "text", "dict_type": "a mapping",
             "list_type": "a list", "model_type": "a mapping of keys to values",
             "model_attributes_type": "a mapping of keys to values"}


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field annotation can hold (through Optional, unions, Annotated, lists, dicts)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Annotated:
        args = args[:1]
    return [model for arg in args for model in _models_in(arg)]


def _keys_at(spec: type[BaseModel] | None, loc: tuple) -> list[str]:
    """The keys a spec accepts beside the unknown key at ``loc`` (its last part), or [] when unknown."""
    return sorted({field.alias or name for model in _models_at(spec, loc) for name, field in model.model_fields.items()})


def _models_at(spec: type[BaseModel] | None, loc: tuple) -> list[type[BaseModel]]:
    """The models whose keys sit beside the key at ``loc`` (its last part)."""
    models = [spec] if spec is not None else []
    for part in loc[:-1]:
        if isinstance(part, int):
            continue  # a list index: the models stay those of the list's items
        inner = []  # a dict key, or the tag of a discriminated union: the value's models are these
        for model in models:
            field = model.model_fields.get(str(part)) or next(
                (f for f in model.model_fields.values() if f.alias == part), None)
            inner += _models_in(field.annotation) if field is not None else [model]
        # Under a discriminated union pydantic adds the tag to the path: keep the member it names.
        tagged = [m for m in inner if any(part in typing.get_args(f.annotation) for f in m.model_fields.values())]
        models = tagged or inner
    return models


def nested_home(spec: type[BaseModel] | None, loc: tuple, depth: int = 3) -> str | None:
    """Where a key unknown at ``loc`` belongs, when a section below that level has it (a key indented
    one level too little): its path from ``loc``'s parent, such as ``traffic.input_tokens``."""
    if not loc or spec is None:
        return None
    key = str(loc[-1])
    queue = [(model, "") for model in _models_at(spec, loc)]
    for _ in range(depth):
        found, deeper = [], []
        for model, path in queue:
            for name, field in model.model_fields.items():
                for inner in _models_in(field.annotation):
                    below = f"{path}{name}."
                    if key in inner.model_fields:
                        found.append(f"{below}{key}")
                    deeper.append((inner, below))
        if found:
            return sorted(set(found), key=lambda p: (p.count("."), p))[0]
        queue = deeper
    return None


def _message(item: dict, spec: type[BaseModel] | None = None) -> str:
    kind, given = item.get("type", ""), item.get("input")
    if kind == "extra_forbidden":
        loc = tuple(item.get("loc", ()))
        hint = did_you_mean(str(loc[-1]), _keys_at(spec, loc)) if loc else ""
        home = None if hint else nested_home(spec, loc)
        if home:
            return f"unknown key here (did you mean {home}? it belongs under {home.rsplit('.', 1)[0]}:)"
        return f"unknown key{hint or ' (check its spelling)'}"
    if kind == "missing":
        return "required key is missing"
    if kind == "finite_number":
        return f"must be a finite number (got {quote(given)})"
    if kind == "union_tag_invalid":
        ctx = item.get("ctx", {})
        options = re.findall(r"'([^']*)'", str(ctx.get("expected_tags", "")))
        return f"{quote(ctx.get('tag'))} is not one of {ctx.get('expected_tags')}{did_you_mean(str(ctx.get('tag')), options)}"
    if kind == "string_pattern_mismatch":
        return f"must not hold control characters such as line breaks, tabs or NUL (got {quote(given)})"
    if kind in _EXPECTED:
        what = _TYPE_NAMES.get(type(given), f"a {type(given).__name__}")
        return f"expected {_EXPECTED[kind]}, not {what} (got {quote(given)})"
    msg = item.get("msg", "invalid value")
    msg = msg.removeprefix("Value error, ")
    if kind in ("literal_error", "enum") and isinstance(given, str):
        options = re.findall(r"'([^']*)'", str(item.get("ctx", {}).get("expected", "")))
        return f"{msg} (got {quote(given)}){did_you_mean(given, options)}"
    if kind in ("literal_error", "union_tag_invalid", "enum") or kind.startswith(("greater", "less", "too_")):
        return f"{msg} (got {quote(given)})"
    return msg


def _field_path(item: dict) -> str:
    parts = [label(part) for part in item.get("loc", ())]
    if item.get("type") == "union_tag_invalid":  # the bad value is the discriminator's
        parts.append(str(item.get("ctx", {}).get("discriminator", "kind")).strip("'"))
    return ".".join(parts) or "(top level)"


def format_validation_error(err: Exception, source: str = "", shown: int = 5,
                            spec: type[BaseModel] | None = None) -> str:
    """Turn a pydantic ValidationError into one line naming ``source`` once, then each problem (the
    first ``shown``) with its field path.

    With ``spec`` (the model validated), an unknown key gets the closest keys it accepts there.
    """
    errors = getattr(err, "errors", None)
    prefix = f"{source}: " if source else ""
    if errors is None:
        return one_line(f"{prefix}{err}")
    items = errors()
    # The file is named once, however many of its fields are wrong.
    parts = [f"{_field_path(item)}: {_message(item, spec)}" for item in items[:shown]]
    if len(items) > shown:
        parts.append(f"and {len(items) - shown} more problems")
    return one_line(prefix + "; ".join(parts))


def validate_spec(spec: type[SpecT], data: Any, source: str, context: dict[str, Any] | None = None) -> SpecT:
    """Validate user data against a pydantic spec; every problem becomes one InputError naming its field
    (``context``: pydantic's validation context, for validators that read it)."""
    try:
        return spec.model_validate(data, context=context)
    except ValidationError as err:
        raise InputError(format_validation_error(err, source, spec=spec)) from None
