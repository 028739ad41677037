"""What a study was started from, beyond the workload file: the inputs its trials were scored with.

A workload names its models, GPUs and profiles; what they resolve to lives in other files that can
change between two runs of the same job: a local model's ``config.json`` (an 8B folder that now
holds a 70B), a ``--hardware`` file (a price, a GPU's memory), a profile JSON. Trials scored before
and after such a change do not belong on one front (the same 8 x L40S at $8.00 and at $14.89).
So a study records :func:`study_inputs` when it starts, and every later run compares: a run whose
inputs differ is refused in one line naming what changed (:func:`changed_inputs`), unless it asks
to start afresh (``servopt optimize --restart``).

Recorded per model the search may serve (every checkpoint of it): a digest of its resolved
architecture and formats, with the sizes a message names; per candidate GPU: a digest of its spec
(the hardware file's entry, catalog or not), its price, and a digest of its calibration profile.
Where the files were read (a moved model folder) is not an input.

Example:
    >>> old = {"models": {"m": {"sha256": "a", "summary": {"num_layers": 32, "hidden_size": 4096}}},
    ...        "gpus": {"l40s": {"sha256": "b", "price_per_gpu_hour": 1.86, "profile_sha256": "c"}}}
    >>> new = {"models": {"m": {"sha256": "x", "summary": {"num_layers": 80, "hidden_size": 8192}}},
    ...        "gpus": {"l40s": {"sha256": "y", "price_per_gpu_hour": 2.0, "profile_sha256": "c"}}}
    >>> changed_inputs(old, new)
    ["model 'm' (its config: num_layers 32 -> 80, hidden_size 4096 -> 8192)", 'GPU l40s (price $1.86 -> $2.00/GPU-hour)']
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..costmodels.errors import one_line
from ._problem import Problem

# The study attribute that holds :func:`study_inputs`.
INPUTS_ATTR = "inputs"
# Sizes a message names when a model's config changed.
_SUMMARY_KEYS = ("family", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
                 "intermediate_size", "vocab_size", "max_context", "dtype")
# Where a config was read, and the names it answers to: not what it holds.
_NOT_CONTENT = {"config_source", "aliases"}


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def study_inputs(problem: Problem) -> dict[str, Any]:
    """The resolved inputs of a problem, as plain data a study keeps (see the module docstring)."""
    models = {}
    for key, choice in problem.ctx.models.items():
        specs = {"model": choice.spec.model_dump(mode="json", exclude=_NOT_CONTENT),
                 "weights": {scheme: [option.serve_id, option.spec.model_dump(mode="json", exclude=_NOT_CONTENT)]
                             for scheme, option in sorted(choice.weights.items())}}
        summary = {k: v for k, v in specs["model"].items() if k in _SUMMARY_KEYS}
        models[key] = {"sha256": _digest(specs), "summary": summary}
    gpus = {}
    for name, gpu in problem.ctx.gpus.items():
        gpus[name] = {"sha256": _digest(gpu.model_dump(mode="json")), "price_per_gpu_hour": gpu.price_per_gpu_hour,
                      "profile_sha256": _digest(problem.profile(name).model_dump(mode="json"))}
    return {"models": models, "gpus": gpus}


def changed_inputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """What differs between two :func:`study_inputs`, each as a phrase naming it (empty: the same)."""
    changes = []
    for kind, what in (("models", "model"), ("gpus", "GPU")):
        before, after = old.get(kind) or {}, new.get(kind) or {}
        gone, added = sorted(set(before) - set(after)), sorted(set(after) - set(before))
        if gone or added:
            changes.append(f"{what}s " + ", ".join([*(f"{one_line(n)} dropped" for n in gone),
                                                   *(f"{one_line(n)} added" for n in added)]))
        for name in [n for n in after if n in before]:
            changes += _changed_entry(what, name, before[name], after[name])
    return changes


def _changed_entry(what: str, name: str, old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    label = f"{what} '{one_line(name)}'" if what == "model" else f"{what} {one_line(name)}"
    if what == "model":
        if old.get("sha256") == new.get("sha256"):
            return []
        sizes = [f"{k} {old['summary'].get(k)} -> {new['summary'].get(k)}" for k in _SUMMARY_KEYS
                 if (old.get("summary") or {}).get(k) != (new.get("summary") or {}).get(k)]
        return [f"{label} (its config: {', '.join(sizes) or 'checkpoints or formats'})"]
    parts = []
    if old.get("price_per_gpu_hour") != new.get("price_per_gpu_hour"):
        parts.append(f"price ${old.get('price_per_gpu_hour'):.2f} -> ${new.get('price_per_gpu_hour'):.2f}/GPU-hour")
    elif old.get("sha256") != new.get("sha256"):
        parts.append("its spec in the hardware file")
    if old.get("profile_sha256") != new.get("profile_sha256"):
        parts.append("its calibration profile")
    return [f"{label} ({', '.join(parts)})"] if parts else []
