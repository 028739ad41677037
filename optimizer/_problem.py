"""A workload resolved against the catalogs: models, priced GPUs, profiles, the search space.

Every name a user wrote is looked up here, so a bad one fails before the search starts, with an
error that names its key in the workload file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..calibration.registry import load_profile
from ..costmodels.architectures import ModelSpec, longer_context_fix, resolve_model
from ..costmodels.checkpoints import checkpoints_of
from ..costmodels.errors import InputError, label
from ..costmodels.hardware import GPUSpec, load_catalog
from ..costmodels.profile import PerformanceProfile
from ..costmodels.quantization import builtin_accuracy_table
from ..costmodels.speculation import speculation_problem
from ..search_spaces import ModelChoice, SearchSpace, SpaceContext, SpeculationChoice, weight_options
from ._traffic import TrafficStats, max_model_len_for, traffic_stats
from .workload import Workload


@dataclass(frozen=True, eq=False)
class Problem:
    """What a study optimizes: the workload, its resolved context and search space."""

    workload: Workload
    space: SearchSpace
    stats: TrafficStats
    max_model_len_basis: dict[str, str] = field(default_factory=dict)

    @property
    def ctx(self) -> SpaceContext:
        return self.space.ctx

    def gpu(self, name: str) -> GPUSpec:
        return self.ctx.gpus[name]

    def profile(self, gpu: str) -> PerformanceProfile:
        return self.ctx.profile(gpu)


def _keyed(key: str, err: InputError) -> InputError:
    return InputError(f"{key}: {err}")


def _serve_id(name: str, resolved) -> str:
    """What ``vllm serve`` loads: the id as written (org/name), a local checkpoint's folder, or
    the canonical id of a catalog alias."""
    path = Path(name)
    if path.exists():
        return str(path.parent if path.is_file() else path)
    return name if "/" in name else resolved.spec.name


# What a checkpoint of a model shares with it, whatever its format: the shape of every weight.
_SHAPE = ("family", "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim", "intermediate_size",
          "vocab_size")


def _same_model(where: str, checkpoint_id: str, checkpoint: ModelSpec, model: str, spec: ModelSpec) -> None:
    """Refuse a checkpoint that is not of ``model``: another model's weights would be served (and
    priced, and exported) as this one."""
    differ = [f"{key} {getattr(checkpoint, key)} vs {getattr(spec, key)}" for key in _SHAPE
              if getattr(checkpoint, key) != getattr(spec, key)]
    if (checkpoint.moe is None) != (spec.moe is None) or (
            checkpoint.moe is not None and checkpoint.moe.num_experts != spec.moe.num_experts):
        differ.append("its experts")
    if differ:
        raise InputError(f"{where}: '{label(checkpoint_id)}' is not a checkpoint of {label(model)}: {', '.join(differ[:4])}; "
                         "name a checkpoint of the model itself (or list the other model under alternatives)")


def _checkpoints(serve: str, requested: str, named: dict[str, str | None], where: str,
                 base: ModelSpec) -> dict[str, tuple]:
    """Pre-quantized checkpoints a model can be served from: the catalog's for the id served,
    then the workload's ``checkpoints:`` (which win)."""
    found: dict[str, tuple] = {}
    for entry in {**checkpoints_of(requested), **checkpoints_of(serve)}.values():
        resolved = resolve_model(entry.id)
        why = f"catalog checkpoint {entry.id}" + (f" ({entry.recovery_pct:g}% recovery, {entry.recovery_metric})"
                                                  if entry.recovery_pct is not None else "")
        found[entry.format.scheme] = (entry.id, resolved.spec, why, entry.accuracy_drop_pct)
    for scheme, checkpoint_id in named.items():
        if not checkpoint_id:
            continue
        try:
            resolved = resolve_model(checkpoint_id)
        except InputError as err:
            raise _keyed(f"checkpoints.{scheme}", err) from None
        if resolved.quantization != scheme:
            raise InputError(f"checkpoints.{scheme}: '{checkpoint_id}' is a {resolved.quantization or '16-bit'} "
                             f"checkpoint ({resolved.origin}), not {scheme}; list it under its scheme")
        _same_model(f"checkpoints.{scheme}", checkpoint_id, resolved.spec, requested, base)
        found[scheme] = (checkpoint_id, resolved.spec, f"workload checkpoints.{scheme}", None)
    return found


def _model_choice(key: str, name: str, serve_id: str | None, drop: float, where: str,
                  named: dict[str, str | None]) -> ModelChoice:
    try:
        resolved = resolve_model(name)
    except InputError as err:
        raise _keyed(where, err) from None
    serve = serve_id or _serve_id(name, resolved)
    if serve_id is not None and serve_id != name:
        base = resolved.spec
        try:  # an alternative's checkpoint fixes its weights
            resolved = resolve_model(serve_id)
        except InputError as err:
            raise _keyed(where.replace(".model", ".checkpoint"), err) from None
        _same_model(where.replace(".model", ".checkpoint"), serve_id, resolved.spec, name, base)
    extra = {} if resolved.quantization else _checkpoints(serve, name, named, where, resolved.spec)
    options = weight_options(resolved.spec, serve, resolved.quantization, extra)
    return ModelChoice(key, resolved.spec, serve, options, drop)


