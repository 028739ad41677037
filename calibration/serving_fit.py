"""Fit the serving framework's CPU-side step costs end to end, on measured closed-loop runs.

Kernel microbenchmarks time the GPU; a served step also pays the framework on the CPU (vLLM's
scheduler, input preparation and output processing per step and per running request; no async
scheduling before vLLM 0.14). Two profile parameters stand for these, ``step_overhead_s`` and
``step_overhead_per_seq_s``; they are fitted to mean TPOT (a decode step's time is mostly GPU plus
these two terms) on rows of the silicon layout (:mod:`.silicon` says how each row is simulated),
minimising the sum of squared log errors (bounded least squares). The caller chooses the training
rows and reports the others as held out (``scripts/fit_shipped_profiles.py``: fit on ISL 1024, hold
out ISL 4096).

The profile's front-end latency (``request_overhead_s``: HTTP, chat template and tokenization, the
hops to the engine, the first token's way back) is taken as given, not fitted: on these rows TTFT
barely depends on it. Simulated as aiperf ran them, a closed-loop client's next request misses the
step that starts as its last one ends for any latency from 1 ms up to one decode step (8 ms at TP8),
so mean TTFT moves only by the latency itself; past a decode step the identical clients regroup and
TTFT jumps (``benchmarks/bench_e2e_accuracy.py`` prints the scan). The rows bound the latency to
that range without pinning it: a least-squares fit lands wherever it starts, or at a bound when
the rows it is given are over-predicted for other reasons.

Example (a cheap run: one tiny row, few evaluations):
    >>> import pandas as pd
    >>> from servopt.calibration.registry import load_profile
    >>> from servopt.costmodels.hardware import get_gpu
    >>> row = {"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "mode": "agg",
    ...        "isl": 256, "osl": 16, "tp_size": 1, "batch_size": 2, "silicon_concurrency": 2,
    ...        "silicon_ttft_ms": 30.0, "silicon_tpot_ms": 8.0}
    >>> fit = fit_serving_overheads(pd.DataFrame([row]), load_profile(get_gpu("h100")), max_evaluations=3)
    >>> list(fit.report.columns)[:3], fit.profile.step_overhead_s > 0
    (['metric', 'rows', 'median_abs_pct'], True)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..costmodels.errors import InputError
from ..costmodels.profile import PerformanceProfile
from .fit import abs_pct_error
from .validate import E2EValidator

# Bounds of the search: a step costs at most 20 ms plus 1 ms per sequence on the CPU; anything larger
# is not an overhead but a modelling error.
MAX_STEP_OVERHEAD_S = 0.02
MAX_STEP_OVERHEAD_PER_SEQ_S = 1e-3
# Finite-difference step of the Jacobian, relative: the simulation is piecewise smooth in the
# overheads (a step more or less in a chunk), so a wide step sees the trend, not the kinks.
RELATIVE_DIFF_STEP = 0.05
UNITS = np.array([1e-3, 1e-6])  # the search runs in ms and us per sequence


@dataclass(frozen=True)
class ServingFit:
    """The profile with fitted overheads, and its errors per metric on the rows it was fitted to."""

    profile: PerformanceProfile
    report: pd.DataFrame


def _predict(rows: pd.DataFrame, profile: PerformanceProfile) -> pd.DataFrame:
    predictions = E2EValidator(lambda gpu: profile).predict(rows)
    failed = predictions[predictions["reason"] != ""]
    if len(failed):
        raise InputError(f"{len(failed)} fit row(s) cannot be simulated: {failed['reason'].iloc[0]}")
    return predictions


def _log_errors(predictions: pd.DataFrame, metric: str) -> np.ndarray:
    return np.log(predictions[f"pred_{metric}"].to_numpy(float) / predictions[f"measured_{metric}"].to_numpy(float))


def error_report(predictions: pd.DataFrame) -> pd.DataFrame:
    """Median, p90 and median signed % error of mean TTFT and TPOT."""
    parts = []
    for metric in ("ttft_ms", "tpot_ms"):
        predicted, measured = predictions[f"pred_{metric}"], predictions[f"measured_{metric}"]
        signed = 100 * (predicted / measured - 1)
        errors = abs_pct_error(predicted, measured)
        parts.append({"metric": metric, "rows": len(errors), "median_abs_pct": float(np.median(errors)),
                      "p90_abs_pct": float(np.percentile(errors, 90)), "median_signed_pct": float(np.median(signed))})
    return pd.DataFrame(parts)


def fit_serving_overheads(rows: pd.DataFrame, profile: PerformanceProfile, max_evaluations: int = 40) -> ServingFit:
    """Fit the step overheads to the mean TPOT of ``rows`` (the profile's front-end latency is kept).

    A bounded least-squares fit of the log errors (trust region, finite differences).
    """
    if rows.empty:
        raise InputError("no rows to fit the serving overheads to")

    def with_overheads(scaled: np.ndarray) -> PerformanceProfile:
        fixed, per_seq = np.asarray(scaled, dtype=float) * UNITS
        return profile.model_copy(update={"step_overhead_s": float(fixed), "step_overhead_per_seq_s": float(per_seq)})

    upper = np.array([MAX_STEP_OVERHEAD_S, MAX_STEP_OVERHEAD_PER_SEQ_S]) / UNITS
    start = np.array([profile.step_overhead_s, profile.step_overhead_per_seq_s]) / UNITS
    start = np.clip(start, 0.1, upper)  # a zero start gives the relative finite differences nothing to step by
    steps = least_squares(lambda v: _log_errors(_predict(rows, with_overheads(v)), "tpot_ms"), start,
                          bounds=(0.0, upper), diff_step=RELATIVE_DIFF_STEP, max_nfev=max_evaluations)
    fitted = with_overheads(np.round(steps.x, 4))
    return ServingFit(fitted, error_report(_predict(rows, fitted)))
