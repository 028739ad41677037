"""One deployment compiled once for every stage that reads it.

:func:`compile_deployment` resolves a :class:`~servopt.costmodels.deployment.Deployment` into its
engine roles (the aggregated replica, or prefill and decode instances), each with its limits
(vLLM's defaults from :mod:`~servopt.costmodels.vllm_defaults` where the deployment leaves them
out), its memory plan and its step-time model. The search's constraints, the capacity formula, the
analytic estimate, the simulation, ``servopt plan`` and the export all read this one object, so a
limit or a memory figure is derived in one place.

Compiling never rejects a configuration: vLLM's start-up rules (:meth:`CompiledDeployment.batch_problem`,
:meth:`CompiledDeployment.memory_problem`) are reported as (amount, reason), where ``amount`` > 0
grows with how far the configuration is off, and :meth:`CompiledDeployment.require` raises the first
one for the simulator. A :class:`CompileCache` shares step models, memory plans and drafters between
the many deployments of a search that differ only in limits or replicas.

Example:
    >>> from servopt.costmodels.architectures import get_model
    >>> from servopt.costmodels.hardware import get_gpu
    >>> from servopt.costmodels.profile import PerformanceProfile
    >>> gpu = get_gpu("h100")
    >>> d = Deployment(gpu="h100", tp=2, max_num_seqs=64, enable_chunked_prefill=False, max_num_batched_tokens=2048,
    ...                max_model_len=8192)
    >>> compiled = compile_deployment(get_model("llama-3.1-8b"), d, gpu, PerformanceProfile.spec_default(gpu))
    >>> [(r.name, r.tp, r.limits.max_num_seqs) for r in compiled.roles]
    [('replica', 2, 64)]
    >>> compiled.batch_problem()[1]
    'without chunked prefill max_num_batched_tokens (2048) must cover max_model_len (8192), as vLLM requires'
    >>> compiled.with_replicas(3).deployment.num_gpus
    6
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from ..architectures import ModelSpec
from ..deployment import Deployment
from ..errors import InputError
from ..hardware import GIB, GPUSpec
from ..memory import MemoryPlan, kv_bytes_per_token, plan_memory
from ..profile import PerformanceProfile
from ..quantization import MODEL_DTYPE_SCHEME
from ..roofline import StepCostModel
from ..speculation import Speculation, build_speculation
from ..vllm_defaults import EngineDefaults, default_batch_limits, parse_vllm_version, resolve_engine, tokenize_s_per_token
from .predictor import StepTimePredictor
from .scheduler import EngineLimits


@dataclass(frozen=True)
class Role:
    """One kind of engine in a deployment: how many (per replica and in the fleet), its
    parallelism, limits, memory plan and step times."""

    name: str  # "replica", "prefill" or "decode"
    per_replica: int
    instances: int
    tp: int
    limits: EngineLimits
    plan: MemoryPlan
    predictor: StepTimePredictor
    dp: int = 1  # data-parallel ranks per instance, each with these limits and this KV pool

    @property
    def cost(self) -> StepCostModel:
        return self.predictor.cost

    @property
    def engines(self) -> int:
        """Schedulers of this role over the whole deployment (instances x data-parallel ranks)."""
        return self.instances * self.dp

    def describe(self, pp: int) -> dict[str, Any]:
        """Plain data for trial records and exports: what each ``vllm serve`` of this role runs with."""
        return {"role": self.name, "instances_per_replica": self.per_replica, "tp": self.tp, "pp": pp,
                "data_parallel_size": self.dp, "max_num_seqs": self.limits.max_num_seqs,
                "max_num_batched_tokens": self.limits.max_num_batched_tokens,
                "weights_bytes_per_gpu": self.plan.weights_bytes_per_gpu,
                "kv_cache_bytes_per_gpu": self.plan.kv_cache_bytes_per_gpu, "gpu_memory_bytes": self.plan.gpu_memory_bytes}


@dataclass(frozen=True)
class CompiledDeployment:
    """A deployment resolved for every stage (see the module docstring).

    ``error`` is set (and ``roles`` empty) when the deployment cannot be built at all, e.g. a
    quantization the GPU cannot run or a TP that does not split the model.
    """

    model: ModelSpec
    deployment: Deployment
    gpu: GPUSpec
    roles: tuple[Role, ...]
    speculation: Speculation | None
    max_model_len: int
    quantization: str
    transfer_bytes_per_s: float
    request_overhead_s: float = 0.0
    tokenize_s_per_token: float = 0.0
    error: str | None = None
    engine: EngineDefaults | None = None

    @property
    def context_source(self) -> str:
        """Where ``max_model_len`` comes from, for messages."""
        if self.deployment.max_model_len:
            return "the deployment's max_model_len"
        return f"{self.model.name}'s maximum context"

    @property
    def disaggregated(self) -> bool:
        return self.deployment.disaggregation is not None

    @property
    def drafts(self) -> int:
        """Tokens drafted per verify step (0 without speculative decoding)."""
        spec = self.deployment.speculative
        return spec.num_speculative_tokens if spec else 0

    def transfer_s(self, prompt_tokens: int) -> float:
        """KV transfer of one prompt from a prefill to a decode instance."""
        return prompt_tokens * kv_bytes_per_token(self.model, self.deployment.kv_cache_dtype) / self.transfer_bytes_per_s

    def with_replicas(self, replicas: int) -> CompiledDeployment:
        """The same deployment with another replica count (nothing is recomputed)."""
        deployment = self.deployment.model_copy(update={"replicas": replicas})
        roles = tuple(replace(r, instances=r.per_replica * replicas) for r in self.roles)
        return replace(self, deployment=deployment, roles=roles)

    # --- vLLM's start-up rules ---------------------------------------------------------------------
    def batch_problem(self) -> tuple[float, str] | None:
        """vLLM's scheduler rules: the token budget covers every sequence (and its drafts), and a
        whole prompt when prefill is not chunked. (amount, reason) of the first broken one."""
        drafts = self.drafts
        for role in self.roles:
            seqs, tokens = role.limits.max_num_seqs, role.limits.max_num_batched_tokens
            need = seqs * (1 + drafts)
            where = "" if role.name == "replica" else f"{role.name}: "
            if tokens < need:
                what = f"max_num_seqs ({seqs})" + (f" x (1 + {drafts} drafts)" if drafts else "")
                return need / tokens - 1, f"{where}max_num_batched_tokens ({tokens}) < {what}, as vLLM requires"
            if not role.limits.chunked_prefill and tokens < self.max_model_len:
                return (self.max_model_len / tokens - 1,
                        f"{where}without chunked prefill max_num_batched_tokens ({tokens}) must cover max_model_len "
                        f"({self.max_model_len}), as vLLM requires")
        return None

    def memory_problem(self) -> tuple[float, str] | None:
        """Weights, activations and one longest request in every role's memory: (amount, reason)."""
        if self.error is not None:
            return 1.0, self.error
        for role in self.roles:
            plan = role.plan
            if not plan.fits:
                budget = plan.budget_bytes_per_gpu
                shortfall = plan.weights_bytes_per_gpu + plan.activation_peak_bytes_per_gpu - budget
                where = f"{role.name} instances (tp={role.tp}, pp={self.deployment.pp})" if role.name != "replica" \
                    else f"tp={role.tp}, pp={self.deployment.pp}"
                if role.dp > 1:
                    where += f", data_parallel_size={role.dp}"
                return (max(shortfall / budget, 0.0) + 0.05,
                        f"does not fit in memory on {self.gpu.name} ({where}): {plan.problems[0]}")
        return None

    def require(self) -> CompiledDeployment:
        """Itself, when vLLM would start it; else InputError with the first broken rule."""
        for problem in (self.memory_problem(), self.batch_problem()):
            if problem is not None:
                raise InputError(f"deployment {problem[1]}")
        return self

    # --- read by the search and the export ---------------------------------------------------------
    def kv_pool_gib(self) -> float:
        """The smallest KV-cache pool across the roles, in GiB per GPU."""
        return min(r.plan.kv_cache_bytes_per_gpu for r in self.roles) / GIB

    def describe_roles(self) -> list[dict[str, Any]]:
        return [r.describe(self.deployment.pp) for r in self.roles]


