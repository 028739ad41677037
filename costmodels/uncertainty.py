"""Error bars: every predicted figure with the interval its kind of prediction held on runs the fit never saw.

A prediction's error is not a constant: servopt predicts a light-load TPOT of a dense model on a
measured GPU far better than a loaded TTFT of an MoE model on a GPU whose kernels were transferred
from another. So the interval of a figure comes from the held-out errors of its *kind*:

- the metric (mean or P99 of TTFT, TPOT, ITL; the KV cache's capacity);
- the GPU: calibrated (its kernels measured) or UNCALIBRATED (efficiencies of a GPU of the same
  generation on its datasheet), and its class (Hopper, Blackwell, Ampere, Ada);
- the model family (dense or MoE) and the engine generation (vLLM's V0 or V1);
- the load regime: light (most of the P99 TTFT is the request's own work) or loaded (queueing).

``scripts/fit_error_bars.py`` writes the table (``data/error_bars.json``) from the predictions of
``benchmarks/bench_e2e_accuracy.py``'s leave-one-group-out cross-validation: each run predicted with
coefficients fitted without its (model, GPU, dtype) group. A cell holds the 10th and 90th percentiles
of ``log(measured / predicted)`` over its runs, so ``predicted x exp(percentile)`` bounds an 80%
interval; a cell with fewer than :data:`MIN_RUNS` runs or :data:`MIN_GROUPS` groups gives way to a coarser one (the regime, then
the engine, the GPU class, the family, are dropped in that order). The benchmark checks the coverage
on groups left out of the table too (nested: a group's intervals come from the other groups' errors).

Figures the corpus does not measure directly take theirs from what makes them up, as stated by
:meth:`ErrorBars.interval`: an end-to-end latency from its TTFT and TPOT intervals (taken as moving
together: the wider, safer bound), a throughput at a rate the deployment keeps up with is the
offered rate (no error), otherwise it moves inversely with the end-to-end latency.

Example:
    >>> bars = shipped_error_bars()
    >>> kind = PredictionKind(calibrated=True, gpu_class="hopper", family="dense", engine="v1", regime="light")
    >>> low, high = bars.interval("mean_tpot", 0.020, kind)
    >>> low < 0.020 < high
    True
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import Field

from .errors import Spec

LEVEL = 0.8
QUANTILES = (0.1, 0.9)
# Fewer runs than this cannot place a 10th and a 90th percentile: the cell gives way to a coarser one.
# The coarsest cell (every kind) stands with fewer (its percentiles rounded to the nearest runs), and
# a metric with fewer still has no interval.
MIN_RUNS = 20
MIN_RUNS_ALL = 10
# An interval speaks for a (model, GPU, dtype) group the table has not seen: fewer groups than this
# show one or two biases, not how far a new group's may lie, so the cell gives way to a coarser one.
MIN_GROUPS = 3
METRICS = ("mean_ttft", "mean_tpot", "mean_itl", "p99_ttft", "p99_tpot", "p99_itl", "kv_capacity")
# Below this share of its P99 TTFT spent queueing, a prediction is 'light'.
LOADED_QUEUE_SHARE = 0.5
GPU_CLASSES = {"hopper": "hopper", "blackwell": "blackwell", "ampere": "ampere", "ada": "ada"}
_DIMENSIONS = ("calibrated", "gpu_class", "family", "engine", "regime")
# Coarser cells, in the order the table falls back to them: the dimensions each keeps.
FALLBACK = (
    _DIMENSIONS,
    ("calibrated", "gpu_class", "family", "regime"),
    ("calibrated", "family", "regime"),
    ("calibrated", "family"),
    ("calibrated",),
    (),
)


@dataclass(frozen=True)
class PredictionKind:
    """What kind of prediction a figure is (the cells of the error table)."""

    calibrated: bool
    gpu_class: str
    family: Literal["dense", "moe"]
    engine: Literal["v0", "v1"]
    regime: Literal["light", "loaded"]

    @staticmethod
    def regime_of(queue_share_p99_ttft: float, saturated: bool = False) -> str:
        return "loaded" if saturated or not queue_share_p99_ttft < LOADED_QUEUE_SHARE else "light"

    def key(self, dimensions: tuple[str, ...]) -> str:
        """The cell's name: ``dimension=value`` pairs of the dimensions kept, '*' for all."""
        return ",".join(f"{d}={str(getattr(self, d)).lower()}" for d in dimensions) or "*"


class ErrorCell(Spec):
    """The held-out errors of one kind: percentiles of log(measured / predicted), and how many runs."""

    low: float = Field(ge=-20, le=20, description="10th percentile of log(measured / predicted)")
    high: float = Field(ge=-20, le=20, description="90th percentile of log(measured / predicted)")
    runs: int = Field(ge=1)
    groups: int = Field(default=1, ge=1, description="(model, GPU, dtype) groups the runs come from")


