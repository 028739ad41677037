"""Write docs/workload.md, the reference of every file servopt reads, from the pydantic models themselves.

Each section is one model: every key with its type, unit (read from the key's name: ``_s`` seconds,
``_pct`` percent, ...), default, bounds and description, and the models it nests get sections of
their own; a key that takes one of several shapes (``kind:``) lists each. Examples are the files in
examples/, validated as the model they illustrate. tests/test_docs.py checks the file is current:

    python scripts/build_schema_docs.py            # rewrite docs/workload.md
    python scripts/build_schema_docs.py --check    # exit 1 when it is out of date
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from servopt.costmodels.deployment import Deployment
from servopt.costmodels.hardware import GPUSpec
from servopt.optimizer.workload import Workload

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "workload.md"
UNITS = [("_per_gpu_hour", "$ per GPU-hour"), ("usd_per_hour", "$/hour"), ("_per_s", "per second"),
         ("_tbps", "TB/s"), ("_gbps", "GB/s"), ("_gib", "GiB"), ("_gb_nominal", "GB"), ("_pct", "percent"),
         ("_tflops", "TFLOP/s"), ("_w", "watts"), ("_s", "seconds"), ("_tokens", "tokens")]
FILES = [
    ("Workload file", Workload, "servopt optimize WORKLOAD.yaml, servopt predict WORKLOAD.yaml",
     ROOT / "examples" / "chat.yaml"),
    ("Deployment file", Deployment, "servopt predict WORKLOAD.yaml --deployment DEPLOYMENT.yaml, servopt diagnose",
     ROOT / "examples" / "deployments" / "h100-fp8.yaml"),
    ("Hardware file", GPUSpec, "--hardware HARDWARE.yaml: `gpus: {NAME: {...}}`, each entry a GPU (new, or "
     "overriding catalog keys of a GPU the catalog has)", None),
]


def unit(key: str) -> str:
    return next((name for suffix, name in UNITS if key.endswith(suffix)), "")


def _strip(annotation: Any) -> tuple[Any, list[Any]]:
    """The annotation without ``Annotated`` layers, and their metadata."""
    metadata: list[Any] = []
    while get_origin(annotation) is typing.Annotated:
        annotation, *extra = get_args(annotation)
        metadata += extra
    return annotation, metadata


def _variants(annotation: Any) -> list[Any]:
    annotation, _ = _strip(annotation)
    if get_origin(annotation) in (Union, types.UnionType):
        return [a for a in get_args(annotation) if a is not type(None)]
    return [annotation]


def type_name(annotation: Any) -> str:
    annotation, _ = _strip(annotation)
    origin = get_origin(annotation)
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(annotation))
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(annotation) if a is not type(None)]
        optional = " or null" if type(None) in get_args(annotation) else ""
        models = [_strip(a)[0] for a in options]
        if all(isinstance(m, type) and issubclass(m, BaseModel) and "kind" in m.model_fields for m in models):
            kinds = [f"[{get_args(m.model_fields['kind'].annotation)[0]}](#{m.__name__.lower()})" for m in models]
            return "one of, by `kind`: " + ", ".join(kinds) + optional
        return " \\| ".join(type_name(a) for a in options) + optional
    if origin in (list, tuple):
        return f"list of {type_name(get_args(annotation)[0])}"
    if origin is dict:
        key, value = get_args(annotation)
        return f"mapping {type_name(key)} -> {type_name(value)}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{annotation.__name__.lower()})"
    if annotation is Any:
        return "any"
    return {int: "integer", float: "number", str: "string", bool: "boolean"}.get(annotation, str(annotation))


def bounds(annotation: Any, metadata: list[Any]) -> str:
    _, inner = _strip(annotation)
    for variant in _variants(annotation):
        inner += _strip(variant)[1]
    parts = []
    for item in [*metadata, *inner]:
        for cls, sign in ((annotated_types.Ge, ">="), (annotated_types.Gt, ">"), (annotated_types.Le, "<="),
                          (annotated_types.Lt, "<"), (annotated_types.MinLen, "length >="),
                          (annotated_types.MaxLen, "length <=")):
            if isinstance(item, cls):
                value = getattr(item, {"Ge": "ge", "Gt": "gt", "Le": "le", "Lt": "lt", "MinLen": "min_length",
                                       "MaxLen": "max_length"}[cls.__name__])
                text = f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}"
                if text not in parts:
                    parts.append(text)
    return ", ".join(parts)


def default(field: Any) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        value = field.default_factory()
        return "(see its section)" if isinstance(value, BaseModel) else f"`{value!r}`"
    if field.default is PydanticUndefined:
        return ""
    return f"`{yaml.safe_dump(field.default, default_flow_style=True).strip().removesuffix('...').strip()}`"


def annotation_of(model: type[BaseModel], key: str) -> Any:
    """A field's annotation with forward references resolved: pydantic keeps ``ForwardRef('ModelId')``
    for a type defined further down its module (``Annotated[str, ...]``), which printed as such."""
    annotation = model.model_fields[key].annotation
    if isinstance(annotation, typing.ForwardRef) or "ForwardRef" in repr(annotation):
        return typing.get_type_hints(model, include_extras=True)[key]
    return annotation


def nested(annotation: Any) -> list[type[BaseModel]]:
    """The models a key's type contains."""
    annotation, _ = _strip(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for arg in get_args(annotation) for model in nested(arg)]


