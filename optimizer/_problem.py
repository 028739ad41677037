"""A workload resolved against the catalogs: models, priced GPUs, profiles, the search space.

Every name a user wrote is looked up here, so a bad one fails before the search starts, with an
error that names its key in the workload file.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..calibration.registry import load_profile
from ..costmodels.architectures import resolve_model
from ..costmodels.errors import InputError
from ..costmodels.hardware import GPUSpec, load_catalog
from ..costmodels.profile import PerformanceProfile
from ..costmodels.quantization import builtin_accuracy_table
from ..costmodels.speculation import speculation_problem
from ..search_spaces import ModelChoice, SearchSpace, SpaceContext, SpeculationChoice
from ._traffic import TrafficStats, max_model_len_for, traffic_stats
from .workload import Workload


@dataclass(frozen=True, eq=False)
class Problem:
    """What a study optimizes: the workload, its resolved context and search space."""

    workload: Workload
    space: SearchSpace
    stats: TrafficStats
    profiles: dict[str, PerformanceProfile] = field(default_factory=dict)

    @property
    def ctx(self) -> SpaceContext:
        return self.space.ctx

    def gpu(self, name: str) -> GPUSpec:
        return self.ctx.gpus[name]

    def profile(self, gpu: str) -> PerformanceProfile:
        return self.profiles[gpu]


def _keyed(key: str, err: InputError) -> InputError:
    return InputError(f"{key}: {err}")


def _model_choice(key: str, name: str, serve_id: str | None, drop: float, where: str) -> ModelChoice:
    try:
        resolved = resolve_model(name)
    except InputError as err:
        raise _keyed(where, err) from None
    # Serve the id the user wrote when it is one (org/name); a preset alias serves its base id.
    serve = serve_id or (name if "/" in name and not name.endswith(".json") else resolved.spec.name)
    return ModelChoice(key, resolved.spec, serve, resolved.quantization, drop)


def build_problem(workload: Workload, hardware: str | None = None) -> Problem:
    """Resolve a workload's names and build its search space; errors name the workload key."""
    w = workload
    models = {w.model: _model_choice(w.model, w.model, None, 0.0, "model")}
    for i, alt in enumerate(w.alternatives):
        if alt.accuracy_drop_pct is not None:
            drop = alt.accuracy_drop_pct
        else:
            drop = max(0.0, 100.0 * (1 - alt.accuracy_score / w.accuracy.model_score))
        if alt.model in models:
            raise InputError(f"alternatives.{i}.model: '{alt.model}' is listed twice")
        models[alt.model] = _model_choice(alt.model, alt.model, alt.checkpoint, drop, f"alternatives.{i}.model")

    catalog = load_catalog(hardware)
    gpus: dict[str, GPUSpec] = {}
    names = w.gpu_prices or {gpu.name: None for gpu in catalog}
    for raw, price in names.items():
        try:
            gpu = catalog.get(raw)
        except InputError as err:
            raise _keyed(f"gpus.{raw}", err) from None
        gpus[gpu.name] = gpu if price is None else gpu.model_copy(update={"price_per_gpu_hour": price})

    unknown_profiles = sorted(set(w.profiles) - set(names) - set(gpus))
    if unknown_profiles:
        raise InputError(f"profiles.{unknown_profiles[0]}: not one of the candidate GPUs ({', '.join(gpus)})")
    profiles = {}
    for name, gpu in gpus.items():
        path = next((p for g, p in w.profiles.items() if catalog.get(g).name == name), None)
        try:
            profiles[name] = load_profile(gpu, path)
        except InputError as err:
            raise _keyed(f"profiles.{name}", err) from None

    try:
        accuracy = builtin_accuracy_table().with_overrides(w.accuracy.overrides)
    except InputError as err:
        raise _keyed("accuracy.overrides", err) from None

    stats = traffic_stats(w.traffic)
    max_len = {}
    for key, choice in models.items():
        try:
            max_len[key] = max_model_len_for(stats, choice.spec.max_context, w.max_model_len)
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
        max_gpus=w.limits.max_gpus,
    )
    settings = dict(w.space)
    if "gpu" in settings:  # accept catalog aliases, as elsewhere
        settings["gpu"] = _canonical_gpus(settings["gpu"], catalog)
    return Problem(workload=w, space=SearchSpace(ctx, settings), stats=stats, profiles=profiles)


def _canonical_gpus(setting, catalog):
    def one(name):
        if not isinstance(name, str):
            return name
        try:
            return catalog.get(name).name
        except InputError as err:
            raise _keyed("space.gpu", err) from None

    return [one(n) for n in setting] if isinstance(setting, list) else one(setting)
