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
the steady state. A trace is replayed as is, every request measured, and so is a finite benchmark
run of closed-loop clients (``requests_per_client``), whose opening burst and closing drain are part
of what such a benchmark reports.

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

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..architectures import ModelSpec
from ..deployment import Deployment
from ..errors import InputError
from ..hardware import GPUSpec
from ..memory import GIB, MemoryPlan, kv_bytes_per_token, plan_memory
from ..profile import PerformanceProfile
from ..quantization import MODEL_DTYPE_SCHEME
from ..roofline import StepCostModel
from ..speculation import Speculation, build_speculation
from ..vllm_defaults import default_batch_limits, parse_vllm_version, tokenize_s_per_token
from .cluster import ClosedLoop, Cluster, Pool, WorkLimitReached
from .data_parallel import LockstepGroup
from .engine import Engine, PipelineStages
from .metrics import ServingSummary, summarize
from .predictor import StepTimePredictor
from .requests import DrawnRequests, RequestTable, draw_requests
from .router import make_router
from .scheduler import BlockCounter, EngineLimits, Scheduler
from .slo import SLO
from .traffic import Traffic

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


@dataclass(frozen=True)
class SimulationResult:
    """A simulated run: the summary, one row per request (times in seconds), and how many engine
    steps were simulated (``decode_steps`` of them ran decodes)."""

    summary: ServingSummary
    requests: pd.DataFrame
    steps: int = 0
    decode_steps: int = 0


@dataclass(frozen=True)
class Role:
    """One kind of engine in a deployment: how many, their parallelism, limits and step times."""

    name: str  # "replica", "prefill" or "decode"
    instances: int
    tp: int
    limits: EngineLimits
    plan: MemoryPlan
    predictor: StepTimePredictor
    dp: int = 1  # data-parallel ranks per instance, each with these limits and this KV pool

    @property
    def engines(self) -> int:
        """Schedulers of this role over the whole deployment (instances x data-parallel ranks)."""
        return self.instances * self.dp


@dataclass(frozen=True)
class DeploymentModel:
    """A deployment compiled for simulation (and for the analytic estimate)."""

    model: ModelSpec
    deployment: Deployment
    gpu: GPUSpec
    roles: tuple[Role, ...]
    speculation: Speculation | None
    max_model_len: int
    transfer_bytes_per_s: float
    request_overhead_s: float = 0.0
    tokenize_s_per_token: float = 0.0

    @property
    def context_source(self) -> str:
        """Where ``max_model_len`` comes from, for messages."""
        if self.deployment.max_model_len:
            return "the deployment's max_model_len"
        return f"{self.model.name}'s maximum context"

    @property
    def disaggregated(self) -> bool:
        return self.deployment.disaggregation is not None

    def transfer_s(self, prompt_tokens: int) -> float:
        """KV transfer of one prompt from a prefill to a decode instance."""
        return prompt_tokens * kv_bytes_per_token(self.model, self.deployment.kv_cache_dtype) / self.transfer_bytes_per_s