# A snippet for each model that takes one of several shapes, checked against its model by render().
EXAMPLES = {
    "PoissonArrival": {"kind": "poisson", "rate_per_s": 20},
    "GammaArrival": {"kind": "gamma", "rate_per_s": 20, "cv": 2.0},
    "ClosedLoopArrival": {"kind": "closed_loop", "concurrency": 64},
    "FixedLength": {"kind": "fixed", "value": 512},
    "UniformLength": {"kind": "uniform", "low": 128, "high": 2048},
    "LognormalLength": {"kind": "lognormal", "mean": 1024, "sigma": 0.8, "max": 8192},
    "HistogramLength": {"kind": "histogram", "values": [256, 1024, 4096], "weights": [0.5, 0.3, 0.2]},
    "DatasetLength": {"kind": "dataset", "name": "sharegpt", "column": "input"},
    "FixedDuration": {"kind": "fixed", "value_s": 20},
    "ExponentialDuration": {"kind": "exponential", "mean_s": 20},
}


def section(model: type[BaseModel]) -> list[str]:
    doc = " ".join((model.__dict__.get("__doc__") or "").strip().split("\n\n")[0].split())
    lines = [f"### {model.__name__}", "", doc, ""] if doc else [f"### {model.__name__}", ""]
    if model.__name__ in EXAMPLES:
        example = EXAMPLES[model.__name__]
        model.model_validate(example)
        lines += [f"Example: `{yaml.safe_dump(example, default_flow_style=True, sort_keys=False).strip()}`", ""]
    lines += ["| key | type | unit | default | bounds | description |", "|---|---|---|---|---|---|"]
    for key, field in model.model_fields.items():
        annotation = annotation_of(model, key)
        lines.append(f"| `{key}` | {type_name(annotation)} | {unit(key)} | {default(field)} | "
                     f"{bounds(annotation, field.metadata)} | {(field.description or '').replace('|', '/')} |")
    return lines + [""]


def render() -> str:
    lines = ["# File reference", "",
             "Generated by `python scripts/build_schema_docs.py` from the pydantic models servopt validates its "
             "files with (tests/test_docs.py fails when it is out of date). Every file is YAML or JSON; an unknown "
             "key, a value of the wrong type or out of bounds is refused with one line naming the key "
             "(exit code 2). Units are in the key names: `_s` seconds, `_pct` percent, `_gib` GiB, `_per_s` per "
             "second.", ""]
    for title, root, used_by, example in FILES:
        lines += [f"## {title}", "", f"Read by: {used_by}.", ""]
        if example is not None:
            root.model_validate(yaml.safe_load(example.read_text()))  # the example stays valid
            lines += [f"Example (`{example.relative_to(ROOT)}`):", "", "```yaml", example.read_text().strip(), "```", ""]
        seen: list[type[BaseModel]] = []
        queue = [root]
        while queue:
            model = queue.pop(0)
            if model in seen:
                continue
            seen.append(model)
            lines += section(model)
            for key in model.model_fields:
                queue += [m for m in nested(annotation_of(model, key)) if m not in seen]
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/workload.md is out of date")
    args = parser.parse_args()
    text = render()
    if args.check:
        current = OUT.read_text() if OUT.exists() else ""
        sys.exit(0 if current == text else 1)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
