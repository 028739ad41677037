"""Latency distributions, throughput, goodput and saturation from a simulated run.

Per request: TTFT = first token - arrival; TPOT = (finish - first token) / (output tokens - 1) (as
``vllm bench serve``, requests with one output token have none); end-to-end = finish - arrival. ITL
pools every token gap of every request: a decode's gap is the duration of the step that produced it,
so the ITL distribution is the step-duration distribution weighted by the decodes in each step, plus
the gaps across preemptions and P/D hand-offs.

With tenant classes, each class gets the same figures over its own requests (:class:`ClassSummary`):
its ITL pools the token gaps of the steps weighted by that class's decodes in each, and its goodput
counts the requests within the class's own SLO.

The P99 confidence intervals are batch means: the measured requests (in arrival order) or steps (in
time order) are cut into ``BATCHES`` consecutive batches, and the spread of the batches' P99s gives a
Student-t interval that accounts for the autocorrelation of queueing delays.

Example:
    >>> stats = LatencyStats.of(np.arange(1, 101, dtype=float))
    >>> stats.to_dict()["p99"]
    99.01
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .engine import RECORD_FIELDS, Engine, record_rows
from .requests import RequestTable
from .slo import SLO

BATCHES = 10
T_975_9DOF = 2.262  # Student t, 97.5% quantile, BATCHES - 1 degrees of freedom
# A run is "saturated" when the queueing delay of arriving requests keeps growing (by more than this
# fraction of elapsed time) and fewer requests finish than arrive.
SATURATION_WAIT_GROWTH = 0.02
SATURATION_SERVED_SHARE = 0.98
METRICS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class LatencyStats:
    """Mean and percentiles of one latency, in seconds."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray, weights: np.ndarray | None = None, order: np.ndarray | None = None) -> LatencyStats:
        """The statistics of ``values`` (weighted by ``weights``; ``order``: their stable sort, if known)."""
        values = np.asarray(values, dtype=float)
        if weights is not None:
            return cls(float(np.average(values, weights=weights)),
                       *weighted_quantiles(values, weights, (0.5, 0.9, 0.99), order))
        values = values[np.isfinite(values)]
        if not len(values):
            return cls(math.nan, math.nan, math.nan, math.nan)
        return cls(float(values.mean()), *(float(v) for v in np.percentile(values, (50, 90, 99))))

    def to_dict(self) -> dict[str, float]:
        return {"mean": self.mean, "p50": self.p50, "p90": self.p90, "p99": self.p99}


@dataclass(frozen=True)
class LatencyFigures:
    """The four latency distributions and their P99 intervals, of all requests or of one class."""

    ttft_s: LatencyStats
    tpot_s: LatencyStats
    itl_s: LatencyStats
    e2e_s: LatencyStats
    p99_ci_s: dict[str, tuple[float, float]]

    def latency_dict(self) -> dict:
        return {"ttft_s": self.ttft_s.to_dict(), "tpot_s": self.tpot_s.to_dict(), "itl_s": self.itl_s.to_dict(),
                "e2e_s": self.e2e_s.to_dict(), "p99_ci_s": {k: list(v) for k, v in self.p99_ci_s.items()}}


@dataclass(frozen=True)
class ClassSummary(LatencyFigures):
    """One tenant class's figures (see the module docstring); ``to_dict`` is JSON-ready."""

    name: str
    priority: int
    share: float
    requests_per_s: float
    goodput_requests_per_s: float
    slo: dict[str, float]
    slo_attainment: float | None
    slo_met: bool | None
    num_measured: int
    preemptions: int

    def to_dict(self) -> dict:
        """Every field; ``goodput`` repeats ``goodput_requests_per_s`` under the name that workloads'
        tooling reads per class (``classes.<name>.goodput``)."""
        return {
            "priority": self.priority, "share": self.share, **self.latency_dict(),
            "requests_per_s": self.requests_per_s, "goodput_requests_per_s": self.goodput_requests_per_s,
            "goodput": self.goodput_requests_per_s,
            "slo": self.slo, "slo_attainment": self.slo_attainment, "slo_met": self.slo_met,
            "num_measured": self.num_measured, "preemptions": self.preemptions,
        }