def compile_deployment(model: ModelSpec, deployment: Deployment, gpu: GPUSpec,
                       profile: PerformanceProfile) -> DeploymentModel:
    """Memory plans, limits and step-time predictors of every engine role; InputError if it cannot run."""
    d = deployment
    default_tokens, default_seqs = default_batch_limits(gpu, parse_vllm_version(d.vllm_version))
    max_tokens = d.max_num_batched_tokens or default_tokens
    max_seqs = d.max_num_seqs or default_seqs
    max_model_len = d.max_model_len or model.max_context
    if max_model_len > model.max_context:
        raise InputError(f"max_model_len {max_model_len} exceeds {model.name}'s context of {model.max_context} tokens")
    quantization = d.quantization or MODEL_DTYPE_SCHEME[model.dtype]
    if d.disaggregation is None:
        specs = [("replica", d.replicas, d.tp, max_seqs, max_tokens)]
    else:
        p = d.disaggregation
        specs = [
            ("prefill", p.prefill_instances * d.replicas, p.prefill_tp, p.prefill_max_num_seqs or max_seqs,
             p.prefill_max_num_batched_tokens or max_tokens),
            ("decode", p.decode_instances * d.replicas, p.decode_tp, p.decode_max_num_seqs or max_seqs,
             p.decode_max_num_batched_tokens or max_tokens),
        ]
    roles = []
    speculation = None
    for name, instances, tp, seqs, tokens in specs:
        if tokens < seqs:
            raise InputError(f"{name}: max_num_batched_tokens ({tokens}) must be >= max_num_seqs ({seqs}), as vLLM requires")
        if not d.enable_chunked_prefill and tokens < max_model_len:
            raise InputError(
                f"enable_chunked_prefill is false, so max_num_batched_tokens ({tokens}) must be >= max_model_len "
                f"({max_model_len}), as vLLM requires; raise it or set max_model_len"
            )
        spec = None
        if d.speculative is not None and name != "prefill":
            spec = build_speculation(d.speculative, model, gpu, profile, quantization, d.kv_cache_dtype, tp, d.pp)
            speculation = spec
        plan = plan_memory(
            model, gpu, quantization=quantization, kv_cache_dtype=d.kv_cache_dtype, tp=tp, pp=d.pp,
            dp=d.data_parallel_size,
            gpu_memory_utilization=d.gpu_memory_utilization, max_num_batched_tokens=tokens, max_num_seqs=seqs,
            block_size=d.block_size, max_model_len=max_model_len,
            extra_weights_bytes_per_gpu=spec.head.weights_bytes_per_gpu if spec else 0.0,
            extra_kv_bytes_per_token_per_gpu=spec.head.kv_bytes_per_token_per_gpu if spec else 0.0,
            kv_cache_memory_bytes=d.kv_cache_memory_gib * GIB if d.kv_cache_memory_gib else None,
        )
        if not plan.fits:
            where = f"{name} instances (tp={tp}, pp={d.pp})" if name != "replica" else f"tp={tp}, pp={d.pp}"
            if d.data_parallel_size > 1:
                where += f", data_parallel_size={d.data_parallel_size}"
            raise InputError(f"deployment does not fit in memory on {gpu.name} ({where}): " + "; ".join(plan.problems))
        cost = StepCostModel(model, gpu, profile, quantization, d.kv_cache_dtype, tp, d.pp,
                             internode_bytes_per_s=d.internode_gbps * 1e9, vllm_version=d.vllm_version,
                             dp=d.data_parallel_size, expert_parallel=d.enable_expert_parallel,
                             all2all_backend=d.all2all_backend)
        limits = EngineLimits(seqs, tokens, d.enable_chunked_prefill, plan.kv_cache_blocks // d.pp,
                              prefill_only=name == "prefill")
        roles.append(Role(name, instances, tp, limits, plan, StepTimePredictor(cost, spec), d.data_parallel_size))
    transfer = math.inf
    if d.disaggregation is not None:
        p = d.disaggregation
        same_node = p.same_node if p.same_node is not None else d.gpus_per_replica <= gpu.gpus_per_node
        link = gpu.interconnect_bytes_per_s if same_node else p.rdma_gbps * 1e9
        # Each TP rank sends its shard over its own link.
        transfer = link * min(p.prefill_tp, p.decode_tp)
    return DeploymentModel(model, deployment, gpu, tuple(roles), speculation, max_model_len, transfer,
                           profile.front_end_latency_s(d.frontend),
                           tokenize_s_per_token(parse_vllm_version(d.vllm_version), d.frontend))


def _build_engines(compiled: DeploymentModel, table: RequestTable, rng: np.random.Generator) -> list[Pool]:
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
                                  predictor.window, compiled.speculation if role.name != "prefill" else None, rng)
                lanes.append(Engine(index, sched, predictor, stages))
                index += 1
            # An MoE model's data-parallel ranks step together (their MoE layers span all of them).
            groups.append([LockstepGroup(instance, lanes)] if role.dp > 1 and lockstep else lanes)
        pools.append(Pool(groups, make_router(d.router), data_parallel=role.dp > 1))
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
    concurrency = traffic.arrival.concurrency if traffic.arrival.kind == "closed_loop" else 0
    warmup = max(int(WARMUP_SHARE * n), 2 * concurrency)
    cooldown = max(int(COOLDOWN_SHARE * n), concurrency)
    if warmup + cooldown >= n // 2:
        return keep  # too few requests for a steady state: measure them all (noted in the summary)
    order = np.argsort(np.asarray(table.arrival_s), kind="stable")
    keep[:] = False
    keep[order[warmup:n - cooldown]] = True
    return keep


