"""What the engines did during a simulated run: the physics a diagnosis points at.

:func:`engine_activity` reads every engine's step records (:data:`~.engine.RECORD_FIELDS`) and the
request table over the measured window and returns an :class:`EngineActivity`:

- ``busy_share``: engine time spent in steps over the window (continuous batching keeps an engine
  busy whenever one request runs, so this is not the utilization of the GPU's arithmetic);
- ``gpu_wait_share``: of that step time, the share in which the GPU does not compute this engine's
  work: the engine's CPU time that async scheduling does not hide (``PerformanceProfile.step_overhead``),
  and, for pipeline lanes and MoE data-parallel ranks, waiting for the lanes or ranks they step with.
  It is each step's duration minus its GPU time (:meth:`StepTimePredictor.gpu_time_s`);
- ``mixed_step_share``: of the steps that decode, those that also carry prefill chunks (chunked
  prefill co-schedules them); ``mixed_step_slowdown``: their median duration over the median
  decode-only step's; ``itl_tail_prefill_share``: of the token gaps at or above the run's P99 ITL
  (weighted as the ITL is, by the decodes in each step), the share that a prefill chunk stretched:
  steps that carried one, and pipeline lanes' steps that overlapped a sibling lane's (the stages
  they share run both). A value near 1 says long prefills make the ITL tail. (A data-parallel
  MoE rank waiting for a rank with a prefill is not traced back to it.)
- ``kv_peak``: the highest KV-cache use of any engine (tokens held over the tokens its blocks hold,
  as vLLM's ``kv_cache_usage_perc``); ``seq_cap_share``: step time with ``max_num_seqs`` requests
  running (the batch limit, not the cache or the traffic, sets the batch);
- ``memory_bound_decode_share``: of the decode-only steps, those whose GPU time is mostly
  memory-limited operators (the roofline's verdict); ``decode_floor_ratio``: the median decode-only
  step over seed 2.2's floor for that step (weights plus the batch's KV bytes read once per GPU at
  the datasheet bandwidth);
- ``admission_wait_share``: the requests' time from arrival to their first scheduled chunk over
  their end-to-end time (front-end time included), and ``queue_growth_s_per_s``: the slope of that
  wait against arrival time (a queue that grows, as the saturation test of :mod:`.metrics` reads it;
  NaN when every request arrives at once).

Computing this walks every record once more, so :func:`~.simulator.simulate` does it only when asked
(``with_activity=True``).

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.deployment import Deployment
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> from servopt.costmodels.serving import simulate, Traffic
    >>> gpu = get_gpu("h100")
    >>> traffic = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 2},
    ...     "input_tokens": {"kind": "fixed", "value": 512}, "output_tokens": {"kind": "fixed", "value": 128}})
    >>> run = simulate(get_model("llama-3.1-8b"), Deployment(gpu="h100", max_model_len=4096), traffic, gpu,
    ...                PerformanceProfile.spec_default(gpu), num_requests=300, with_activity=True)
    >>> a = run.activity
    >>> 0 < a.busy_share <= 1, a.kv_peak < 0.5, a.admission_wait_share < 0.25
    (True, True, True)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from .engine import Engine
from .metrics import StepRecords, weighted_quantiles
from .requests import RequestTable


@dataclass(frozen=True)
class EngineActivity:
    """Engine-level signals of one simulated run (see the module docstring for each)."""

    engines: int
    window_s: float
    busy_share: float
    gpu_wait_share: float
    decode_steps: int
    mixed_step_share: float
    mixed_step_slowdown: float
    itl_tail_prefill_share: float
    kv_peak: float
    seq_cap_share: float
    memory_bound_decode_share: float
    decode_floor_ratio: float
    admission_wait_share: float
    queue_growth_s_per_s: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else math.nan


def _overlaps_sibling_prefill(engines: list[Engine], c: dict[str, np.ndarray], owner: np.ndarray,
                              durations: np.ndarray, mixed: np.ndarray) -> np.ndarray:
    """Per record: a pipeline lane's step that overlaps a sibling lane's prefill-carrying step (the
    stages they share run both, so the prefill stretches this lane's period too)."""
    out = np.zeros(len(owner), dtype=bool)
    starts, ends = c["start_s"], c["start_s"] + durations
    for i, engine in enumerate(engines):
        if engine.stages is None:
            continue
        siblings = [j for j, other in enumerate(engines) if other.stages is engine.stages and j != i]
        pick = np.isin(owner, siblings) & mixed
        mine = owner == i
        if not pick.any() or not mine.any():
            continue
        # Intervals (s, e) meeting (a, b): those starting before b minus those ending by a.
        begun = np.searchsorted(np.sort(starts[pick]), ends[mine], side="left")
        done = np.searchsorted(np.sort(ends[pick]), starts[mine], side="right")
        out[mine] = begun - done > 0
    return out


def engine_activity(engines: list[Engine], table: RequestTable, measured: np.ndarray, itl_p99_s: float) -> EngineActivity:
    """The signals of :class:`EngineActivity` over the measured requests' window."""
    arrival = np.asarray(table.arrival_s)[measured]
    finish = np.asarray(table.finish_s)[measured]
    scheduled = np.asarray(table.scheduled_s)[measured]
    start, end = float(arrival.min()), float(finish.max())
    window = max(end - start, 1e-12)
    records = StepRecords.collect(engines, start, end)
    c, steps, owner = records.columns, records.columns["steps"], records.engine
    durations = records.durations_s
    busy = float(durations.sum())
    gpu = np.zeros(len(steps))
    floor = np.full(len(steps), math.nan)
    caps = np.zeros(len(steps))
    capacity = np.zeros(len(steps))
    for i, engine in enumerate(engines):
        sel = owner == i
        if not sel.any():
            continue
        part = {k: v[sel] for k, v in c.items()}
        # A run record stands for its steps by its mid-point, which a line in the context makes exact.
        gpu[sel] = engine.predictor.gpu_time_s(part) * part["steps"]
        floor[sel] = engine.predictor.cost.weight_read_floor_s(part["decode_context"], 1)
        caps[sel] = engine.scheduler.limits.max_num_seqs
        capacity[sel] = engine.kv_capacity_tokens
    decoding = c["num_decode_seqs"] > 0
    mixed = decoding & (c["prefill_tokens"] > 0)
    pure = decoding & ~mixed
    per_step = durations / np.maximum(steps, 1)
    decode_steps = float(steps[decoding].sum())
    slowdown = math.nan
    if mixed.any() and pure.any():
        slowdown = float(np.median(per_step[mixed]) / weighted_quantiles(per_step[pure], steps[pure], (0.5,))[0])
    # The ITL tail: token gaps at or above the P99, weighted by the decodes that produced them, and
    # the part a prefill chunk stretched (its own step's, or a pipeline sibling lane's meanwhile).
    gaps, weights, _, index = records.token_gaps()
    stretched = mixed | _overlaps_sibling_prefill(engines, c, owner, durations, mixed)
    tail = gaps >= itl_p99_s
    extra = [g for e in engines for t, g in e.scheduler.gaps_s if start <= t <= end]
    tail_all = float(weights[tail].sum()) + sum(1.0 for g in extra if g >= itl_p99_s)
    tail_mixed = float(weights[tail & stretched[index]].sum())
    bound = np.zeros(len(steps), dtype=bool)
    for i, engine in enumerate(engines):
        sel = (owner == i) & pure
        if sel.any():
            bound[sel] = engine.predictor.compute_bound({k: v[sel] for k, v in c.items()})
    ratio = per_step[pure] / floor[pure]
    e2e = finish - arrival
    wait = scheduled - arrival
    growth = math.nan
    if len(arrival) >= 3 and np.ptp(arrival) > 0:
        growth = float(np.polyfit(arrival, wait, 1)[0])
    return EngineActivity(
        engines=len(engines),
        window_s=window,
        busy_share=busy / (len(engines) * window),
        gpu_wait_share=_share(float(np.clip(durations - gpu, 0, None).sum()), busy),
        decode_steps=int(decode_steps),
        mixed_step_share=_share(float(steps[mixed].sum()), decode_steps),
        mixed_step_slowdown=slowdown,
        itl_tail_prefill_share=_share(tail_mixed, tail_all),
        kv_peak=float(np.max(c["kv_tokens"] / capacity)) if len(steps) else 0.0,
        seq_cap_share=_share(float(durations[c["num_running"] >= caps].sum()), busy),
        memory_bound_decode_share=_share(float(steps[pure & ~bound].sum()), float(steps[pure].sum())),
        decode_floor_ratio=weighted_quantiles(ratio, steps[pure], (0.5,))[0] if pure.any() else math.nan,
        admission_wait_share=_share(float(np.nansum(wait)), float(np.nansum(e2e))),
        queue_growth_s_per_s=growth,
    )
