"""Build servopt's error table from held-out predictions, and check its coverage on groups it never saw.

Input: the leave-one-group-out predictions of the development corpus (``serving_fit.cross_validate``
by 'group': every run predicted with the serving coefficients fitted without its (model, GPU, dtype)
group), and the KV-cache capacities of vLLM's start-up logs (``validate.MemoryValidator``: the
memory model has no coefficient fitted to them). Output: an
:class:`~servopt.costmodels.uncertainty.ErrorBars` table (module docstring there).

:func:`nested_coverage` is the honest check of the table: each group's runs are scored against a
table built from the *other* groups' errors only, so a group's own misses cannot widen its own
intervals.

Example:
    >>> import pandas as pd
    >>> errors = pd.DataFrame({"metric": ["mean_tpot"] * 40, "log_error": [0.01 * i - 0.2 for i in range(40)],
    ...                        "group": ["a", "b"] * 20, "calibrated": True, "gpu_class": "hopper",
    ...                        "family": "dense", "engine": "v1", "regime": "light"})
    >>> cell = build_error_bars(errors).cells["mean_tpot"]["calibrated=true,gpu_class=hopper,family=dense,engine=v1,regime=light"]
    >>> cell.runs, round(cell.low, 3), round(cell.high, 3)
    (40, -0.165, 0.155)
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..costmodels.architectures import resolve_model
from ..costmodels.errors import InputError
from ..costmodels.hardware import get_gpu
from ..costmodels.uncertainty import FALLBACK, QUANTILES, ErrorBars, ErrorCell, PredictionKind, gpu_class

# Corpus metrics (serving_fit.predictions' columns) and their names in the error table.
CORPUS_METRICS = {"mean_ttft_ms": "mean_ttft", "mean_tpot_ms": "mean_tpot", "mean_itl_ms": "mean_itl",
                  "p99_ttft_ms": "p99_ttft", "p99_tpot_ms": "p99_tpot", "p99_itl_ms": "p99_itl"}
KIND_COLUMNS = ("calibrated", "gpu_class", "family", "engine", "regime")


def held_out_errors(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, metric) predicted and measured: ``log(measured / predicted)`` and the
    prediction's kind (:class:`~servopt.costmodels.uncertainty.PredictionKind`)."""
    kinds = pd.DataFrame({
        "calibrated": frame["calibrated"].astype(bool),
        "gpu_class": frame["gpu"].map(lambda g: gpu_class(get_gpu(g).architecture)),
        "family": np.where(frame["moe"].astype(bool), "moe", "dense"),
        "engine": frame["engine"].replace({"v1-async": "v1"}),  # the error table keeps V0 and V1 apart
        "regime": [PredictionKind.regime_of(q, s) for q, s in zip(frame["pred_queue_share"], frame["saturated"])],
    }, index=frame.index)
    parts = []
    for column, metric in CORPUS_METRICS.items():
        if f"measured_{column}" not in frame:
            continue
        measured, predicted = frame[f"measured_{column}"].astype(float), frame[f"pred_{column}"].astype(float)
        ok = (measured > 0) & (predicted > 0)
        parts.append(kinds[ok].assign(run_id=frame.loc[ok, "run_id"], group=frame.loc[ok, "group"], metric=metric,
                                      log_error=np.log(measured[ok] / predicted[ok])))
    return pd.concat(parts, ignore_index=True)


def memory_errors(predictions: pd.DataFrame) -> pd.DataFrame:
    """KV-cache capacity errors of ``MemoryValidator.predict`` rows (the whole-budget prediction)."""
    rows = []
    for row in predictions.itertuples():
        measured, predicted = getattr(row, "measured_kv_cache_tokens"), getattr(row, "pred_kv_cache_tokens")
        if not (measured > 0 and predicted > 0):
            continue
        try:
            gpu = get_gpu(row.gpu)
            moe = resolve_model(row.model).spec.moe is not None
        except (InputError, AttributeError):
            continue
        rows.append({"calibrated": bool(row.calibrated), "gpu_class": gpu_class(gpu.architecture),
                     "family": "moe" if moe else "dense", "engine": "v1", "regime": "light", "run_id": str(row.id),
                     "group": f"{row.model}/{row.gpu}", "metric": "kv_capacity",
                     "log_error": math.log(measured / predicted)})
    return pd.DataFrame(rows)


def group_quantiles(rows: pd.DataFrame) -> tuple[float, float]:
    """The :data:`QUANTILES` of ``rows``' log errors with every group weighing the same: an interval
    speaks for a (model, GPU, dtype) group it has not seen, whose bias is one draw among groups', so a
    group of 195 runs must not set it for one of 10 (the fit weighs groups for the same reason).

    >>> rows = pd.DataFrame({"log_error": [0.0] * 8 + [1.0, 1.0], "group": ["big"] * 8 + ["small"] * 2})
    >>> [round(q, 2) for q in group_quantiles(rows)]
    [0.0, 1.0]
    """
    errors = rows["log_error"].to_numpy(float)
    weights = 1.0 / rows.groupby("group")["log_error"].transform("size").to_numpy(float)
    order = np.argsort(errors, kind="stable")
    errors, weights = errors[order], weights[order]
    # Each value stands at the middle of its weight (the weighted form of the 'hazen' quantile).
    position = (np.cumsum(weights) - weights / 2) / weights.sum()
    return tuple(float(np.interp(q, position, errors)) for q in QUANTILES)


def build_error_bars(errors: pd.DataFrame, source: str = "") -> ErrorBars:
    """The table of every metric's cells at every fallback level (cells of any size are written;
    :meth:`ErrorBars.cell` skips the small ones)."""
    cells: dict[str, dict[str, ErrorCell]] = {}
    for metric, part in errors.groupby("metric"):
        table = cells.setdefault(str(metric), {})
        for dimensions in FALLBACK:
            groups = part.groupby(list(dimensions)) if dimensions else [((), part)]
            for values, rows in groups:
                values = values if isinstance(values, tuple) else (values,)
                kind = dict(zip(dimensions, values))
                name = ",".join(f"{d}={str(kind[d]).lower()}" for d in dimensions) or "*"
                low, high = group_quantiles(rows)
                table[name] = ErrorCell(low=float(low), high=float(high), runs=len(rows),
                                        groups=int(rows["group"].nunique()))
    return ErrorBars(source=source, cells=cells)


def _kind(row) -> PredictionKind:
    return PredictionKind(bool(row.calibrated), row.gpu_class, row.family, row.engine, row.regime)


def nested_coverage(errors: pd.DataFrame) -> pd.DataFrame:
    """Each (run, metric) scored against a table built without its group: whether its measured
    value lies inside the stated interval (nan where the other groups give no cell)."""
    out = []
    for group, held in errors.groupby("group"):
        bars = build_error_bars(errors[errors["group"] != group])
        for row in held.itertuples():
            found = bars.cell(row.metric, _kind(row))
            inside = math.nan if found is None else float(found[1].low <= row.log_error <= found[1].high)
            out.append({"group": group, "metric": row.metric, "run_id": row.run_id, "regime": row.regime,
                        "family": row.family, "calibrated": row.calibrated, "inside": inside,
                        "cell": "" if found is None else found[0]})
    return pd.DataFrame(out)
