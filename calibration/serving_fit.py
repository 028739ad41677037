"""Fit vLLM's host-side costs to measured serving runs, and cross-validate them by groups left out.

Kernel microbenchmarks time the GPU; a served step also pays the engine on the CPU (scheduling,
input preparation, output processing; the V0 engine also detokenizes in its loop), and every request
pays the front end (HTTP, chat template, tokenization, the first token's way back). These are
vLLM's costs, not the GPU's, so one set serves every GPU profile:

- ``step_overhead_s`` + ``step_overhead_per_seq_s`` x running sequences: the V1 engine's CPU time
  per step (hidden behind the GPU step under async scheduling, vLLM >= 0.14);
- ``v0_step_overhead_s`` + ``v0_step_overhead_per_seq_s``: the V0 engine's (vLLM < 0.8, and
  pipeline parallelism in 0.8);
- ``request_overhead_s``: the front end's latency per request behind vLLM's API server, and
  ``dynamo_request_overhead_s`` behind Dynamo's front end (another HTTP stack and tokenizer, and a
  hop to the worker): each fitted on the runs that went through it.

Only dense-model runs fit them: servopt's fused-MoE kernel time has no kernel data behind it yet,
and a host cost fitted to MoE runs would absorb that kernel's error; MoE runs are scored, never fitted.

They are fitted in two stages with a clear attribution: the engine costs to the mean TPOT of the
runs (a decode step is GPU time plus these), then the front-end latency to their mean TTFT with
the engine costs held. Each stage minimises the soft-L1 loss of log errors (a run far off for
another reason, such as a benchmark artefact, weighs less than its square); the simulator is
linearised around the current parameters by finite differences and the fit iterates, so a fit
costs a few passes over the corpus rather than hundreds.

:func:`cross_validate` refits on every group's complement (leave one model, GPU or dtype out) and
predicts the group with its own refit: the errors it reports were not fitted on. The refits solve
the fit linearised around the all-runs fit (:class:`Linearization`), then simulate the held-out runs.

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
    >>> base = lambda gpu: load_profile(gpu)
    >>> measured = predictions(runs, base, truth)
    >>> runs = [r.__class__(**{**r.__dict__, "measured": {"mean_tpot_ms": m, "mean_ttft_ms": t}})
    ...         for r, m, t in zip(runs, measured["pred_mean_tpot_ms"], measured["pred_mean_ttft_ms"])]
    >>> fitted = fit_framework(runs, base, fit_front_end=False)
    >>> round(fitted["step_overhead_s"] * 1e3, 2), round(fitted["step_overhead_per_seq_s"] * 1e6, 1)
    (1.5, 20.0)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..costmodels.architectures import resolve_model
from ..costmodels.errors import InputError
from ..costmodels.hardware import GPUSpec, get_gpu
from ..costmodels.profile import PerformanceProfile
from ..costmodels.vllm_defaults import engine_generation, parse_vllm_version
from .corpus import MeasuredRun, predict_run

ProfileFor = Callable[[GPUSpec], PerformanceProfile]
ENGINE_PARAMS = {"v1": ("step_overhead_s", "step_overhead_per_seq_s"),
                 "v0": ("v0_step_overhead_s", "v0_step_overhead_per_seq_s")}
FRONT_ENDS = {"vllm": "request_overhead_s", "dynamo": "dynamo_request_overhead_s"}
# Physical bounds: a step's CPU time stays under 30 ms plus 1 ms per sequence, the front end under
# 50 ms; beyond that a parameter absorbs a modelling error rather than measuring a cost.
BOUNDS = {"step_overhead_s": 0.03, "step_overhead_per_seq_s": 1e-3, "v0_step_overhead_s": 0.03,
          "v0_step_overhead_per_seq_s": 1e-3, "request_overhead_s": 0.05, "dynamo_request_overhead_s": 0.05}
START = {"step_overhead_s": 1e-3, "step_overhead_per_seq_s": 2e-5, "v0_step_overhead_s": 2e-3,
         "v0_step_overhead_per_seq_s": 5e-5, "request_overhead_s": 5e-3, "dynamo_request_overhead_s": 5e-3}
# Residuals beyond ~10% count linearly (soft L1): benchmark artefacts should not steer the fit.
ROBUST_SCALE = 0.1
GAUSS_NEWTON_ROUNDS = 3


def host_cost_runs(runs: Sequence[MeasuredRun]) -> list[MeasuredRun]:
    """The runs the host costs are fitted on: simulated runs of dense models (module docstring)."""
    return [r for r in runs if not r.skip and resolve_model(r.model).spec.moe is None]


def engine_of(run: MeasuredRun) -> str:
    return engine_generation(parse_vllm_version(run.vllm_version), run.deployment.pp)


def predictions(runs: Sequence[MeasuredRun], profile_for: ProfileFor, params: dict[str, float]) -> pd.DataFrame:
    """One row per run: measured and predicted metrics (``measured_<metric>``, ``pred_<metric>``)."""
    profiles: dict[str, PerformanceProfile] = {}
    rows = []
    for run in runs:
        name = run.deployment.gpu
        if name not in profiles:
            profiles[name] = profile_for(get_gpu(name)).model_copy(update=params)
        failed = ""
        try:
            predicted = predict_run(run, profiles[name])
        except InputError as err:  # the simulation cannot finish the run (a thrashing KV cache): no prediction
            failed = str(err)
            predicted = {"saturated": 1.0, **{f"{stat}_{metric}_ms": math.nan for metric in ("ttft", "tpot", "itl")
                                              for stat in ("mean", "median", "p99")}}
        row = {"run_id": run.run_id, "failed": failed, "group": "/".join(run.group), "model": run.group[0], "gpu": run.gpu,
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


def _stage(runs: list[MeasuredRun], profile_for: ProfileFor, params: dict[str, float], names: list[str],
           metric: str, keep: Callable[[pd.DataFrame], np.ndarray]) -> dict[str, float]:
    """Fit ``names`` to ``metric`` over the runs ``keep`` selects, by Gauss-Newton on a linearisation."""
    for _ in range(GAUSS_NEWTON_ROUNDS):
        base = predictions(runs, profile_for, params)
        mask = keep(base) & np.isfinite(_log_errors(base, metric))
        if not mask.any():
            return params
        r0 = _log_errors(base, metric)[mask]
        jacobian = []
        for name in names:
            step = max(params[name] * 0.25, BOUNDS[name] * 1e-3)
            moved = predictions(runs, profile_for, {**params, name: params[name] + step})
            jacobian.append((_log_errors(moved, metric)[mask] - r0) / step)
        jacobian = np.stack(jacobian, axis=1)
        x0 = np.array([params[n] for n in names])
        scale = np.array([BOUNDS[n] for n in names])
        fit = least_squares(lambda z: r0 + jacobian @ (z * scale - x0), x0 / scale, bounds=(0.0, 1.0),
                            loss="soft_l1", f_scale=ROBUST_SCALE)
        new = fit.x * scale
        converged = np.all(np.abs(new - x0) <= 0.01 * np.maximum(np.abs(x0), scale * 1e-3))
        params = {**params, **dict(zip(names, map(float, new)))}
        if converged:
            break
    return params


def fit_framework(runs: Sequence[MeasuredRun], profile_for: ProfileFor, start: dict[str, float] | None = None,
                  fit_front_end: bool = True) -> dict[str, float]:
    """The host-side parameters that best explain ``runs`` (see the module docstring)."""
    runs = [r for r in runs if not r.skip]
    dense = host_cost_runs(runs)
    if not dense:
        raise InputError("no dense-model runs to fit the serving framework's costs to")
    params = {**START, **(start or {})}
    engines = {engine_of(r) for r in dense}
    frontends = {r.deployment.frontend for r in dense}
    # The front end's latency shifts when closed-loop clients return, so the engines' fit is
    # repeated once with the fitted front end.
    for _ in range(2 if fit_front_end else 1):
        for engine in ("v1", "v0"):
            if engine in engines:
                params = _stage(runs, profile_for, params, list(ENGINE_PARAMS[engine]), "mean_tpot_ms",
                                lambda frame, e=engine: (~frame["moe"] & (frame["engine"] == e)).to_numpy())
        for frontend, name in FRONT_ENDS.items() if fit_front_end else ():
            if frontend in frontends:
                params = _stage(runs, profile_for, params, [name], "mean_ttft_ms",
                                lambda frame, f=frontend: (~frame["moe"] & ~frame["saturated"]
                                                           & (frame["frontend"] == f)).to_numpy())
    if "v0" not in engines:
        params.update(v0_step_overhead_s=None, v0_step_overhead_per_seq_s=None)
    if "dynamo" not in frontends:
        params.update(dynamo_request_overhead_s=None)
    return params


class Linearization:
    """The corpus's predictions and their sensitivities to every parameter, at ``params``.

    Refitting on a subset of runs (a cross-validation fold) then solves the linearised problem
    instead of simulating again: from a fit on all runs, a fold's parameters move little.
    """

    def __init__(self, runs: Sequence[MeasuredRun], profile_for: ProfileFor, params: dict[str, float]):
        self.runs = [r for r in runs if not r.skip]
        self.profile_for = profile_for
        self.params = {k: v for k, v in params.items()}
        self.names = [n for n in (*ENGINE_PARAMS["v1"], *ENGINE_PARAMS["v0"], *FRONT_ENDS.values())
                      if self.params.get(n) is not None]
        self.base = predictions(self.runs, profile_for, self.params)
        # Only dense-model runs are fitted (host_cost_runs): the MoE runs' sensitivities are never used.
        dense = ~self.base["moe"].to_numpy()
        fitted_runs = [r for r, d in zip(self.runs, dense) if d]
        self.slopes: dict[str, dict[str, np.ndarray]] = {}
        for name in self.names:
            step = max(self.params[name] * 0.25, BOUNDS[name] * 1e-3)
            moved = predictions(fitted_runs, profile_for, {**self.params, name: self.params[name] + step})
            self.slopes[name] = {}
            for m in ("mean_tpot_ms", "mean_ttft_ms"):
                slope = np.full(len(self.runs), np.nan)
                slope[dense] = (_log_errors(moved, m) - _log_errors(self.base[dense].reset_index(drop=True), m)) / step
                self.slopes[name][m] = slope

    def _solve(self, names: list[str], metric: str, mask: np.ndarray, fixed: dict[str, float]) -> dict[str, float]:
        r0 = _log_errors(self.base, metric)
        for name, value in fixed.items():
            r0 = r0 + self.slopes[name][metric] * (value - self.params[name])
        mask = mask & np.isfinite(r0)
        if not mask.any() or not names:
            return {}
        jacobian = np.stack([self.slopes[n][metric][mask] for n in names], axis=1)
        x0 = np.array([self.params[n] for n in names])
        scale = np.array([BOUNDS[n] for n in names])
        fit = least_squares(lambda z: r0[mask] + jacobian @ (z * scale - x0), np.clip(x0 / scale, 0, 1),
                            bounds=(0.0, 1.0), loss="soft_l1", f_scale=ROBUST_SCALE)
        return dict(zip(names, map(float, fit.x * scale)))

    def refit(self, train: np.ndarray) -> dict[str, float]:
        """Parameters fitted on the runs ``train`` selects (the two stages of :func:`fit_framework`)."""
        params = dict(self.params)
        train = train & ~self.base["moe"].to_numpy()
        for engine in ("v1", "v0"):
            names = [n for n in ENGINE_PARAMS[engine] if n in self.names]
            mask = train & (self.base["engine"] == engine).to_numpy()
            params.update(self._solve(names, "mean_tpot_ms", mask, {}))
        if not (train & (self.base["engine"] == "v0").to_numpy()).any():
            params.update(v0_step_overhead_s=None, v0_step_overhead_per_seq_s=None)
        engine_moves = {n: params[n] for n in self.names if n not in FRONT_ENDS.values() and params[n] is not None}
        for frontend, name in FRONT_ENDS.items():
            mask = train & ~self.base["saturated"].to_numpy() & (self.base["frontend"] == frontend).to_numpy()
            if name in self.names and mask.any():
                params.update(self._solve([name], "mean_ttft_ms", mask, engine_moves))
            elif name in self.names:
                params[name] = None  # no run through this front end to fit it: the vLLM API server's serves
        return params


def cross_validate(linearization: Linearization, by: str) -> pd.DataFrame:
    """Predictions of every run with parameters fitted on the runs outside its ``by`` group.

    ``by`` is 'group' (model, GPU, dtype), 'model', 'gpu' or 'dtype'. A group whose complement has no
    V0 run takes the V1 engine's costs for its V0 runs.
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
