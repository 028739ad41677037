"""``simulate``: the latency distribution of a deployment under a traffic, by discrete-event simulation.

Builds the engines of a :class:`~servopt.costmodels.deployment.Deployment` (replicas x pipeline
lanes or data-parallel ranks, or prefill and decode instances), draws the requests of a
:class:`~servopt.costmodels.serving.traffic.Traffic`, runs them through the vLLM V1 step rule
(:mod:`.scheduler`) with step times from the roofline cost model (:mod:`.predictor`), and summarises
the measured requests (:mod:`.metrics`).

Without ``num_requests`` the run grows (2x to 4x at a time, towards the size that the 1/sqrt(n)
narrowing predicts, up to :data:`MAX_REQUESTS`) until the batch-means 95% interval of both P99 TTFT and
P99 TPOT is within :data:`P99_TOLERANCE` of the estimate. Generated
traffic excludes a warm-up (the first 10% of requests; with closed-loop clients at least twice the
concurrency) and a cool-down (the last 5%, at least the concurrency) that see an emptier system than
the steady state; multi-turn sessions keep the turns between the first conversations' build-up and
the last conversation's start (:func:`_measured_turns`). A trace is replayed as is, every request measured, and so is a finite benchmark
run of closed-loop clients (``requests_per_client``), whose opening burst and closing drain are part
of what such a benchmark reports.

A fleet of identical replicas behind one router is simulated through a few of its replicas fed their
share of the arrivals (:func:`simulated_share`), so a simulation costs the same for 2 replicas as for
200; throughputs are scaled back to the fleet. What that is for each router:

- ``round_robin`` sends replica i arrivals i, i + N, i + 2N, ...; one replica fed every N-th arrival of
  the same stream sees exactly that (for a Poisson stream of rate r, a renewal stream with Erlang-N
  inter-arrival times of rate r / N, coefficient of variation 1 / sqrt(N)), so the per-replica
  latency distribution is the fleet's, up to sampling noise. The replicas' phases do not matter:
  percentiles pool requests, and each replica's marginal distribution is the same.
- ``least_outstanding`` sends each request to the replica with the fewest outstanding requests,
  close to join-the-shortest-queue: a replica's arrivals depend on every replica's state. Four
  replicas routed among themselves by that rule are fed an evenly spaced 4 / N of the stream. The
  even split is smoother than the arrivals join-the-shortest-queue sends to any four of N replicas,
  so tails come out lower than the whole fleet's: measured, P99 TTFT 6-13% lower at 8 and 32
  replicas (beyond the seed-to-seed noise at 32), TPOT and end-to-end within noise.
  ``benchmarks/bench_simulator_fleet.py`` prints the P99 differences against
  simulating every replica.
- ``power_of_two`` (the vLLM Router's: the less loaded of two replicas drawn at random) also
  depends on every replica's state; it is simulated as least_outstanding is, with four replicas.

Closed-loop clients are split with the replicas when they divide evenly; traces are replayed whole.

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.deployment import Deployment
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> from servopt.costmodels.serving.traffic import Traffic
    >>> gpu = get_gpu("h100")
    >>> traffic = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 5},
    ...     "input_tokens": {"kind": "fixed", "value": 1024}, "output_tokens": {"kind": "fixed", "value": 128}})
    >>> result = simulate(get_model("llama-3.1-8b"), Deployment(gpu="h100", max_model_len=8192), traffic, gpu,
    ...                   PerformanceProfile.spec_default(gpu), num_requests=1000)
    >>> s = result.summary
    >>> s.saturated, 0.005 < s.tpot_s.p50 < 0.05, len(result.requests)
    (False, True, 1000)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np

from ..architectures import ModelSpec
from ..deployment import Deployment
from ..errors import InputError
from ..hardware import GPUSpec
from ..profile import PerformanceProfile
from .activity import EngineActivity, engine_activity
from .cluster import ClosedLoop, Cluster, Pool, WorkLimitReached
from .compiled import CompiledDeployment, compile_deployment
from .data_parallel import LockstepGroup
from .engine import RECORD_FIELDS, Engine, PipelineStages, record_rows
from .metrics import ServingSummary, summarize
from .prefix_cache import PrefixCache
from .requests import DrawnRequests, RequestTable, draw_requests, session_history
from .router import make_router
from .scheduler import BlockCounter, Scheduler
from .slo import SLO
from .traffic import Traffic

if TYPE_CHECKING:
    import pandas as pd

INITIAL_REQUESTS = 2000
MAX_REQUESTS = 32000
# Work bound: engine plans (one step, or a closed-form run of decode steps) per simulated request,
# plus a floor for short runs. Runs that reach a steady state need 2-20 per request; a deployment
# that thrashes its KV cache (preempting and recomputing) needs far more and would run for minutes.
PLANS_PER_REQUEST = 100
MIN_PLANS = 100_000
P99_TOLERANCE = 0.05
WARMUP_SHARE = 0.10
COOLDOWN_SHARE = 0.05
# Replicas simulated for a fleet behind each router (see the module docstring).
SIMULATED_REPLICAS = {"round_robin": 1, "power_of_two": 4, "least_outstanding": 4}


@dataclass(frozen=True)
class SimulationResult:
    """A simulated run: the summary, the requests as simulated (``requests``: one row per request,
    times in seconds), how many engine steps were simulated (``decode_steps`` of them ran decodes),
    and, when asked for, what the engines did (:mod:`.activity`). An analytic estimate has no
    requests."""

    summary: ServingSummary
    table: RequestTable | None = field(default=None, repr=False, compare=False)
    steps: int = 0
    decode_steps: int = 0
    activity: EngineActivity | None = None

    @cached_property
    def requests(self) -> pd.DataFrame:
        """One row per request, built when first read (the search reads only the summary)."""
        return self.table.frame() if self.table is not None else RequestTable.empty_frame()


def _build_engines(compiled: CompiledDeployment, table: RequestTable, rng: np.random.Generator,
                   seed: int = 0) -> list[Pool]:
    d = compiled.deployment
    lockstep = compiled.model.moe is not None
    pools = []
    index = 0
    for role in compiled.roles:
        predictor = role.predictor
        counter = BlockCounter.from_plan(role.plan, compiled.max_model_len + predictor.query_per_seq + 1)
        groups = []
        for instance in range(role.instances):
            lanes = []
            stages = PipelineStages(d.pp) if d.pp > 1 else None
            for _ in range(d.pp * role.dp):
                sched = Scheduler(table, role.limits, counter, predictor.query_per_seq, predictor.tokens_per_step,
                                  predictor.window, compiled.speculation if role.generates else None, rng)
                if table.sessions and d.enable_prefix_caching:
                    sched.cache = PrefixCache(role.limits.num_blocks, counter)
                lanes.append(Engine(index, sched, predictor, stages))
                index += 1
            # An MoE model's data-parallel ranks step together (their MoE layers span all of them).
            groups.append([LockstepGroup(instance, lanes)] if role.dp > 1 and lockstep else lanes)
        pools.append(Pool(groups, make_router(d.router, seed + len(pools)), data_parallel=role.dp > 1))
    return pools


def ranks_of(engines: list) -> list[Engine]:
    """Every scheduler-owning engine: a lockstep group's ranks in place of the group."""
    return [rank for e in engines for rank in (e.ranks if isinstance(e, LockstepGroup) else [e])]