class ErrorBars(Spec):
    """The shipped error table: metric -> cell name -> :class:`ErrorCell` (module docstring)."""

    level: float = Field(default=LEVEL, gt=0, lt=1)
    source: str = ""
    cells: dict[str, dict[str, ErrorCell]] = Field(default_factory=dict)

    def cell(self, metric: str, kind: PredictionKind) -> tuple[str, ErrorCell] | None:
        """The finest cell of ``metric`` with enough runs for ``kind`` (None: nothing measured)."""
        table = self.cells.get(metric, {})
        for dimensions in FALLBACK:
            cell = table.get(kind.key(dimensions))
            if cell is not None and cell.runs >= (MIN_RUNS if dimensions else MIN_RUNS_ALL) and (
                    cell.groups >= MIN_GROUPS or not dimensions):
                return kind.key(dimensions), cell
        return None

    def interval(self, metric: str, value: float, kind: PredictionKind) -> tuple[float, float]:
        """The :data:`LEVEL` interval of a predicted ``value`` of ``metric`` (nan, nan when no run
        measured such a figure). ``mean_e2e`` / ``p99_e2e`` are not here: see :meth:`e2e_interval`."""
        found = self.cell(metric, kind)
        if found is None or not math.isfinite(value):
            return math.nan, math.nan
        cell = found[1]
        return value * math.exp(cell.low), value * math.exp(cell.high)

    def e2e_interval(self, stat: str, ttft_s: float, tpot_s: float, e2e_s: float, kind: PredictionKind) -> tuple[float, float]:
        """An end-to-end latency's interval from its parts (the corpus measures no end-to-end figure):
        ``e2e = TTFT + n x TPOT``, each part at its own interval's bound, the two taken as moving together."""
        ttft_low, ttft_high = self.interval(f"{stat}_ttft", ttft_s, kind)
        tpot_low, tpot_high = self.interval(f"{stat}_tpot", tpot_s, kind)
        if not all(math.isfinite(v) for v in (ttft_low, ttft_high, tpot_low, tpot_high)) or not tpot_s > 0:
            return math.nan, math.nan
        decode_s = max(e2e_s - ttft_s, 0.0)
        return ttft_low + decode_s * tpot_low / tpot_s, ttft_high + decode_s * tpot_high / tpot_s


def gpu_class(architecture: str) -> str:
    """The error table's GPU class of a catalog architecture (other architectures: 'other')."""
    return GPU_CLASSES.get(str(architecture).lower(), "other")


@lru_cache(maxsize=1)
def shipped_error_bars() -> ErrorBars:
    """The error table shipped with servopt (written by scripts/fit_error_bars.py)."""
    text = resources.files(__package__).joinpath("data/error_bars.json").read_text()
    return ErrorBars.model_validate(json.loads(text))


# The figures of a prediction that carry an interval: (summary field, statistic) -> interval name.
SUMMARY_FIGURES = {(metric, stat): f"{metric}_{stat}" for metric in ("ttft", "tpot", "itl", "e2e")
                   for stat in ("mean", "p99")}


def prediction_kind(*, calibrated: bool, architecture: str, moe: bool, engine: str, queue_share_p99_ttft: float,
                    saturated: bool) -> PredictionKind:
    """The kind of a prediction from what a compiled deployment and its summary state."""
    return PredictionKind(**error_kind(calibrated, architecture, moe, engine),
                          regime=PredictionKind.regime_of(queue_share_p99_ttft, saturated))


def error_kind(calibrated: bool, architecture: str, moe: bool, engine: str) -> dict[str, object]:
    """What a deployment's kind of prediction is before its load is known (a trial record keeps it;
    :func:`kind_under` adds the regime of a summary)."""
    return {"calibrated": calibrated, "gpu_class": gpu_class(architecture), "family": "moe" if moe else "dense",
            "engine": "v0" if engine == "v0" else "v1"}


def kind_under(kind: dict[str, object], summary: dict) -> PredictionKind:
    """A recorded :func:`error_kind` under the load of a summary (``ServingSummary.to_dict``)."""
    share = summary.get("queueing_share_p99_ttft")
    return PredictionKind(**kind, regime=PredictionKind.regime_of(math.nan if share is None else share,
                                                                  bool(summary.get("saturated"))))


def summary_intervals(summary, kind: PredictionKind, open_loop: bool = True,
                      bars: ErrorBars | None = None) -> dict[str, tuple[float, float]]:
    """The :data:`LEVEL` interval of every mean and P99 latency of a
    :class:`~servopt.costmodels.serving.metrics.ServingSummary` (seconds) and of its throughput
    (requests/s): ``ttft_mean``, ``ttft_p99``, ... ``e2e_p99``, ``requests_per_s``.

    A throughput at an open-loop rate the deployment keeps up with is that rate, known exactly;
    otherwise (closed loop, or saturated) requests finish as fast as their end-to-end latency lets
    them, so its interval is the mean end-to-end interval, inverted.
    """
    bars = bars or shipped_error_bars()
    out: dict[str, tuple[float, float]] = {}
    for (metric, stat), name in SUMMARY_FIGURES.items():
        value = getattr(getattr(summary, f"{metric}_s"), stat)
        if metric == "e2e":
            out[name] = bars.e2e_interval(stat, getattr(summary.ttft_s, stat), getattr(summary.tpot_s, stat), value, kind)
        else:
            out[name] = bars.interval(f"{stat}_{metric}", value, kind)
    rate = summary.requests_per_s
    if open_loop and not summary.saturated:
        out["requests_per_s"] = (rate, rate)
    else:
        low, high = out["e2e_mean"]
        mean = summary.e2e_s.mean
        out["requests_per_s"] = ((rate * mean / high, rate * mean / low) if low > 0 and math.isfinite(high)
                                 else (math.nan, math.nan))
    return out


def straddles(interval: tuple[float, float], target: float) -> bool:
    """Whether a predicted figure's interval holds its target: the SLO verdict is a coin flip."""
    low, high = interval
    return math.isfinite(low) and math.isfinite(high) and low <= target <= high