def _run_once(compiled: DeploymentModel, traffic: Traffic, num_requests: int | None, seed: int,
              slo: SLO | None) -> SimulationResult:
    rng = np.random.default_rng(seed)
    d = compiled.deployment
    drawn = draw_requests(traffic, num_requests, rng, max_model_len=compiled.max_model_len,
                          block_size=d.block_size, prefix_caching=d.enable_prefix_caching,
                          context_source=compiled.context_source)
    table = RequestTable(drawn)
    pools = _build_engines(compiled, table, rng)
    front, decode = pools[0], (pools[1] if len(pools) > 1 else None)
    cluster = Cluster(table, front, decode, compiled.transfer_s if decode else None, compiled.request_overhead_s,
                      compiled.tokenize_s_per_token)
    closed = None
    if traffic.arrival.kind == "closed_loop":
        closed = ClosedLoop(traffic.arrival.concurrency, traffic.arrival.think_time_s)
    try:
        cluster.run(table.arrival_s if closed is None else None, closed,
                    max_plans=max(MIN_PLANS, PLANS_PER_REQUEST * table.size))
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
    summary = summarize(table, engines, measured, slo=slo, open_loop=closed is None,
                        steady_state=not everything, notes=notes)
    steps = sum(r[1] for e in engines for r in e.records)
    decode_steps = sum(r[1] for e in engines for r in e.records if r[7])
    return SimulationResult(summary, table.frame(), int(steps), int(decode_steps))


def _work_limit_message(stop: WorkLimitReached, table: RequestTable, drawn: DrawnRequests) -> str:
    done = sum(1 for t in table.finish_s if not math.isnan(t))
    preempted = sum(table.preemptions)
    return (f"the simulation stopped early: after {stop.plans:,} scheduling rounds ({stop.time_s:,.4g} simulated s) only "
            f"{done:,} of {table.size:,} requests had finished ({preempted:,} preemptions), so this deployment "
            f"cannot reach a steady state under the traffic (mean {drawn.input_tokens.mean():,.0f} prompt and "
            f"{drawn.output_tokens.mean():,.0f} output tokens per request): it is saturated or thrashes its KV "
            "cache; use `servopt predict --analytic`, fewer --requests, or a larger deployment")


def simulate(model: ModelSpec, deployment: Deployment, traffic: Traffic, gpu: GPUSpec, profile: PerformanceProfile,
             *, num_requests: int | None = None, seed: int = 0, slo: SLO | None = None) -> SimulationResult:
    """Simulate ``deployment`` serving ``traffic``; see the module docstring for how many requests run."""
    compiled = compile_deployment(model, deployment, gpu, profile)
    if num_requests is not None and num_requests < 1:
        raise InputError(f"num_requests must be at least 1, got {num_requests}")
    benchmark = traffic.arrival.benchmark_requests if traffic.arrival.kind == "closed_loop" else None
    if benchmark is not None:
        if num_requests not in (None, benchmark):
            raise InputError(f"the benchmark run sends {benchmark} requests (concurrency x requests_per_client); "
                             f"leave num_requests out or set it to that, not {num_requests}")
        num_requests = benchmark
    if num_requests is not None or traffic.arrival.kind == "trace":
        return _run_once(compiled, traffic, num_requests, seed, slo)
    n = INITIAL_REQUESTS
    if traffic.arrival.kind == "closed_loop":
        n = max(n, 40 * traffic.arrival.concurrency)
    while True:
        result = _run_once(compiled, traffic, n, seed, slo)
        s = result.summary
        widths = [s.p99_ci_relative_half_width(m) for m in ("ttft", "tpot") if math.isfinite(getattr(s, f"{m}_s").p99)]
        worst = max(widths, default=0.0)
        if worst <= P99_TOLERANCE or s.saturated or n >= MAX_REQUESTS:
            return result
        # The interval narrows as 1/sqrt(n): jump towards the size that should meet the tolerance (at
        # most 4x: a start-up transient can inflate the first interval).
        scale = (worst / P99_TOLERANCE) ** 2 * 1.2 if math.isfinite(worst) else 4.0
        n = min(MAX_REQUESTS, int(n * min(max(scale, 2.0), 4.0)))