def _measures_everything(traffic: Traffic) -> bool:
    """A trace replay or a finite benchmark run: every request counts, as in the run it describes."""
    arrival = traffic.arrival
    return arrival.kind == "trace" or (arrival.kind == "closed_loop" and arrival.requests_per_client is not None)


def _measured(table: RequestTable, traffic: Traffic) -> np.ndarray:
    """Requests in the steady state: all of a trace or benchmark run, else without warm-up and cool-down."""
    n = table.size
    keep = np.ones(n, dtype=bool)
    if _measures_everything(traffic):
        return keep
    if table.sessions:
        return _measured_turns(table)
    concurrency = traffic.arrival.concurrency if traffic.arrival.kind == "closed_loop" else 0
    warmup = max(int(WARMUP_SHARE * n), 2 * concurrency)
    cooldown = max(int(COOLDOWN_SHARE * n), concurrency)
    if warmup + cooldown >= n // 2:
        return keep  # too few requests for a steady state: measure them all (noted in the summary)
    order = np.argsort(np.asarray(table.arrival_s), kind="stable")
    keep[:] = False
    keep[order[warmup:n - cooldown]] = True
    return keep


def _measured_turns(table: RequestTable) -> np.ndarray:
    """Turns of multi-turn sessions in the steady state: after the first sessions' span (the
    conversations in progress build up for as long as one lasts) and the warm-up share, and no later
    than the last session's start (after it, the conversations only drain)."""
    arrival, session = np.asarray(table.arrival_s), np.asarray(table.session)
    first = np.append(True, session[1:] != session[:-1])
    last = np.append(session[1:] != session[:-1], True)
    starts = arrival[first]
    span = float(np.mean(arrival[last] - starts))
    low = max(float(np.quantile(arrival, WARMUP_SHARE)), float(starts.min()) + span)
    keep = (arrival >= low) & (arrival <= starts.max())
    # Too short a run for a steady state: measure every turn (noted in the summary).
    return keep if keep.sum() >= table.size // 4 else np.ones(table.size, dtype=bool)