@dataclass(frozen=True)
class ServingSummary(LatencyFigures):
    """Everything a prediction reports (simulated or analytic); ``to_dict`` is JSON-ready."""

    method: str
    requests_per_s: float
    input_tokens_per_s: float
    output_tokens_per_s: float
    goodput_requests_per_s: float
    slo_attainment: float | None
    slo_met: bool | None
    kv_utilization: float
    mean_batch_size: float
    compute_bound_share: float
    preemptions: int
    saturated: bool
    saturation_reason: str
    num_requests: int
    num_measured: int
    warmup_excluded: int
    queueing_share_p99_ttft: float
    notes: tuple[str, ...] = field(default_factory=tuple)
    classes: tuple[ClassSummary, ...] = ()

    def to_dict(self) -> dict:
        """Every field; ``classes`` (name -> :meth:`ClassSummary.to_dict`) only for traffic with classes."""
        return {
            "method": self.method,
            **self.latency_dict(),
            "requests_per_s": self.requests_per_s,
            "input_tokens_per_s": self.input_tokens_per_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "goodput_requests_per_s": self.goodput_requests_per_s,
            "slo_attainment": self.slo_attainment,
            "slo_met": self.slo_met,
            "kv_utilization": self.kv_utilization,
            "mean_batch_size": self.mean_batch_size,
            "compute_bound_share": self.compute_bound_share,
            "preemptions": self.preemptions,
            "saturated": self.saturated,
            "saturation_reason": self.saturation_reason,
            "num_requests": self.num_requests,
            "num_measured": self.num_measured,
            "warmup_excluded": self.warmup_excluded,
            "queueing_share_p99_ttft": self.queueing_share_p99_ttft,
            "notes": list(self.notes),
            **({"classes": {c.name: c.to_dict() for c in self.classes}} if self.classes else {}),
        }

    def p99_ci_relative_half_width(self, metric: str) -> float:
        """Half the P99 confidence interval over the P99 (inf when unknown)."""
        low, high = self.p99_ci_s.get(metric, (math.nan, math.nan))
        p99 = getattr(self, f"{metric}_s").p99
        if not (math.isfinite(low) and math.isfinite(high)) or not p99 > 0:
            return math.inf
        return (high - low) / 2 / p99


def weighted_quantiles(values: np.ndarray, weights: np.ndarray, qs, order: np.ndarray | None = None) -> list[float]:
    """Quantiles of a weighted sample (the smallest value whose cumulative weight reaches q); ``order``:
    ``np.argsort(values, kind="stable")`` when the caller has it."""
    if not len(values) or weights.sum() <= 0:
        return [math.nan] * len(qs)
    if order is None:
        order = np.argsort(values, kind="stable")
    return _sorted_quantiles(values[order], weights[order], qs)


def _sorted_quantiles(values: np.ndarray, weights: np.ndarray, qs) -> list[float]:
    """:func:`weighted_quantiles` of values already in (stable) sorted order."""
    cumulative = np.cumsum(weights)
    index = np.searchsorted(cumulative, np.asarray(qs) * cumulative[-1])
    return [float(v) for v in values[np.minimum(index, len(values) - 1)]]


def _ci(samples: list[float], center: float) -> tuple[float, float]:
    """Batch-means interval around the whole sample's P99."""
    values = np.asarray([s for s in samples if math.isfinite(s)])
    if len(values) < 3 or not math.isfinite(center):
        return math.nan, math.nan
    half = T_975_9DOF * values.std(ddof=1) / math.sqrt(len(values))
    return center - half, center + half


def _batch_p99s(values: np.ndarray) -> list[float]:
    """The P99 of each of ``BATCHES`` consecutive batches (``np.array_split``'s: the first ``len %
    BATCHES`` one longer), the batches of each length in one call."""
    values = values[np.isfinite(values)]
    if len(values) < BATCHES * 10:
        return []
    size, longer = divmod(len(values), BATCHES)
    cut = longer * (size + 1)
    p99s = np.percentile(values[:cut].reshape(longer, size + 1), 99, axis=1).tolist() if longer else []
    return p99s + np.percentile(values[cut:].reshape(BATCHES - longer, size), 99, axis=1).tolist()


