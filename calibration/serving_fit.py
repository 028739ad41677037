"""Learn the step formula's trained-physics coefficients from measured serving runs, and cross-validate
them by groups left out.

The kernel tables (fitted to microbenchmarks) are the basis functions of a step; a served step is
more than their sum. :data:`~servopt.costmodels.profile.SERVING_COEFFICIENTS` names what turns one
into the other, each with its physical meaning and unit:

- efficiency scales of the compute, memory and communication sides of every kernel (a forward pass
  runs kernels back to back at sustained clocks, with the caches shared: not as a microbenchmark
  times one kernel alone);
- GPU costs no kernel table measures, on the step's critical path: per step, per layer, per MoE
  layer and per scheduled sequence;
- the engine's CPU time per step and per sequence, for the V1 and V0 engines (hidden behind the GPU
  step under async scheduling);
- the front end's latency per request, behind vLLM's API server and behind Dynamo's front end.

They are fitted together to the mean TPOT and mean TTFT of the development corpus
(:mod:`.corpus`: dense and MoE runs), in log space with a soft-L1 loss (a run far off for a reason
the model does not have, such as a benchmark artefact, weighs less than its square), counting
each (model, GPU, dtype) group as one experiment (its runs' losses averaged: a group of
195 runs must not outvote one of 10), and with a prior on each coefficient (a scale near 1, a
GPU-side cost near 0, an engine's or a front end's near what such software spends, at the width
:data:`SERVING_COEFFICIENTS` states): where the runs do not tell two coefficients apart, the priors
keep them physical. TTFT residuals leave out runs the simulation saturates (a queue's length is
not a cost). The simulator is linearised around the current
coefficients by finite differences once, and the fit iterates (Gauss-Newton, the Jacobian corrected
by Broyden's update after each step), so a fit costs one corpus pass per coefficient and one per
round rather than hundreds.

:func:`cross_validate` refits on every group's complement (leave one (model, GPU, dtype) group,
model, GPU or dtype out) and predicts the group with its own refit: the errors it reports were not
fitted on. The refits solve the fit linearised around the all-runs fit (:class:`Linearization`),
then simulate the held-out runs.

Example (recover a known V1 overhead from two synthetic runs):
    >>> from servopt.calibration.corpus import MeasuredRun
    >>> from servopt.calibration.registry import load_profile
    >>> from servopt.calibration.silicon import silicon_run
    >>> from servopt.costmodels.hardware import get_gpu
    >>> truth = {"step_overhead_s": 1.5e-3, "step_overhead_per_seq_s": 20e-6, "request_overhead_s": 5e-3}
    >>> rows = [{"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
    ...          "isl": 256, "osl": 32, "tp_size": 1, "batch_size": c, "silicon_concurrency": c,
    ...          "backend_version": "0.12.0"} for c in (2, 32)]
    >>> runs = [MeasuredRun(f"r{i}", "doc", "meta-llama/Llama-3.1-8B-Instruct", "h100", "bf16", "0.12.0", "aiperf", {},
    ...                     silicon_run(row, "h100").deployment, silicon_run(row, "h100").traffic) for i, row in enumerate(rows)]
    >>> measured = predictions(runs, load_profile, truth)
    >>> runs = [r.__class__(**{**r.__dict__, "measured": {"mean_tpot_ms": m, "mean_ttft_ms": t}})
    ...         for r, m, t in zip(runs, measured["pred_mean_tpot_ms"], measured["pred_mean_ttft_ms"])]
    >>> fitted = fit_serving(runs, load_profile, start=shipped_params(), prior_weight=0.0,
    ...                      names=("step_overhead_s", "step_overhead_per_seq_s", "dynamo_request_overhead_s"))
    >>> round(fitted["step_overhead_s"] * 1e3, 2), round(fitted["step_overhead_per_seq_s"] * 1e6)
    (1.5, 20)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from ..costmodels.architectures import resolve_model
from ..costmodels.errors import InputError
from ..costmodels.hardware import GPUSpec, get_gpu
from ..costmodels.profile import SERVING_COEFFICIENTS, PerformanceProfile
from ..costmodels.engines.vllm import async_scheduling, engine_generation, parse_vllm_version
from .corpus import MeasuredRun, predict_run
from .registry import profile_origin, shipped_gpus, shipped_profile

ProfileFor = Callable[[GPUSpec], PerformanceProfile]
# Coefficients that exist only for runs of one engine generation or one front end: without such
# runs in a fit, they are not identified and the V1 engine's / vLLM API server's stand in (None).
FRONT_ENDS = {"vllm": "request_overhead_s", "dynamo": "dynamo_request_overhead_s"}
OPTIONAL = {"v0_step_overhead_s": ("engine", "v0"), "v0_step_overhead_per_seq_s": ("engine", "v0"),
            "async_step_overhead_s": ("engine", "v1-async"), "async_step_overhead_per_seq_s": ("engine", "v1-async"),
            "dynamo_request_overhead_s": ("frontend", "dynamo")}
# Coefficients fitted per shipped GPU fit (``name@gpu``: the kernels of each GPU's tables run served at
# their own share of what they run alone), where the corpus has runs on that GPU or on a GPU whose
# profile is transferred from it (registry.profile_origin); every other coefficient is one number.
PER_GPU = ("compute_scale", "memory_scale")
METRICS = ("mean_tpot_ms", "mean_ttft_ms")
# Residuals beyond ~10% count linearly (soft L1): benchmark artefacts should not steer the fit.
ROBUST_SCALE = 0.1
GAUSS_NEWTON_ROUNDS = 3
LINE_SEARCH = (1.0, 0.5, 0.25)
IRLS_ROUNDS = 30
START = {"step_overhead_s": 1e-3, "step_overhead_per_seq_s": 2e-5, "v0_step_overhead_s": 2e-3,
         "v0_step_overhead_per_seq_s": 5e-5, "request_overhead_s": 5e-3, "dynamo_request_overhead_s": 5e-3}


def coefficient_table(params: dict[str, float | None]) -> pd.DataFrame:
    """The coefficients with their unit and meaning (``None``: not identified, the default stands in;
    a GPU fit's own as ``name@gpu``)."""
    rows = []
    for name, info in SERVING_COEFFICIENTS.items():
        own = sorted(k for k in params if k.startswith(f"{name}@"))
        for key in own or [name]:
            rows.append({"coefficient": key, "value": params.get(key), "unit": info.unit, "meaning": info.meaning})
    return pd.DataFrame(rows)


def fitted_runs(runs: Sequence[MeasuredRun]) -> list[MeasuredRun]:
    """The runs the coefficients are fitted on: every simulated run, dense and MoE."""
    return [r for r in runs if not r.skip]


def engine_of(run: MeasuredRun) -> str:
    """The engine whose CPU costs a run pays: 'v0', 'v1', or 'v1-async' (V1 scheduling asynchronously)."""
    version = parse_vllm_version(run.vllm_version)
    engine = engine_generation(version, run.deployment.pp)
    return "v1-async" if engine == "v1" and async_scheduling(version, run.deployment.pp) else engine


def start_params(profile: PerformanceProfile) -> dict[str, float | None]:
    """The coefficients a profile carries now: where a fit starts."""
    return {name: getattr(profile, name) for name in SERVING_COEFFICIENTS}


def shipped_params() -> dict[str, float | None]:
    """The shipped coefficients: the shared ones (every shipped profile carries the same) and each
    shipped GPU fit's own :data:`PER_GPU` ones (``name@gpu``)."""
    profiles = {name: shipped_profile(name) for name in shipped_gpus()}
    params = start_params(profiles["h100"])
    for name, profile in profiles.items():
        params.update({f"{coefficient}@{name}": getattr(profile, coefficient) for coefficient in PER_GPU})
    return params


def base_name(name: str) -> str:
    """A coefficient's name without its GPU (``compute_scale@h200`` -> ``compute_scale``)."""
    return name.split("@")[0]


def params_for(params: dict[str, float | None], origin: str) -> dict[str, float | None]:
    """The profile fields of one GPU fit: the shared coefficients, then that fit's own (``name@origin``)."""
    shared = {k: v for k, v in params.items() if "@" not in k}
    own = {base_name(k): v for k, v in params.items() if k.endswith(f"@{origin}") and v is not None}
    return {**shared, **own}


def predictions(runs: Sequence[MeasuredRun], profile_for: ProfileFor, params: dict[str, float | None]) -> pd.DataFrame:
    """One row per run: measured and predicted metrics (``measured_<metric>``, ``pred_<metric>``)."""
    profiles: dict[str, PerformanceProfile] = {}
    rows = []
    for run in runs:
        name = run.deployment.gpu
        if name not in profiles:
            gpu = get_gpu(name)
            profiles[name] = profile_for(gpu).model_copy(update=params_for(params, profile_origin(gpu)))
        failed = ""
        try:
            predicted = predict_run(run, profiles[name])
        except InputError as err:  # the simulation cannot finish the run (a thrashing KV cache): no prediction
            failed = str(err)
            predicted = {"saturated": 1.0, "queue_share": math.nan, "mean_input_tokens": math.nan,
                         "mean_output_tokens": math.nan, "unloaded_ttft_ms": math.nan,
                         **{f"{stat}_{metric}_ms": math.nan for metric in ("ttft", "tpot", "itl")
                            for stat in ("mean", "median", "p99")}}
        row = {"run_id": run.run_id, "failed": failed, "group": "/".join(run.group), "model": run.group[0], "gpu": run.gpu,
               "origin": profile_origin(get_gpu(name)),
               "moe": resolve_model(run.model).spec.moe is not None,
               "dtype": run.dtype, "engine": engine_of(run), "frontend": run.deployment.frontend,
               "protocol": run.protocol,
               "saturated": bool(predicted.pop("saturated")), "calibrated": profiles[name].calibrated}
        row.update({f"measured_{k}": v for k, v in run.measured.items()})
        row.update({f"pred_{k}": v for k, v in predicted.items()})
        rows.append(row)
    return pd.DataFrame(rows)


def _log_errors(frame: pd.DataFrame, metric: str) -> np.ndarray:
    measured = frame.get(f"measured_{metric}", pd.Series(np.nan, index=frame.index)).to_numpy(float)
    return np.log(frame[f"pred_{metric}"].to_numpy(float) / measured)


def _residuals(frame: pd.DataFrame, train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fit's residuals (log errors of mean TPOT, then of mean TTFT, one per run) and their
    weights: 1 / sqrt(size of the run's group among the trained runs), 0 where a run is not trained,
    has no such measurement, or (TTFT) is saturated in the simulation."""
    groups = frame["group"].to_numpy()
    counts = pd.Series(groups[train]).value_counts()
    weight = np.where(train, 1.0 / np.sqrt(pd.Series(groups).map(counts).fillna(1.0).to_numpy(float)), 0.0)
    residuals, weights = [], []
    for metric in METRICS:
        r = _log_errors(frame, metric)
        w = weight.copy()
        if metric == "mean_ttft_ms":
            w[frame["saturated"].to_numpy(bool)] = 0.0
        w[~np.isfinite(r)] = 0.0
        residuals.append(np.where(np.isfinite(r), r, 0.0))
        weights.append(w)
    return np.concatenate(residuals), np.concatenate(weights)


def _step(name: str, value: float) -> float:
    """The finite-difference step of a coefficient."""
    info = SERVING_COEFFICIENTS[base_name(name)]
    return 0.05 * value if info.scale else max(0.25 * value, info.upper * 0.01)


def _prior(names: Sequence[str], x: np.ndarray, weight: float = 1.0) -> tuple[np.ndarray, np.ndarray, int]:
    """(rows of the prior's Jacobian, its residuals at ``x``, how many): a scale's log or a cost's
    value from its center, in units of its width (:class:`ServingCoefficient`), times
    ``sqrt(weight)`` (0: no prior)."""
    rows, values = [], []
    for i, name in enumerate(names):
        info = SERVING_COEFFICIENTS[base_name(name)]
        if info.prior_width is None:
            continue
        row = np.zeros(len(names))
        if info.scale:
            row[i] = 1.0 / (x[i] * info.prior_width)
            values.append(math.log(x[i] / info.prior_center) / info.prior_width)
        else:
            row[i] = 1.0 / info.prior_width
            values.append((x[i] - info.prior_center) / info.prior_width)
        rows.append(row)
    root = math.sqrt(weight)
    return root * np.array(rows).reshape(len(rows), len(names)), root * np.array(values), len(rows)


def solve_linearised(r0: np.ndarray, weights: np.ndarray, jacobian: np.ndarray, names: Sequence[str],
                     x0: np.ndarray, prior_weight: float = 1.0) -> np.ndarray:
    """The coefficients that minimise the soft-L1 loss of ``r0 + J (x - x0)`` (weighted) plus the
    priors' squares, within ``[0, upper]`` (scales within the profile's bounds), by iteratively
    reweighted bounded least squares."""
    upper = np.array([SERVING_COEFFICIENTS[base_name(n)].upper for n in names])
    lower = np.array([0.2 if SERVING_COEFFICIENTS[base_name(n)].scale else 0.0 for n in names])
    scale = upper  # solve for x / upper: every column of order one
    x = np.clip(x0, lower, upper)
    used = weights > 0
    r0, weights, jacobian = r0[used], weights[used], jacobian[used]
    for _ in range(IRLS_ROUNDS):
        r = r0 + jacobian @ (x - x0)
        # soft-L1 on r / f: rho(s) = 2 (sqrt(1 + s) - 1) with s = (r / f)^2, whose IRLS weight is
        # 1 / sqrt(1 + s). In units of f (a run's typical error), one run 10% off weighs as much as a
        # coefficient one prior width from its center.
        root = weights / ROBUST_SCALE * (1.0 + (r / ROBUST_SCALE) ** 2) ** -0.25
        prior_rows, prior_values, _ = _prior(names, x, prior_weight)
        a = np.vstack([jacobian * root[:, None], prior_rows]) * scale
        b = np.concatenate([-(r0 - jacobian @ x0) * root, -(prior_values - prior_rows @ x)])
        new = lsq_linear(a, b, bounds=(lower / scale, upper / scale)).x * scale
        if np.allclose(new, x, rtol=1e-6, atol=1e-12):
            return new
        x = new
    return x


def objective(residuals: np.ndarray, weights: np.ndarray, names: Sequence[str], x: np.ndarray,
              prior_weight: float = 1.0) -> float:
    """The loss :func:`solve_linearised` minimises, at residuals that were simulated, not linearised."""
    z = np.where(weights > 0, residuals / ROBUST_SCALE, 0.0)
    _, prior, _ = _prior(names, x, prior_weight)
    return float(np.sum(weights ** 2 * 2.0 * (np.sqrt(1.0 + z * z) - 1.0)) + np.sum(prior ** 2))


def _identified(frame: pd.DataFrame, train: np.ndarray, name: str) -> bool:
    """Whether the trained runs can say anything of an optional coefficient (:data:`OPTIONAL`) or of
    a GPU fit's own (``name@gpu``: runs on that fit's GPUs)."""
    if "@" in name:
        return bool((train & (frame["origin"] == name.split("@")[1]).to_numpy()).any())
    if name not in OPTIONAL:
        return True
    column, value = OPTIONAL[name]
    return bool((train & (frame[column] == value).to_numpy()).any())


def per_gpu_names(frame: pd.DataFrame, names: Sequence[str]) -> list[str]:
    """``names`` with each :data:`PER_GPU` coefficient split into one per GPU fit the runs use."""
    origins = sorted(frame["origin"].unique())
    return [split for name in names for split in ([f"{name}@{o}" for o in origins] if name in PER_GPU else [name])]


def _pooled(params: dict[str, float | None], identified: Sequence[str]) -> dict[str, float | None]:
    """A GPU fit's own scales that the runs do not identify take the geometric mean of the others'
    (a GPU no run measured is served like the GPUs that were)."""
    out = dict(params)
    for name in PER_GPU:
        own = [k for k in params if k.startswith(f"{name}@")]
        known = [params[k] for k in own if k in identified and params[k]]
        for k in own:
            if k not in identified:
                out[k] = float(np.exp(np.mean(np.log(known)))) if known else None
    return out


def jacobian(runs: Sequence[MeasuredRun], profile_for: ProfileFor, params: dict[str, float],
             names: Sequence[str], base: pd.DataFrame) -> np.ndarray:
    """d(residuals)/d(coefficient) by forward differences, one corpus pass per coefficient."""
    r0, _ = _residuals(base, np.ones(len(base), bool))
    columns = []
    for name in names:
        step = _step(name, params[name])
        moved = predictions(runs, profile_for, {**params, name: params[name] + step})
        r1, _ = _residuals(moved.assign(saturated=base["saturated"]), np.ones(len(base), bool))
        columns.append((r1 - r0) / step)
    return np.stack(columns, axis=1)


def fit_serving(runs: Sequence[MeasuredRun], profile_for: ProfileFor, start: dict[str, float | None] | None = None,
                names: Sequence[str] | None = None, rounds: int = GAUSS_NEWTON_ROUNDS,
                prior_weight: float = 1.0) -> dict[str, float | None]:
    """The coefficients that best explain ``runs`` (the module docstring); ``names`` limits what is
    fitted, ``prior_weight`` scales the priors (0: the runs alone, as when they are exact). The
    :data:`PER_GPU` coefficients come back per GPU fit the runs used, as ``name@gpu``."""
    runs = fitted_runs(runs)
    if not runs:
        raise InputError("no simulated runs to fit the serving coefficients to")
    params = {name: info.prior_center if info.prior_width is not None else START.get(name, 0.0)
              for name, info in SERVING_COEFFICIENTS.items()}
    params.update({k: v for k, v in (start or {}).items() if v is not None})
    names = list(names or SERVING_COEFFICIENTS)
    base = predictions(runs, profile_for, params)
    every = np.ones(len(base), bool)
    names = per_gpu_names(base, names)
    params.update({n: params.get(n, params[base_name(n)]) for n in names if "@" in n})
    split = {base_name(n) for n in names if "@" in n}
    params = {k: v for k, v in params.items() if k not in split}
    names = [n for n in names if _identified(base, every, n)]
    r0, weights = _residuals(base, every)
    x0 = np.array([params[n] for n in names])
    best = objective(r0, weights, names, x0, prior_weight)
    jac, fresh = jacobian(runs, profile_for, params, names, base), True
    for _ in range(rounds):
        new = solve_linearised(r0, weights, jac, names, x0, prior_weight)
        if np.all(np.abs(new - x0) <= 0.01 * np.maximum(np.abs(x0), [SERVING_COEFFICIENTS[base_name(n)].upper * 1e-3
                                                                     for n in names])):
            break
        # Closed loops make a run's latencies a rough function of the costs: where the full step
        # does worse than where it started, half of it (then a quarter) may not.
        for fraction in LINE_SEARCH:
            step = x0 + fraction * (new - x0)
            moved = predictions(runs, profile_for, {**params, **dict(zip(names, map(float, step)))})
            r1, w1 = _residuals(moved, every)
            score = objective(r1, w1, names, step, prior_weight)
            if score < best:
                break
        new = step
        if score >= best:
            if fresh:  # a step of the exact linearisation that does not help: as good as it gets
                break
            # Broyden's correction led astray: linearise afresh where we are.
            jac, fresh = jacobian(runs, profile_for, params, names, base), True
            continue
        # Broyden's update: the Jacobian corrected by the step just taken (one corpus pass a round,
        # not one per coefficient).
        dx, known = new - x0, (w1 > 0) & (weights > 0)
        jac = jac + np.outer(np.where(known, r1 - r0 - jac @ dx, 0.0), dx) / float(dx @ dx)
        fresh = False
        params.update(zip(names, map(float, new)))
        base, r0, weights, x0, best = moved, r1, w1, new, score
    for name in OPTIONAL:
        if not _identified(base, every, name):
            params[name] = None
    return params


class Linearization:
    """The corpus's predictions and their sensitivities to every coefficient, at ``params``.

    Refitting on a subset of runs (a cross-validation fold) then solves the linearised problem
    instead of simulating again: from a fit on all runs, a fold's coefficients move little.
    """

    def __init__(self, runs: Sequence[MeasuredRun], profile_for: ProfileFor, params: dict[str, float | None]):
        self.runs = fitted_runs(runs)
        self.profile_for = profile_for
        self.params = dict(params)
        split = {base_name(n) for n in self.params if "@" in n}
        self.names = [n for n in self.params if base_name(n) in SERVING_COEFFICIENTS and self.params[n] is not None
                      and n not in split]
        self.base = predictions(self.runs, profile_for, self.params)
        self.jacobian = jacobian(self.runs, profile_for, self.params, self.names, self.base)

    def refit(self, train: np.ndarray) -> dict[str, float | None]:
        """Coefficients fitted on the runs ``train`` selects (one Gauss-Newton step from the all-runs fit)."""
        r0, weights = _residuals(self.base, train)
        names = [n for n in self.names if _identified(self.base, train, n)]
        columns = [self.names.index(n) for n in names]
        x0 = np.array([self.params[n] for n in names])
        params = dict(self.params)
        if (weights > 0).any():
            params.update(zip(names, map(float, solve_linearised(r0, weights, self.jacobian[:, columns], names, x0))))
        for name in OPTIONAL:
            if not _identified(self.base, train, name):
                params[name] = None  # no run of that engine or front end to fit it: the default's stands in
        return _pooled(params, names)


def cross_validate(linearization: Linearization, by: str) -> pd.DataFrame:
    """Predictions of every run with coefficients fitted on the runs outside its ``by`` group.

    ``by`` is 'group' (model, GPU, dtype), 'model', 'gpu' or 'dtype'.
    """
    base = linearization.base
    parts = []
    for name in sorted(base[by].unique()):
        held = (base[by] == name).to_numpy()
        params = linearization.refit(~held)
        runs = [r for r, h in zip(linearization.runs, held) if h]
        frame = predictions(runs, linearization.profile_for, params)
        parts.append(frame.assign(held_out_by=by, held_out=name, **{f"fit_{k}": v for k, v in params.items()}))
    return pd.concat(parts, ignore_index=True)


def error_table(frame: pd.DataFrame, by: list[str], metrics: Sequence[str]) -> pd.DataFrame:
    """Median absolute and median signed % error of each metric per group, with the row counts."""
    out = []
    for keys, part in frame.groupby(by, dropna=False):
        record = dict(zip(by, keys if isinstance(keys, tuple) else (keys,)))
        for metric in metrics:
            measured = part.get(f"measured_{metric}")
            if measured is None:
                continue
            ok = measured.notna() & part[f"pred_{metric}"].notna()
            errors = 100 * (part.loc[ok, f"pred_{metric}"] / measured[ok] - 1)
            record[f"{metric}_rows"] = int(ok.sum())
            record[f"{metric}_abs"] = float(errors.abs().median()) if ok.any() else math.nan
            record[f"{metric}_signed"] = float(errors.median()) if ok.any() else math.nan
        out.append(record)
    return pd.DataFrame(out)