def _run_once(compiled: CompiledDeployment, traffic: Traffic, num_requests: int | None, seed: int,
              slo: SLO | None, arrival_share: float = 1.0, with_activity: bool = False) -> SimulationResult:
    rng = np.random.default_rng(seed)
    d = compiled.deployment
    drawn = draw_requests(traffic, num_requests, rng, max_model_len=compiled.max_model_len,
                          block_size=d.block_size, prefix_caching=d.enable_prefix_caching, arrival_share=arrival_share,
                          context_source=compiled.context_source)
    table = RequestTable(drawn)
    pools = _build_engines(compiled, table, rng, seed)
    front, decode = pools[0], (pools[1] if len(pools) > 1 else None)
    cluster = Cluster(table, front, decode, compiled.transfer_s if decode else None, compiled.request_overhead_s,
                      compiled.tokenize_s_per_token)
    closed = None
    if traffic.arrival.kind == "closed_loop":
        closed = ClosedLoop(traffic.arrival.concurrency, traffic.arrival.think_time_s)
    elif traffic.arrival.kind == "trace" and traffic.arrival.max_concurrency is not None:
        closed = ClosedLoop(traffic.arrival.max_concurrency, 0.0, schedule_s=list(table.arrival_s))
    try:
        cluster.run(table.arrival_s if closed is None else None, closed,
                    max_plans=max(MIN_PLANS, PLANS_PER_REQUEST * table.size), follow_ups=table.sessions)
    except WorkLimitReached as stop:
        raise InputError(_work_limit_message(stop, table, drawn)) from None
    measured = _measured(table, traffic)
    notes = []
    if drawn.clipped:
        notes.append(f"{drawn.clipped} requests clipped to the context limit of {compiled.max_model_len} tokens")
    everything = _measures_everything(traffic)
    if not everything and measured.all():
        notes.append("too few requests to exclude a warm-up: every request is measured")
    engines = ranks_of(cluster.engines)
    if table.sessions:
        notes.append(_session_note(table, d.block_size, d.enable_prefix_caching))
    # Closed-loop clients that never send a second request are one burst, never a steady state: the
    # span of their finishes leaves out the time the first ones took, so the rate is over the whole run.
    steady = not everything and (closed is None or table.size > closed.concurrency)
    summary = summarize(table, engines, measured, slo=slo, open_loop=closed is None,
                        steady_state=steady, notes=notes, classes=traffic.classes)
    rows = record_rows(engines)
    counts, decodes = rows[:, RECORD_FIELDS.index("steps")], rows[:, RECORD_FIELDS.index("num_decode_seqs")]
    steps, decode_steps = counts.sum(), counts[decodes != 0].sum()  # whole numbers: exact as floats
    activity = engine_activity(engines, table, measured, summary.itl_s.p99) if with_activity else None
    return SimulationResult(summary, table, int(steps), int(decode_steps), activity)


def _session_note(table: RequestTable, block_size: int, prefix_caching: bool) -> str:
    """How many turns the conversations had, and how much of their prompts the prefix cache held,
    against the most it could (every turn's history, in whole blocks)."""
    sessions = len(set(table.session))
    prompts = sum(table.prompt)
    history = int(session_history(table.prompt, table.output, table.follow_up, block_size).sum())
    if not prefix_caching:
        cached = "prefix caching is off: every turn recomputes its history"
    else:
        cached = (f"the prefix cache held {sum(table.cached) / prompts:.0%} of their prompt tokens (the history "
                  f"is {history / prompts:.0%}; the rest was evicted or served on another engine)")
    return (f"{table.size} turns of {sessions} conversations (mean prompt {prompts / table.size:,.0f} tokens with "
            f"history); {cached}")


def _work_limit_message(stop: WorkLimitReached, table: RequestTable, drawn: DrawnRequests) -> str:
    done = sum(1 for t in table.finish_s if not math.isnan(t))
    preempted = sum(table.preemptions)
    return (f"the simulation stopped early: after {stop.plans:,} scheduling rounds ({stop.time_s:,.4g} simulated s) only "
            f"{done:,} of {table.size:,} requests had finished ({preempted:,} preemptions), so this deployment "
            f"cannot reach a steady state under the traffic (mean {drawn.input_tokens.mean():,.0f} prompt and "
            f"{drawn.output_tokens.mean():,.0f} output tokens per request): it is saturated or thrashes its KV "
            "cache; use `servopt predict --analytic`, fewer --requests, or a larger deployment")


def simulate(model: ModelSpec, deployment: Deployment, traffic: Traffic, gpu: GPUSpec, profile: PerformanceProfile,
             *, num_requests: int | None = None, seed: int = 0, slo: SLO | None = None,
             whole_fleet: bool = False, with_activity: bool = False) -> SimulationResult:
    """Simulate ``deployment`` serving ``traffic``; see the module docstring for how many requests run
    and how a fleet of replicas is simulated. ``with_activity`` adds the engines' signals
    (:class:`~.activity.EngineActivity`)."""
    return simulate_compiled(compile_deployment(model, deployment, gpu, profile), traffic, num_requests=num_requests,
                             seed=seed, slo=slo, whole_fleet=whole_fleet, with_activity=with_activity)