@dataclass
class CompileCache:
    """Step models, memory plans and drafters shared between compiled deployments (a step model
    tabulates its step times when built, so a search builds each one once)."""

    costs: dict[tuple, tuple[Any, ...]] = field(default_factory=dict)
    plans: dict[tuple, tuple[Any, ...]] = field(default_factory=dict)
    drafters: dict[tuple, tuple[Any, ...]] = field(default_factory=dict)
    predictors: dict[tuple, tuple[Any, ...]] = field(default_factory=dict)

    @staticmethod
    def _get(table: dict, key: tuple, keep: tuple, build):
        # Entries keep the objects whose id() is in the key alive, so an id is never reused.
        hit = table.get(key)
        if hit is None:
            hit = table[key] = (build(), *keep)
        return hit[0]


def compile_deployment(model: ModelSpec, deployment: Deployment, gpu: GPUSpec, profile: PerformanceProfile,
                       cache: CompileCache | None = None) -> CompiledDeployment:
    """Roles, limits, memory plans and step models of a deployment (see the module docstring).

    Raises InputError only for a ``max_model_len`` beyond the model's context (the user's input);
    vLLM's start-up rules are reported, not raised (:meth:`CompiledDeployment.require`).
    """
    cache = cache or CompileCache()
    d = deployment
    version = parse_vllm_version(d.vllm_version)
    default_tokens, default_seqs = default_batch_limits(gpu, version)
    max_seqs = d.max_num_seqs or default_seqs
    max_model_len = d.max_model_len or model.max_context
    if max_model_len > model.max_context:
        raise InputError(f"max_model_len {max_model_len} exceeds {model.name}'s context of {model.max_context} tokens")
    # What the release runs: its engine, the chunked-prefill and prefix-caching flags it resolves to
    # (the compiled deployment carries them), its V0 budget and its CUDA-graph sizes.
    engine = resolve_engine(
        version, pp=d.pp, max_model_len=max_model_len, mla=model.mla is not None,
        sliding_window=bool(model.sliding_window and model.num_sliding_layers), chunked_prefill=d.enable_chunked_prefill,
        prefix_caching=d.enable_prefix_caching, num_scheduler_steps=d.num_scheduler_steps,
        scheduling_policy=d.scheduling_policy, enforce_eager=d.enforce_eager, speculative=d.speculative is not None,
        max_num_seqs=max_seqs, max_num_batched_tokens=d.max_num_batched_tokens or default_tokens,
        blackwell=gpu.architecture == "blackwell")
    max_tokens = d.max_num_batched_tokens or engine.max_num_batched_tokens or default_tokens
    if (d.enable_chunked_prefill, d.enable_prefix_caching) != (engine.chunked_prefill, engine.prefix_caching):
        d = d.model_copy(update={"enable_chunked_prefill": engine.chunked_prefill,
                                 "enable_prefix_caching": engine.prefix_caching})
    quantization = d.quantization or MODEL_DTYPE_SCHEME[model.dtype]
    if d.disaggregation is None:
        specs = [("replica", 1, d.tp, max_seqs, max_tokens)]
    else:
        p = d.disaggregation
        specs = [
            ("prefill", p.prefill_instances, p.prefill_tp, p.prefill_max_num_seqs or max_seqs,
             p.prefill_max_num_batched_tokens or max_tokens),
            ("decode", p.decode_instances, p.decode_tp, p.decode_max_num_seqs or max_seqs,
             p.decode_max_num_batched_tokens or max_tokens),
        ]
    transfer = math.inf
    if d.disaggregation is not None:
        p = d.disaggregation
        same_node = p.same_node if p.same_node is not None else d.gpus_per_replica <= gpu.gpus_per_node
        link = gpu.interconnect_bytes_per_s if same_node else p.rdma_gbps * 1e9
        # Each TP rank sends its shard over its own link.
        transfer = link * min(p.prefill_tp, p.decode_tp)
    common = dict(model=model, deployment=d, gpu=gpu, max_model_len=max_model_len, quantization=quantization, engine=engine,
                  transfer_bytes_per_s=transfer, request_overhead_s=profile.front_end_latency_s(d.frontend),
                  tokenize_s_per_token=tokenize_s_per_token(version, d.frontend))
    roles, speculation = [], None
    try:
        for name, per_replica, tp, seqs, tokens in specs:
            spec = None
            if d.speculative is not None and name != "prefill":
                spec = speculation = cache._get(
                    cache.drafters, (id(model), gpu.name, id(profile), quantization, d.kv_cache_dtype, tp, d.pp,
                                     d.speculative), (model, profile),
                    lambda: build_speculation(d.speculative, model, gpu, profile, quantization, d.kv_cache_dtype, tp, d.pp))
            plan = cache._get(
                cache.plans, (id(model), gpu.name, quantization, d.kv_cache_dtype, tp, d.pp, d.data_parallel_size,
                              d.gpu_memory_utilization, tokens, seqs, d.block_size, max_model_len, id(spec),
                              d.kv_cache_memory_gib), (model, spec),
                lambda: plan_memory(
                    model, gpu, quantization=quantization, kv_cache_dtype=d.kv_cache_dtype, tp=tp, pp=d.pp,
                    dp=d.data_parallel_size,
                    gpu_memory_utilization=d.gpu_memory_utilization, max_num_batched_tokens=tokens,
                    max_num_seqs=seqs, block_size=d.block_size, max_model_len=max_model_len,
                    extra_weights_bytes_per_gpu=spec.head.weights_bytes_per_gpu if spec else 0.0,
                    extra_kv_bytes_per_token_per_gpu=spec.head.kv_bytes_per_token_per_gpu if spec else 0.0,
                    kv_cache_memory_bytes=d.kv_cache_memory_gib * GIB if d.kv_cache_memory_gib else None))
            # One step model per configuration, and one copy per CUDA-graph size sharing its
            # token-count tables (the size decides only which all-reduce runs).
            config = (id(model), gpu.name, id(profile), quantization, d.kv_cache_dtype, tp, d.pp, d.internode_gbps,
                      d.vllm_version, d.data_parallel_size, d.enable_expert_parallel, d.all2all_backend, engine.engine,
                      d.num_scheduler_steps)
            base = cache._get(
                cache.costs, config, (model, profile),
                lambda: StepCostModel(model, gpu, profile, quantization, d.kv_cache_dtype, tp, d.pp,
                                      internode_bytes_per_s=d.internode_gbps * 1e9, vllm_version=d.vllm_version,
                                      dp=d.data_parallel_size, expert_parallel=d.enable_expert_parallel,
                                      all2all_backend=d.all2all_backend, graph_max_tokens=engine.graph_max_tokens,
                                      engine=engine.engine, num_scheduler_steps=d.num_scheduler_steps))
            cost = cache._get(cache.costs, (*config, engine.graph_max_tokens), (base,),
                              lambda: base.with_graph_max_tokens(engine.graph_max_tokens))
            limits = EngineLimits(seqs, tokens, d.enable_chunked_prefill, plan.kv_cache_blocks // d.pp,
                                  prefill_only=name == "prefill", scheduling_policy=d.scheduling_policy)
            predictor = cache._get(cache.predictors, (id(cost), id(spec)), (cost, spec),
                                   lambda: StepTimePredictor(cost, spec))
            roles.append(Role(name, per_replica, per_replica * d.replicas, tp, limits, plan, predictor,
                              d.data_parallel_size))
    except InputError as err:
        return CompiledDeployment(roles=(), speculation=None, error=str(err), **common)
    return CompiledDeployment(roles=tuple(roles), speculation=speculation, **common)
