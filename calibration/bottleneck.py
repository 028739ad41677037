"""Which bottleneck a live run shows: the seed's section 9 table, decided from physics one can point at.

A run is first checked for **symptoms**, measured where the run or the metrics scrape measured them
and predicted (the simulation of the same load) where they did not:

- ``queue``: requests wait to be admitted. Measured: TTFT rises along an open-loop run by more than
  :data:`~servopt.costmodels.serving.metrics.SATURATION_WAIT_GROWTH` (0.02) seconds per second of send
  time, the simulator's own saturation test (a queue that grows without bound makes every later
  request wait longer); or vLLM's queue-time histogram holds at least :data:`WAIT_SHARE` (a quarter)
  of the requests' end-to-end time. Predicted, only where neither was measured (bursts, closed
  loops and runs saved without per-request data, with no metrics scrape): the simulation is
  saturated, or its requests spend a quarter of their end-to-end time between arrival and their
  first scheduled chunk.
- ``preemption``: vLLM's preemption counter moved, or the simulation preempted at least
  :data:`PREEMPTED_SHARE` (1%) of its requests (vLLM recomputes a preempted request: the KV cache
  ran out).
- ``stall``: P99 ITL at least :data:`STALL_RATIO` (2x) the median ITL: a user sees the stream stop
  for a token's time or more (decode steps alone lengthen smoothly with the context, well under 2x).
- ``slo``: a measured P99 over a target given with ``--slo``.

No symptom: ``none``. Otherwise the first **cause** that holds, in this order (the order puts the
root before what it causes: a full cache makes the queue; a queue's TTFT dwarfs an ITL stall):

1. ``kv_pressure``: preemption, or a queue while the KV cache is full: vLLM's KV-usage gauge read
   under load, or the simulation's peak, at least :data:`KV_FULL` (0.95: vLLM admits a request only
   when its blocks fit, so the next admission waits for memory) while ``max_num_seqs`` is not what
   caps the batch (running at the cap for under half the step time).
2. ``under_batching``: a queue while the GPU could batch more for nearly nothing: it waits on the
   host (CPU time not hidden by async scheduling, or lockstep peers) for at least
   :data:`GPU_WAIT_SHARE` (a quarter) of the step time, or ``max_num_seqs`` caps the batch
   (:data:`SEQ_CAP_SHARE`: running at the cap for half the step time or more) while the KV cache has
   room (peak under :data:`KV_ROOM`, 0.7) and decode steps are memory-bound
   (:data:`MEMORY_BOUND_SHARE`: at least 80% of them), so a bigger batch costs little per step.
3. ``saturated``: a queue otherwise: arrivals beyond what the deployment serves.
4. ``prefill_interference``: a stall whose tail the simulation attributes to prefill chunks: at least :data:`PREFILL_TAIL_SHARE` (half) of the token gaps at or
   above the P99 ITL come from steps that also carried prefill chunks.
5. ``memory_bound_decode``: a missed TPOT or end-to-end target while at least 80% of decode
   steps are memory-bound: decode runs at the speed the weights and KV cache stream from memory
   (fewer bytes per token or more bandwidth help, not more batch). Without a target (``--slo``)
   decode speed is never called a problem by itself, and memory-bound steps are smooth, so they
   explain no stall.

A symptom no cause explains leaves ``none`` with a finding that says so.

Example:
    >>> e = Evidence(queue_growth=0.5, queue_growth_measured=True, saturated=True, wait_share=0.8,
    ...              preempted=0.0, preemption_measured=False, stall=1.3, kv_full=0.4, seq_cap_share=0.0,
    ...              gpu_wait_share=0.05, memory_bound_share=0.95, prefill_tail_share=0.2)
    >>> decide(e).bottleneck
    'saturated'
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..costmodels.serving.metrics import SATURATION_WAIT_GROWTH

BOTTLENECKS = ("none", "kv_pressure", "under_batching", "saturated", "prefill_interference", "memory_bound_decode")
WAIT_SHARE = 0.25
PREEMPTED_SHARE = 0.01
STALL_RATIO = 2.0
KV_FULL = 0.95
GPU_WAIT_SHARE = 0.25
SEQ_CAP_SHARE = 0.5
KV_ROOM = 0.7
MEMORY_BOUND_SHARE = 0.8
PREFILL_TAIL_SHARE = 0.5


@dataclass(frozen=True)
class Evidence:
    """The numbers the rules read (see the module docstring); ``*_measured`` says a value came from
    the live run rather than the simulation."""

    queue_growth: float  # s of extra wait per s of send time (NaN: all sent at once)
    queue_growth_measured: bool
    saturated: bool  # the simulation's verdict (queue grows, fewer served than offered)
    wait_share: float  # admission wait over end-to-end time
    preempted: float  # preemptions (measured count) or preempted share of requests (simulated)
    preemption_measured: bool
    stall: float  # P99 ITL / median ITL
    kv_full: float  # KV-cache use: the gauge under load, else the simulation's peak
    seq_cap_share: float
    gpu_wait_share: float
    memory_bound_share: float
    prefill_tail_share: float
    wait_share_measured: bool = False
    stall_measured: bool = False
    kv_measured: bool = False
    slo_misses: dict[str, tuple[float, float]] = field(default_factory=dict)  # metric -> (measured P99, target)


@dataclass(frozen=True)
class Finding:
    """One rule evaluated: whether it holds and the numbers it read."""

    name: str
    holds: bool
    evidence: str

    def to_dict(self) -> dict:
        return {"name": self.name, "holds": self.holds, "evidence": self.evidence}


@dataclass(frozen=True)
class Verdict:
    bottleneck: str
    symptoms: tuple[Finding, ...]
    causes: tuple[Finding, ...]
    note: str = ""


def _src(measured: bool) -> str:
    return "measured" if measured else "simulated"


def _ge(value: float, threshold: float) -> bool:
    return math.isfinite(value) and value >= threshold


def decide(e: Evidence) -> Verdict:
    """Apply the rules of the module docstring."""
    measured_queue = e.queue_growth_measured or e.wait_share_measured
    growing = _ge(e.queue_growth, SATURATION_WAIT_GROWTH) and (e.queue_growth_measured or not measured_queue)
    waiting = _ge(e.wait_share, WAIT_SHARE) and (e.wait_share_measured or not measured_queue)
    if not measured_queue:
        growing = growing or e.saturated
    trend = f"{e.queue_growth:.3g} s/s" if math.isfinite(e.queue_growth) else "n/a (sent at once)"
    queue = Finding("queue", growing or waiting,
                    f"wait grows {trend} ({_src(e.queue_growth_measured)}; >= {SATURATION_WAIT_GROWTH} "
                    f"grows{'' if measured_queue else ', or the simulation saturates: ' + str(e.saturated).lower()}); "
                    f"admission wait {e.wait_share:.0%} of end-to-end ({_src(e.wait_share_measured)}; >= {WAIT_SHARE:.0%})"
                    + ("; measured signals decide" if measured_queue else ""))
    preempt_threshold = 0.0 if e.preemption_measured else PREEMPTED_SHARE
    preemption = Finding("preemption", e.preempted > preempt_threshold if math.isfinite(e.preempted) else False,
                         f"{e.preempted:g} preemptions (measured counter)" if e.preemption_measured else
                         f"{e.preempted:.1%} of requests preempted (simulated; >= {PREEMPTED_SHARE:.0%})")
    stall = Finding("stall", _ge(e.stall, STALL_RATIO),
                    f"P99 ITL {e.stall:.2f}x the median ({_src(e.stall_measured)}; >= {STALL_RATIO:g}x)")
    slo = Finding("slo", bool(e.slo_misses), "; ".join(f"measured P99 {m.upper()} {v * 1e3:.0f} ms > {t * 1e3:.0f} ms"
                                                         for m, (v, t) in e.slo_misses.items()) or "no target missed")
    symptoms = (queue, preemption, stall, slo)
    decode_miss = any(m in e.slo_misses for m in ("tpot", "e2e"))
    kv_full = _ge(e.kv_full, KV_FULL) and not _ge(e.seq_cap_share, SEQ_CAP_SHARE)
    memory_bound = _ge(e.memory_bound_share, MEMORY_BOUND_SHARE)
    seq_capped = _ge(e.seq_cap_share, SEQ_CAP_SHARE) and math.isfinite(e.kv_full) and e.kv_full < KV_ROOM and memory_bound
    idle = _ge(e.gpu_wait_share, GPU_WAIT_SHARE)
    prefill = _ge(e.prefill_tail_share, PREFILL_TAIL_SHARE)
    causes = (
        Finding("kv_pressure", preemption.holds or (queue.holds and kv_full),
                f"KV cache {e.kv_full:.0%} full ({_src(e.kv_measured)}; >= {KV_FULL:.0%}) with max_num_seqs binding "
                f"{e.seq_cap_share:.0%} of step time (< {SEQ_CAP_SHARE:.0%}); preemption: {str(preemption.holds).lower()}"),
        Finding("under_batching", queue.holds and (idle or seq_capped),
                f"GPU waits on the host {e.gpu_wait_share:.0%} of step time (>= {GPU_WAIT_SHARE:.0%}); or max_num_seqs "
                f"binds {e.seq_cap_share:.0%} of step time (>= {SEQ_CAP_SHARE:.0%}) with KV {e.kv_full:.0%} "
                f"(< {KV_ROOM:.0%}) and {e.memory_bound_share:.0%} of decode steps memory-bound (>= {MEMORY_BOUND_SHARE:.0%})"),
        Finding("saturated", queue.holds, "requests queue: " + queue.evidence),
        Finding("prefill_interference", stall.holds and prefill,
                f"{e.prefill_tail_share:.0%} of the ITL tail (gaps >= P99) from steps carrying prefill chunks "
                f"(simulated; >= {PREFILL_TAIL_SHARE:.0%})"),
        Finding("memory_bound_decode", decode_miss and memory_bound,
                f"{e.memory_bound_share:.0%} of decode steps memory-bound (simulated; >= {MEMORY_BOUND_SHARE:.0%}); "
                f"needs a missed TPOT or end-to-end target (--slo)"),
    )
    if not any(s.holds for s in symptoms):
        return Verdict("none", symptoms, causes)
    chosen = next((c.name for c in causes if c.holds), "none")
    note = "" if chosen != "none" else (
        "symptoms without a cause the simulation can point at: " + "; ".join(s.evidence for s in symptoms if s.holds))
    return Verdict(chosen, symptoms, causes, note)