def build_problem(workload: Workload, hardware: str | None = None) -> Problem:
    """Resolve a workload's names and build its search space; errors name the workload key."""
    w = workload
    named = w.checkpoints.model_dump()
    models = {w.model: _model_choice(w.model, w.model, None, 0.0, "model", named)}
    listed = {models[w.model].serve_id: "model"}  # what vLLM serves -> the key that lists it
    for i, alt in enumerate(w.alternatives):
        if alt.accuracy_drop_pct is not None:
            drop = alt.accuracy_drop_pct
        else:
            drop = max(0.0, 100.0 * (1 - alt.accuracy_score / w.accuracy.model_score))
        if alt.model in models:
            raise InputError(f"alternatives.{i}.model: '{alt.model}' is listed twice")
        # The workload's checkpoints are of the main model; alternatives use the catalog's.
        choice = _model_choice(alt.model, alt.model, alt.checkpoint, drop, f"alternatives.{i}.model", {})
        if choice.serve_id in listed:  # by its id and by an alias: one of two accuracy drops would be lost
            raise InputError(f"alternatives.{i}.model: '{label(alt.model)}' is the model {listed[choice.serve_id]} lists "
                             f"already (both serve {choice.serve_id}); list each model once")
        listed[choice.serve_id] = f"alternatives.{i}.model"
        models[alt.model] = choice

    catalog = load_catalog(hardware)
    gpus: dict[str, GPUSpec] = {}
    names = w.gpu_prices or {gpu.name: None for gpu in catalog}
    written: dict[str, str] = {}
    for raw, price in names.items():
        try:
            gpu = catalog.get(raw)
        except InputError as err:
            raise _keyed(f"gpus.{raw}", err) from None
        if gpu.name in written:  # the last price given would win silently
            raise InputError(f"gpus.{label(raw)}: the GPU {gpu.name} is listed already (as gpus.{label(written[gpu.name])}: "
                             "two names of one GPU); keep one")
        written[gpu.name] = raw
        gpus[gpu.name] = gpu if price is None else gpu.model_copy(update={"price_per_gpu_hour": price})

    given: dict[str, str] = {}  # GPU -> profile path, by any of the GPU's names
    for raw, path in w.profiles.items():
        try:
            name = catalog.get(raw).name
        except InputError as err:
            raise _keyed(f"profiles.{raw}", err) from None
        if name not in gpus:
            raise InputError(f"profiles.{raw}: not one of the candidate GPUs ({', '.join(gpus)})")
        if name in given:
            raise InputError(f"profiles.{raw}: the GPU {name} has a profile already (two names of one GPU); keep one")
        given[name] = path
    profiles = {}
    for name, gpu in gpus.items():
        path = given.get(name)
        try:
            profiles[name] = load_profile(gpu, path)
        except InputError as err:
            raise _keyed(f"profiles.{name}", err) from None

    try:
        accuracy = builtin_accuracy_table().with_overrides(w.accuracy.overrides)
    except InputError as err:
        raise _keyed("accuracy.overrides", err) from None

    stats = traffic_stats(w.traffic)
    max_len, max_len_basis = {}, {}
    for key, choice in models.items():
        # vLLM's limit is each checkpoint's own config's: the tightest of the weights the search may serve.
        served = min((o for o in choice.weights.values()), key=lambda o: o.spec.max_context)
        try:
            max_len[key], max_len_basis[key] = max_model_len_for(
                stats, served.spec.max_context, w.max_model_len,
                lambda tokens, o=served: longer_context_fix(o.spec, o.serve_id, tokens))
        except InputError as err:
            raise InputError(f"{err} ({key})") from None

    speculation = {}
    for i, option in enumerate(w.speculation):
        if option.method == "draft_model":
            try:  # an unknown draft model is an error of this key, not of every trial
                resolve_model(option.draft_model)
            except InputError as err:
                raise _keyed(f"speculation.{i}.draft_model", err) from None
        # A method no candidate model has (MTP without MTP layers, an EAGLE head of another model) is
        # an error of the workload; one that only some models have is a constraint of the search.
        problems = [speculation_problem(option.method, option.draft_model, c.spec) for c in models.values()]
        if all(problems):
            raise InputError(f"speculation.{i}: {problems[0]}")
        speculation[option.label] = SpeculationChoice(option.label, option.method, option.draft_model,
                                                      option.acceptance_rate)

    ctx = SpaceContext(
        models=models, gpus=gpus, accuracy=accuracy, max_drop_pct=w.accuracy.max_drop_pct,
        max_model_len=max_len, speculation=speculation, gpus_per_node=w.limits.gpus_per_node,
        max_gpus=w.limits.max_gpus, profiles=profiles,
        priority_classes=len({c.priority for c in w.traffic.classes or []}) > 1,
    )
    settings = dict(w.space)
    if "gpu" in settings:  # accept catalog aliases, as elsewhere
        settings["gpu"] = _canonical_gpus(settings["gpu"], catalog)
    return Problem(workload=w, space=SearchSpace(ctx, settings), stats=stats,
                   max_model_len_basis=max_len_basis)


def _canonical_gpus(setting, catalog):
    def one(name):
        if not isinstance(name, str):
            return name
        try:
            return catalog.get(name).name
        except InputError as err:
            raise _keyed("space.gpu", err) from None

    return [one(n) for n in setting] if isinstance(setting, list) else one(setting)