@dataclass
class StepRecords:
    """All engines' step records as columns, restricted to a time window."""

    columns: dict[str, np.ndarray]
    engine: np.ndarray
    class_decodes: np.ndarray | None = None  # records x classes: each class's decodes (traffic with classes)

    @classmethod
    def collect(cls, engines: list[Engine], start_s: float, end_s: float) -> StepRecords:
        count = sum(e.num_records for e in engines)
        owner = np.concatenate([np.full(e.num_records, i) for i, e in enumerate(engines)]) if count else np.zeros(0)
        data = record_rows(engines)
        columns = {name: data[:, i] for i, name in enumerate(RECORD_FIELDS)}
        keep = (columns["start_s"] >= start_s) & (columns["start_s"] <= end_s)
        by_class = None
        if engines and engines[0].class_records is not None:
            by_class = np.asarray([c for e in engines for c in e.class_records], dtype=float)[keep]
        return cls({k: v[keep] for k, v in columns.items()}, owner[keep].astype(int), by_class)

    def compute_bound(self, engines: list[Engine]) -> np.ndarray:
        """Per record: compute-limited operators dominate (evaluated by each engine's cost model)."""
        flags = np.zeros(len(self.engine), dtype=bool)
        for i, engine in enumerate(engines):
            sel = self.engine == i
            if sel.any():
                # A lone engine's records are all of them: no copy.
                part = self.columns if sel.all() else {k: v[sel] for k, v in self.columns.items()}
                flags[sel] = engine.predictor.compute_bound(part)
        return flags

    @property
    def durations_s(self) -> np.ndarray:
        c = self.columns
        k = c["steps"]
        return k * c["first_s"] + c["slope_s"] * k * (k - 1) / 2

    def token_gaps(self, points: int = 4, decodes: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(gap, weight, time, record) samples: each record's arithmetic sequence of step durations,
        summarised by up to ``points`` evenly spread values, weighted by the decodes that produced
        tokens (``decodes`` per record: some requests' only, default all); ``record`` is the index
        of the record each sample stands for."""
        c = self.columns
        k = c["steps"]
        m = np.minimum(k, points)
        reps = m.astype(int)
        idx = np.repeat(np.arange(len(k)), reps)
        # Position of each representative within its record: the centre of its share of the steps.
        within = np.arange(reps.sum()) - np.repeat(np.cumsum(reps) - reps, reps)
        share = k[idx] / m[idx]
        step_index = (within + 0.5) * share - 0.5
        gaps = c["first_s"][idx] + c["slope_s"][idx] * step_index
        weights = share * (c["itl_decodes"] if decodes is None else decodes)[idx]
        return gaps, weights, c["start_s"][idx], idx


def summarize(table: RequestTable, engines: list[Engine], measured: np.ndarray, *, slo: SLO | None,
              open_loop: bool, steady_state: bool, notes: list[str], classes: list | None = None) -> ServingSummary:
    """Summarise a finished simulation over the ``measured`` requests (and, given the traffic's
    ``classes``, over each class's)."""
    arrival = np.asarray(table.arrival_s)
    first = np.asarray(table.first_token_s)
    finish = np.asarray(table.finish_s)
    scheduled = np.asarray(table.scheduled_s)
    inputs = np.asarray(table.prompt)
    outputs = np.asarray(table.output)
    order = np.argsort(arrival[measured], kind="stable")
    a, f, e = arrival[measured][order], first[measured][order], finish[measured][order]
    out, inp = outputs[measured][order], inputs[measured][order]
    ttft = f - a
    e2e = e - a
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out > 1, (e - f) / (out - 1), np.nan)
    n = len(a)
    window_start, window_end = float(a.min()), float(e.max())
    records = StepRecords.collect(engines, window_start, window_end)
    gaps, weights, times, _ = records.token_gaps()
    extra = [(t, g, r) for engine in engines
             for (t, g), r in zip(engine.scheduler.gaps_s, engine.scheduler.gap_requests) if window_start <= t <= window_end]
    extra_g, extra_r = np.zeros(0), np.zeros(0, dtype=int)
    if extra:
        extra_t, extra_g, extra_r = np.asarray(extra).T
        extra_r = extra_r.astype(int)
        gaps, weights, times = (np.concatenate([gaps, extra_g]), np.concatenate([weights, np.ones(len(extra_g))]),
                                np.concatenate([times, extra_t]))
    # One stable sort of the gaps serves the whole ITL and every batch's: a batch's gaps in sorted
    # order are the sorted gaps that fall in it (ties keep their order either way).
    gap_order = np.argsort(gaps, kind="stable")
    itl = LatencyStats.of(gaps, weights, gap_order) if weights.sum() > 0 else LatencyStats(*[math.nan] * 4)
    itl_batches = []
    if len(times):
        edges = np.linspace(window_start, window_end, BATCHES + 1)
        # Each weighted sample's batch (edges[i] <= time < edges[i + 1]; -1 for none), in sorted order.
        sorted_gaps, sorted_weights = gaps[gap_order], weights[gap_order]
        batch = np.where(sorted_weights > 0, np.searchsorted(edges, times[gap_order], side="right") - 1, -1)
        for i in range(BATCHES):
            mine = batch == i
            if mine.any():
                itl_batches.append(_sorted_quantiles(sorted_gaps[mine], sorted_weights[mine], (0.99,))[0])
    stats = {"ttft": LatencyStats.of(ttft), "tpot": LatencyStats.of(tpot), "e2e": LatencyStats.of(e2e)}
    ci = {
        "ttft": _ci(_batch_p99s(ttft), stats["ttft"].p99),
        "tpot": _ci(_batch_p99s(tpot), stats["tpot"].p99),
        "itl": _ci(itl_batches, itl.p99),
        "e2e": _ci(_batch_p99s(e2e), stats["e2e"].p99),
    }
    wait = scheduled[measured][order] - a
    saturated, reason = _saturation(a, e, wait, open_loop)
    if steady_state and n > 1:
        # A stable open-loop fleet serves what it is offered: the measured requests' arrival rate. The
        # span of their finishes is longer by the spread of their latencies, which would read as less
        # throughput; it is the measure only of a saturated fleet (what it gets through) and of
        # closed-loop clients (who send as fast as requests finish).
        span = float(np.ptp(a if open_loop and not saturated else e))
        rate = (n - 1) / span if span > 0 else math.nan
    else:
        rate = n / (window_end - window_start) if window_end > window_start else math.nan
    meets, attainment, slo_met = _slo_check({"ttft": ttft, "tpot": tpot, "e2e": e2e}, stats, slo)
    p99 = stats["ttft"].p99
    tail = ttft >= p99
    with np.errstate(invalid="ignore", divide="ignore"):
        queue_share = float(np.nanmean(np.clip(wait[tail] / ttft[tail], 0, 1))) if tail.any() else math.nan
    c = records.columns
    steps = c["steps"]
    durations = records.durations_s
    total_steps = steps.sum()
    capacity = np.asarray([e.kv_capacity_tokens for e in engines])[records.engine]
    kv_util = float(np.sum(c["kv_tokens"] / capacity * durations) / durations.sum()) if durations.sum() > 0 else 0.0
    by_class = ()
    if classes:
        klass = np.asarray(table.klass)[measured][order]
        preempted = np.asarray(table.preemptions)[measured][order]
        by_class = tuple(
            _class_summary(cls, k, klass == k, {"ttft": ttft, "tpot": tpot, "e2e": e2e}, rate, preempted,
                           records, (extra_g, np.asarray(table.klass)[extra_r] == k))
            for k, cls in enumerate(classes))
    return ServingSummary(
        method="simulation",
        ttft_s=stats["ttft"], tpot_s=stats["tpot"], itl_s=itl, e2e_s=stats["e2e"], p99_ci_s=ci,
        requests_per_s=rate,
        input_tokens_per_s=rate * float(inp.mean()) if n else math.nan,
        output_tokens_per_s=rate * float(out.mean()) if n else math.nan,
        goodput_requests_per_s=rate * float(meets.mean()) if n else math.nan,
        slo_attainment=attainment, slo_met=slo_met,
        kv_utilization=kv_util,
        mean_batch_size=float(np.sum(c["num_running"] * steps) / total_steps) if total_steps else 0.0,
        compute_bound_share=float(np.sum(records.compute_bound(engines) * steps) / total_steps) if total_steps else 0.0,
        preemptions=int(np.asarray(table.preemptions)[measured].sum()),
        saturated=saturated, saturation_reason=reason,
        num_requests=table.size, num_measured=n, warmup_excluded=table.size - n,
        queueing_share_p99_ttft=queue_share, notes=tuple(notes), classes=by_class,
    )


def _slo_check(values: dict[str, np.ndarray], stats: dict[str, LatencyStats],
               slo: SLO | None) -> tuple[np.ndarray, float | None, bool | None]:
    """(requests within every target, their share, whether every P99 meets its target); all
    requests and None without targets."""
    n = len(values["ttft"])
    meets = np.ones(n, dtype=bool)
    if slo is None or not slo.targets():
        return meets, None, None
    for metric, target in slo.targets().items():
        meets &= ~(values[metric] > target)  # NaN TPOT (one output token) meets any TPOT target
    return meets, float(meets.mean()) if n else None, all(stats[m].p99 <= t for m, t in slo.targets().items())


def _class_summary(cls, k: int, pick: np.ndarray, values: dict[str, np.ndarray], rate: float,
                   preempted: np.ndarray, records: StepRecords, extra: tuple) -> ClassSummary:
    """A class's figures over its measured requests (``pick``, in arrival order)."""
    mine = {m: v[pick] for m, v in values.items()}
    stats = {m: LatencyStats.of(v) for m, v in mine.items()}
    gaps, weights = np.zeros(0), np.zeros(0)
    if records.class_decodes is not None:
        gaps, weights, _, _ = records.token_gaps(decodes=records.class_decodes[:, k])
    extra_gaps, extra_mine = extra
    gaps = np.concatenate([gaps, extra_gaps[extra_mine]])
    weights = np.concatenate([weights, np.ones(int(extra_mine.sum()))])
    itl = LatencyStats.of(gaps, weights) if weights.sum() > 0 else LatencyStats(*[math.nan] * 4)
    meets, attainment, slo_met = _slo_check(mine, stats, cls.slo)
    n = int(pick.sum())
    share = n / len(pick) if len(pick) else 0.0
    return ClassSummary(
        name=cls.name, priority=cls.priority, share=cls.share,
        ttft_s=stats["ttft"], tpot_s=stats["tpot"], itl_s=itl, e2e_s=stats["e2e"],
        p99_ci_s={m: _ci(_batch_p99s(v), stats[m].p99) for m, v in mine.items()},
        requests_per_s=rate * share, goodput_requests_per_s=rate * share * float(meets.mean()) if n else math.nan,
        slo=cls.slo.targets(), slo_attainment=attainment, slo_met=slo_met, num_measured=n,
        preemptions=int(preempted[pick].sum()),
    )


def _saturation(arrival: np.ndarray, finish: np.ndarray, wait: np.ndarray, open_loop: bool) -> tuple[bool, str]:
    """Open-loop runs whose queueing delay grows with time while fewer requests finish than arrive."""
    if not open_loop or len(arrival) < 50:
        return False, ""
    span = float(np.ptp(arrival))
    if span <= 0:
        return False, ""
    offered = (len(arrival) - 1) / span
    served = (len(finish) - 1) / float(np.ptp(finish)) if np.ptp(finish) > 0 else math.inf
    growth = float(np.polyfit(arrival, wait, 1)[0])
    if growth > SATURATION_WAIT_GROWTH and served < SATURATION_SERVED_SHARE * offered:
        return True, (f"offered load {offered:.3g} req/s exceeds what the deployment serves ({served:.3g} req/s): "
                      f"the queue grows without bound (waiting time rises {growth:.2f} s per s), so tail "
                      "latencies depend on how long the run lasts")
    return False, ""