def simulated_share(compiled: CompiledDeployment, traffic: Traffic) -> tuple[CompiledDeployment, Traffic, float]:
    """The replicas that stand for the fleet, the traffic they get, and their share of its arrivals.

    Identical replicas behind a router see statistically identical streams, so a few of them, fed
    their share of the arrivals, give the fleet's latency distribution at a cost that does not grow
    with the fleet (see the module docstring for what this approximates per router). Traces and
    closed-loop clients that do not split evenly are simulated whole, and so are multi-turn
    sessions: whether a turn finds its history cached depends on landing on the replica that served
    the previous turn, which a few replicas would make more likely than the whole fleet does.
    """
    d = compiled.deployment
    kept = min(d.replicas, SIMULATED_REPLICAS[d.router])
    arrival = traffic.arrival
    if kept == d.replicas or arrival.kind in ("trace", "sessions") or \
            (arrival.kind == "closed_loop" and (arrival.requests_per_client is not None
                                                or arrival.concurrency * kept % d.replicas)):
        return compiled, traffic, 1.0
    if arrival.kind == "closed_loop":
        clients = arrival.model_copy(update={"concurrency": arrival.concurrency * kept // d.replicas})
        return compiled.with_replicas(kept), traffic.model_copy(update={"arrival": clients}), 1.0
    return compiled.with_replicas(kept), traffic, kept / d.replicas


def simulate_compiled(compiled: CompiledDeployment, traffic: Traffic, *, num_requests: int | None = None,
                      seed: int = 0, slo: SLO | None = None, whole_fleet: bool = False,
                      with_activity: bool = False) -> SimulationResult:
    """:func:`simulate` of a deployment compiled already (InputError when vLLM would not start it).

    ``whole_fleet`` simulates every replica instead of :func:`simulated_share`'s few (for checking
    that approximation: ``benchmarks/bench_simulator_fleet.py``).
    """
    compiled.require()
    fleet = compiled.deployment.replicas
    share = 1.0
    if not whole_fleet:
        compiled, traffic, share = simulated_share(compiled, traffic)
    result = _simulate(compiled, traffic, num_requests, seed, slo, share, with_activity)
    kept = compiled.deployment.replicas
    if kept == fleet:
        return result
    # Throughputs are the fleet's: the simulated replicas' times fleet / kept.
    s, scale = result.summary, fleet / kept
    note = (f"{kept} of {fleet} identical replicas simulated with their share of the traffic "
            f"({compiled.deployment.router} router); throughput scaled to the fleet")
    summary = replace(s, requests_per_s=s.requests_per_s * scale, input_tokens_per_s=s.input_tokens_per_s * scale,
                      output_tokens_per_s=s.output_tokens_per_s * scale,
                      goodput_requests_per_s=s.goodput_requests_per_s * scale, notes=(*s.notes, note))
    return replace(result, summary=summary)


def _simulate(compiled: CompiledDeployment, traffic: Traffic, num_requests: int | None, seed: int, slo: SLO | None,
              share: float, with_activity: bool = False) -> SimulationResult:
    if num_requests is not None and num_requests < 1:
        raise InputError(f"num_requests must be at least 1, got {num_requests}")
    benchmark = traffic.arrival.benchmark_requests if traffic.arrival.kind == "closed_loop" else None
    if benchmark is not None:
        if num_requests not in (None, benchmark):
            raise InputError(f"the benchmark run sends {benchmark} requests (concurrency x requests_per_client); "
                             f"leave num_requests out or set it to that, not {num_requests}")
        num_requests = benchmark
    if num_requests is not None or traffic.arrival.kind == "trace":
        return _run_once(compiled, traffic, num_requests, seed, slo, share, with_activity)
    n = INITIAL_REQUESTS
    if traffic.arrival.kind == "closed_loop":
        n = max(n, 40 * traffic.arrival.concurrency)
    while True:
        result = _run_once(compiled, traffic, n, seed, slo, share, with_activity)
        s = result.summary
        widths = [s.p99_ci_relative_half_width(m) for m in ("ttft", "tpot") if math.isfinite(getattr(s, f"{m}_s").p99)]
        worst = max(widths, default=0.0)
        if worst <= P99_TOLERANCE or s.saturated or n >= MAX_REQUESTS:
            return result
        # The interval narrows as 1/sqrt(n): jump towards the size that should meet the tolerance (at
        # most 4x: a start-up transient can inflate the first interval).
        scale = (worst / P99_TOLERANCE) ** 2 * 1.2 if math.isfinite(worst) else 4.0
        n = min(MAX_REQUESTS, int(n * min(max(scale, 2.0), 4.0)))
