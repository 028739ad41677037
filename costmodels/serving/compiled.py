"""One deployment compiled once for every stage that reads it, from candidate to export.

:func:`compile_deployment` resolves a :class:`~servopt.costmodels.deployment.Deployment` and the
weights it serves (:class:`~servopt.costmodels.weights.WeightsOption`: the checkpoint, hence the
scheme and what ``--kv-cache-dtype auto`` means) into its engine roles, in one vocabulary from the
YAML to the export: the aggregated ``replica``, or ``prefill`` and ``decode`` instances. Each
:class:`Role` has its limits (the engine's defaults from :mod:`~servopt.costmodels.engines` where
the deployment leaves them out), its memory plan, its step-time model and its placements (which
node and GPUs each instance runs on, :func:`place`). The search's constraints, the capacity
formula, the analytic estimate, the simulation, ``servopt plan`` and the calibration read this one
object, so a limit or a memory figure is derived in one place; :meth:`CompiledDeployment.record`
freezes it into a :class:`DeploymentRecord`, the typed data that trial records, front.json and the
exporters (vLLM, SGLang) read.

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
    >>> bigger = compiled.with_replicas(5)
    >>> bigger.deployment.num_gpus, [(p.node, p.devices) for p in bigger.roles[0].placements][3:]
    (10, [(0, [6, 7]), (1, [0, 1])])
    >>> record = bigger.record()
    >>> record.weights.scheme, record.roles[0].max_num_batched_tokens, record.num_nodes
    ('bf16', 2048, 2)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ..architectures import ModelSpec
from ..deployment import MAX_ENGINES, Deployment, DisaggregationConfig, SpeculativeConfig
from ..errors import InputError
from ..hardware import GIB, GPUSpec
from ..memory import MemoryPlan, kv_bytes_per_token, plan_memory
from ..profile import PerformanceProfile
from ..roofline import StepCostModel
from ..speculation import Speculation, build_speculation
from ..engines import EngineDefaults
from ..weights import WeightsOption
from .predictor import StepTimePredictor
from .scheduler import EngineLimits

# The roles of a deployment's vLLM instances: one vocabulary from the YAML to the export.
REPLICA, PREFILL, DECODE = "replica", "prefill", "decode"
ROLES = (REPLICA, PREFILL, DECODE)
# How servopt versions before this vocabulary spelled an aggregated instance's role ("serve" in
# export plans, "aggregated" in messages); old job folders are still read.
ROLE_SPELLINGS = {"serve": REPLICA, "aggregated": REPLICA}


def role_name(text: str) -> str:
    """The role a name (current or old spelling) stands for.

    >>> role_name("serve"), role_name("decode")
    ('replica', 'decode')
    """
    name = ROLE_SPELLINGS.get(text, text)
    if name not in ROLES:
        raise InputError(f"role '{text}' is not one of {', '.join(ROLES)}")
    return name


def role_layout(deployment: Deployment) -> tuple[tuple[str, int, int], ...]:
    """(role, instances per replica, TP) of each kind of vLLM instance a deployment runs, prefill
    before decode; read from the deployment alone, so also for one that cannot be compiled."""
    p = deployment.disaggregation
    if p is None:
        return ((REPLICA, 1, deployment.tp),)
    return ((PREFILL, p.prefill_instances, p.prefill_tp), (DECODE, p.decode_instances, p.decode_tp))


@dataclass(frozen=True)
class Placement:
    """One vLLM instance's place: its replica, role, first node, first GPU there, and GPU count."""

    replica: int
    role: str
    node: int
    first_gpu: int
    gpus: int
    gpus_per_node: int

    @property
    def nodes(self) -> list[int]:
        """Every node it occupies (pipeline stages beyond the first node take whole nodes)."""
        return list(range(self.node, self.node + -(-self.gpus // self.gpus_per_node)))

    @property
    def devices(self) -> list[int]:
        """Its GPUs on the first node (CUDA_VISIBLE_DEVICES there)."""
        return list(range(self.first_gpu, self.first_gpu + min(self.gpus, self.gpus_per_node)))


def place(deployment: Deployment, gpus_per_node: int) -> list[Placement]:
    """Where each instance runs, replica by replica, prefill instances before decode ones: whole
    onto the next node with room for it; one that needs a node or more takes whole nodes of its
    own (its pipeline stages span the next ones). The export starts them there and whole-node
    pricing rents those nodes.

    >>> [(p.node, p.first_gpu) for p in place(Deployment(gpu="h100", tp=2, replicas=3), 4)]
    [(0, 0), (0, 2), (1, 0)]
    """
    d = deployment
    per_replica = [(role, tp * d.pp * (d.data_parallel_size if role == REPLICA else 1))
                   for role, count, tp in role_layout(d) for _ in range(count)]
    out, node, used = [], 0, 0  # the open node and the GPUs taken on it
    for replica in range(d.replicas):
        for role, gpus in per_replica:
            if used and used + min(gpus, gpus_per_node) > gpus_per_node:
                node, used = node + 1, 0
            out.append(Placement(replica, role, node, used, gpus, gpus_per_node))
            if gpus >= gpus_per_node:
                node, used = node + -(-gpus // gpus_per_node), 0
            else:
                used += gpus
    return out


def num_nodes(deployment: Deployment, gpus_per_node: int) -> int:
    """Nodes the fleet occupies as :func:`place` places it, in time that does not grow with the
    replicas (a fleet sized for 10^6 requests/s has 10^5 of them): every replica is placed alike, so
    the GPUs taken on the open node after each replica repeat within ``gpus_per_node`` replicas, and
    whole repeats are counted at once.

    >>> num_nodes(Deployment(gpu="h100", tp=2, replicas=3), 4)
    2
    >>> d = Deployment(gpu="h100", tp=2, replicas=3)
    >>> num_nodes(d.model_copy(update={"replicas": 100_001}), 8) == place(d.model_copy(update={"replicas": 100_001}), 8)[-1].nodes[-1] + 1
    True
    """
    d = deployment
    per_replica = [(role, tp * d.pp * (d.data_parallel_size if role == REPLICA else 1))
                   for role, count, tp in role_layout(d) for _ in range(count)]

    def one_replica(used: int) -> tuple[int, int, int]:
        """From ``used`` GPUs taken on the open node: nodes opened, GPUs then taken, and the last node
        the replica occupies (relative to the open node), as :func:`place` goes."""
        node = last = 0
        for _, gpus in per_replica:
            if used and used + min(gpus, gpus_per_node) > gpus_per_node:
                node, used = node + 1, 0
            last = node + -(-gpus // gpus_per_node) - 1
            if gpus >= gpus_per_node:
                node, used = node + -(-gpus // gpus_per_node), 0
            else:
                used += gpus
        return node, used, last

    node, used, last, replica = 0, 0, 0, 0
    seen: dict[int, tuple[int, int]] = {}  # GPUs taken before a replica -> (that replica, its node)
    while replica < d.replicas:
        if used in seen:  # the same state again: skip the whole repeats that fit
            first, first_node = seen.pop(used)
            period, gain = replica - first, node - first_node
            repeats = (d.replicas - replica) // period
            node, last, replica = node + repeats * gain, last + repeats * gain, replica + repeats * period
            seen.clear()
            if replica == d.replicas:
                break
        seen[used] = (replica, node)
        opened, used, end = one_replica(used)
        last, node, replica = node + end, node + opened, replica + 1
    return last + 1


@dataclass(frozen=True)
class Role:
    """One kind of engine in a deployment: how many (per replica and in the fleet), its
    parallelism, limits, memory plan, step times and where each instance runs."""

    name: str  # REPLICA, PREFILL or DECODE
    per_replica: int
    instances: int
    tp: int
    limits: EngineLimits
    plan: MemoryPlan
    predictor: StepTimePredictor
    dp: int = 1  # data-parallel ranks per instance, each with these limits and this KV pool
    placements: tuple[Placement, ...] = ()  # each instance of the fleet, in the fleet's order

    @property
    def cost(self) -> StepCostModel:
        return self.predictor.cost

    @property
    def engines(self) -> int:
        """Schedulers of this role over the whole deployment (instances x data-parallel ranks)."""
        return self.instances * self.dp

    @property
    def generates(self) -> bool:
        """Whether its instances decode (every role but a P/D prefill instance)."""
        return self.name != PREFILL

    def record(self, pp: int) -> RoleRecord:
        return RoleRecord(role=self.name, instances_per_replica=self.per_replica, tp=self.tp, pp=pp,
                          data_parallel_size=self.dp, max_num_seqs=self.limits.max_num_seqs,
                          max_num_batched_tokens=self.limits.max_num_batched_tokens,
                          weights_bytes_per_gpu=self.plan.weights_bytes_per_gpu,
                          kv_cache_bytes_per_gpu=self.plan.kv_cache_bytes_per_gpu,
                          gpu_memory_bytes=self.plan.gpu_memory_bytes)


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
    weights: WeightsOption
    transfer_bytes_per_s: float
    gpus_per_node: int
    request_overhead_s: float = 0.0
    tokenize_s_per_token: float = 0.0
    error: str | None = None
    engine: EngineDefaults | None = None

    @property
    def quantization(self) -> str:
        """The weight scheme served (the weights option's)."""
        return self.weights.scheme

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

    def role(self, name: str) -> Role:
        """The role called ``name`` (KeyError when the deployment has none)."""
        for role in self.roles:
            if role.name == name:
                return role
        raise KeyError(name)

    def transfer_s(self, prompt_tokens: int) -> float:
        """KV transfer of one prompt from a prefill to a decode instance."""
        return prompt_tokens * kv_bytes_per_token(self.model, self.deployment.kv_cache_dtype) / self.transfer_bytes_per_s

    def with_replicas(self, replicas: int) -> CompiledDeployment:
        """The same deployment with another replica count (only the placements are recomputed). A
        fleet of more replicas than servopt simulates (:data:`~servopt.costmodels.deployment.MAX_ENGINES`:
        one that a rate beyond every GPU limit asks for) is not placed: it is only ever refused, and
        placing 10^5 replicas cost seconds and gigabytes per trial."""
        deployment = self.deployment.model_copy(update={"replicas": replicas})
        placements = place(deployment, self.gpus_per_node) if replicas <= MAX_ENGINES else []
        roles = tuple(replace(r, instances=r.per_replica * replicas,
                              placements=tuple(p for p in placements if p.role == r.name)) for r in self.roles)
        return replace(self, deployment=deployment, roles=roles)

    # --- vLLM's start-up rules ---------------------------------------------------------------------
    def batch_problem(self) -> tuple[float, str] | None:
        """vLLM's scheduler rules: the token budget covers every sequence (and its drafts), and a
        whole prompt when prefill is not chunked. (amount, reason) of the first broken one."""
        for role in self.roles:
            limits = role.limits
            problem = self.deployment.serving_engine.batch_problem(
                limits.max_num_seqs, limits.max_num_batched_tokens, self.drafts, limits.chunked_prefill, self.max_model_len)
            if problem is not None:
                where = "" if role.name == REPLICA else f"{role.name}: "
                return problem[0], where + problem[1]
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
                where = f"{role.name} instances (tp={role.tp}, pp={self.deployment.pp})" if role.name != REPLICA \
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

    def kv_pool_tokens(self) -> float:
        """Tokens of full-attention context the KV blocks of every engine that decodes hold (the
        prefix cache's capacity; sliding-window layers hold less, never more)."""
        return float(sum(r.plan.kv_cache_blocks * r.plan.block_size / r.plan.layout.groups * r.engines
                         for r in self.roles if r.generates))

    def record(self) -> DeploymentRecord:
        """The frozen, typed record of this deployment: what trial records, front.json and the
        exporters keep of it (see :class:`DeploymentRecord`)."""
        return DeploymentRecord(spec=self.deployment, model=self.model.name, moe=self.model.moe is not None,
                                weights=WeightsRecord.model_validate(self.weights.describe()),
                                max_model_len=self.max_model_len, gpus_per_node=self.gpus_per_node,
                                roles=tuple(r.record(self.deployment.pp) for r in self.roles), error=self.error)


# --- the record --------------------------------------------------------------------------------------
class _Record(BaseModel):
    # Read back from servopt's own files (study records, front.json): lenient about fields that
    # other servopt versions wrote and this one dropped, strict about the types of the rest.
    model_config = ConfigDict(frozen=True, extra="ignore")


class WeightsRecord(_Record):
    """What ``vllm serve`` loads: the checkpoint, its ``--quantization`` method (None: 16-bit
    weights, served with ``--dtype``), what ``--kv-cache-dtype auto`` stores for it, why it can be
    served, its format in words and the kernels vLLM runs it with, which config its architecture was
    read from, and that config's context."""

    scheme: str
    serve_id: str
    vllm_quantization: str | None = None
    kv_cache_auto: str = "auto"
    source: str = ""
    format: str | None = None
    kernels: str | None = None
    config_source: str = ""
    max_context: int | None = None


class RoleRecord(_Record):
    """One role as compiled: instances per replica, parallelism, vLLM's limits as resolved (the
    deployment's, else vLLM's defaults for the GPU) and the memory plan's figures per GPU."""

    role: str
    instances_per_replica: int
    tp: int
    pp: int = 1
    data_parallel_size: int = 1  # records written before data parallelism ran one rank
    max_num_seqs: int
    max_num_batched_tokens: int
    weights_bytes_per_gpu: float | None = None
    kv_cache_bytes_per_gpu: float | None = None
    gpu_memory_bytes: float | None = None

    _role = field_validator("role", mode="before")(classmethod(lambda cls, value: role_name(value)))

    @property
    def gpus_per_instance(self) -> int:
        return self.tp * self.pp * self.data_parallel_size


class DeploymentRecord(_Record):
    """A compiled deployment, frozen: the spec as searched, the weights served, every limit vLLM is
    started with (per role, defaults resolved), ``max_model_len`` resolved, and where each instance
    runs. What trial records and front.json keep, and what ``launch_plan``, ``engine_args``,
    ``sglang_plan`` and the Kubernetes export read; nothing downstream derives a limit again.

    ``spec`` keeps the deployment's own fields (the flags it sets: quantization, KV cache dtype,
    chunked prefill, prefix caching, scheduling policy, speculative decoding, ...). ``roles`` is
    empty when the deployment could not be compiled (``error`` says why). ``moe``, ``gpus_per_node``
    and ``weights`` are None only in records of old jobs that did not keep them.

    Example:
        >>> from servopt.costmodels.architectures import get_model
        >>> from servopt.costmodels.hardware import get_gpu
        >>> from servopt.costmodels.profile import PerformanceProfile
        >>> gpu = get_gpu("h100")
        >>> d = Deployment(gpu="h100", disaggregation={"prefill_instances": 1, "prefill_tp": 2, "decode_instances": 2})
        >>> record = compile_deployment(get_model("llama-3.1-8b"), d, gpu, PerformanceProfile.spec_default(gpu)).record()
        >>> [(role.role, p.node, p.devices) for role, p in record.instances()]
        [('prefill', 0, [0, 1]), ('decode', 0, [2]), ('decode', 0, [3])]
        >>> DeploymentRecord.model_validate_json(record.model_dump_json()) == record
        True
    """

    spec: Deployment
    model: str
    moe: bool | None = None
    weights: WeightsRecord | None = None
    max_model_len: int
    gpus_per_node: int | None = Field(default=None, ge=1, le=1024)
    roles: tuple[RoleRecord, ...] = ()
    error: str | None = None

    @field_validator("spec", mode="wrap")
    @classmethod
    def _spec(cls, value: Any, handler: Any, info: ValidationInfo) -> Deployment:
        # A point the search rejected for breaking one of the spec's own rules (a token budget below
        # max_num_seqs, data parallelism with pipeline stages) was recorded as drawn: keep it so,
        # unless the reader asks for a spec that passed them (context strict_spec: front.json).
        if isinstance(value, Deployment):  # compiled here: as it was built
            return value
        try:
            return handler(value)
        except ValidationError:
            if not isinstance(value, dict) or (info.context or {}).get("strict_spec"):
                raise
            parts = {"speculative": SpeculativeConfig, "disaggregation": DisaggregationConfig}
            return Deployment.model_construct(**{k: parts[k].model_construct(**v) if k in parts and isinstance(v, dict)
                                                 else v for k, v in value.items()})

    @property
    def quantization(self) -> str:
        """The weight scheme served."""
        return self.weights.scheme if self.weights else self.spec.quantization

    def role(self, name: str) -> RoleRecord:
        """The role called ``name`` (KeyError when the deployment has none)."""
        for role in self.roles:
            if role.role == name:
                return role
        raise KeyError(name)

    @cached_property
    def placements(self) -> tuple[Placement, ...]:
        """Every instance of the fleet, in order (:func:`place`, on ``gpus_per_node`` GPUs a node)."""
        if self.gpus_per_node is None:
            raise InputError("this record of an old job does not say how many GPUs a node has; run servopt report "
                             "on the job folder to write it again")
        return tuple(place(self.spec, self.gpus_per_node))

    def instances(self) -> list[tuple[RoleRecord, Placement]]:
        """(role, placement) of every instance, in the fleet's order (replica by replica, prefill
        instances before decode ones)."""
        roles = {role.role: role for role in self.roles}
        return [(roles[p.role], p) for p in self.placements]

    @property
    def num_nodes(self) -> int:
        return self.placements[-1].nodes[-1] + 1

    @property
    def speculative(self) -> SpeculativeConfig | None:
        return self.spec.speculative


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
                       cache: CompileCache | None = None, *, weights: WeightsOption | None = None,
                       gpus_per_node: int | None = None) -> CompiledDeployment:
    """Roles, limits, memory plans, step models and placements of a deployment (see the module docstring).

    ``weights``: the checkpoint served, whose architecture (with its format: bytes per weight, what
    ``--kv-cache-dtype auto`` stores) is priced instead of ``model``'s; by default ``model`` as it
    is, in the deployment's ``quantization``, else in the checkpoint's own format, else its dtype
    (:meth:`WeightsOption.as_is`). The compiled deployment's spec states that scheme.
    ``gpus_per_node``: the node size instances are placed on (default: the GPU's).

    Raises InputError only for a ``max_model_len`` beyond the model's context (the user's input);
    vLLM's start-up rules are reported, not raised (:meth:`CompiledDeployment.require`).
    """
    cache = cache or CompileCache()
    d = deployment
    weights = weights or WeightsOption.as_is(model, d.quantization)
    model, quantization = weights.spec, weights.scheme
    if d.quantization != quantization:  # the spec states the scheme served from here on
        d = d.model_copy(update={"quantization": quantization})
    gpus_per_node = gpus_per_node or gpu.gpus_per_node
    serving, version = d.serving_engine, d.engine_version
    default_tokens, default_seqs = serving.batch_limits(gpu, version)
    max_seqs = d.max_num_seqs or default_seqs
    max_model_len = d.max_model_len or model.max_context
    if max_model_len > model.max_context:
        raise InputError(f"max_model_len {max_model_len} exceeds {model.name}'s context of {model.max_context} tokens")
    # What the release runs: its engine, the chunked-prefill and prefix-caching flags it resolves to
    # (the compiled deployment carries them), its V0 budget and its CUDA-graph sizes.
    engine = serving.resolve(
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
    # Each role's own limits where the disaggregation gives them, else the deployment's.
    p = d.disaggregation
    own = {} if p is None else {PREFILL: (p.prefill_max_num_seqs, p.prefill_max_num_batched_tokens),
                                DECODE: (p.decode_max_num_seqs, p.decode_max_num_batched_tokens)}
    specs = []
    for name, per_replica, tp in role_layout(d):
        seqs, tokens = own.get(name, (None, None))
        specs.append((name, per_replica, tp, seqs or max_seqs, tokens or max_tokens))
    placements = place(d, gpus_per_node)
    transfer = math.inf
    if d.disaggregation is not None:
        p = d.disaggregation
        same_node = p.same_node if p.same_node is not None else d.gpus_per_replica <= gpu.gpus_per_node
        link = gpu.interconnect_bytes_per_s if same_node else p.rdma_gbps * 1e9
        # Each TP rank sends its shard over its own link.
        transfer = link * min(p.prefill_tp, p.decode_tp)
    common = dict(model=model, deployment=d, gpu=gpu, max_model_len=max_model_len, weights=weights, engine=engine,
                  gpus_per_node=gpus_per_node, transfer_bytes_per_s=transfer,
                  request_overhead_s=profile.front_end_latency_s(d.frontend),
                  tokenize_s_per_token=serving.tokenize_s_per_token(version, d.frontend))
    roles, speculation = [], None
    try:
        for name, per_replica, tp, seqs, tokens in specs:
            spec = None
            if d.speculative is not None and name != PREFILL:
                spec = speculation = cache._get(
                    cache.drafters, (id(model), gpu.name, id(profile), quantization, d.kv_cache_dtype, tp, d.pp,
                                     d.speculative), (model, profile),
                    lambda: build_speculation(d.speculative, model, gpu, profile, quantization, d.kv_cache_dtype, tp, d.pp))
            plan = cache._get(
                cache.plans, (id(model), gpu.name, quantization, d.kv_cache_dtype, tp, d.pp, d.data_parallel_size,
                              d.gpu_memory_utilization, tokens, seqs, d.block_size, max_model_len, id(spec),
                              d.kv_cache_memory_gib, d.framework), (model, spec),
                lambda: plan_memory(
                    model, gpu, quantization=quantization, kv_cache_dtype=d.kv_cache_dtype, tp=tp, pp=d.pp,
                    dp=d.data_parallel_size,
                    gpu_memory_utilization=d.gpu_memory_utilization, max_num_batched_tokens=tokens,
                    max_num_seqs=seqs, block_size=d.block_size, max_model_len=max_model_len,
                    extra_weights_bytes_per_gpu=spec.head.weights_bytes_per_gpu if spec else 0.0,
                    extra_kv_bytes_per_token_per_gpu=spec.head.kv_bytes_per_token_per_gpu if spec else 0.0,
                    kv_cache_memory_bytes=d.kv_cache_memory_gib * GIB if d.kv_cache_memory_gib else None,
                    framework=d.framework))
            # One step model per configuration, and one copy per CUDA-graph size sharing its
            # token-count tables (the size decides only which all-reduce runs).
            config = (id(model), gpu.name, id(profile), quantization, d.kv_cache_dtype, tp, d.pp, d.internode_gbps,
                      d.vllm_version, d.data_parallel_size, d.enable_expert_parallel, d.all2all_backend, engine.engine,
                      d.num_scheduler_steps, d.framework)
            base = cache._get(
                cache.costs, config, (model, profile),
                lambda: StepCostModel(model, gpu, profile, quantization, d.kv_cache_dtype, tp, d.pp,
                                      internode_bytes_per_s=d.internode_gbps * 1e9, vllm_version=d.vllm_version,
                                      dp=d.data_parallel_size, expert_parallel=d.enable_expert_parallel,
                                      all2all_backend=d.all2all_backend, graph_max_tokens=engine.graph_max_tokens,
                                      engine=engine.engine, num_scheduler_steps=d.num_scheduler_steps,
                                      framework=d.framework))
            cost = cache._get(cache.costs, (*config, engine.graph_max_tokens), (base,),
                              lambda: base.with_graph_max_tokens(engine.graph_max_tokens))
            limits = EngineLimits(seqs, tokens, d.enable_chunked_prefill, plan.kv_cache_blocks // d.pp,
                                  prefill_only=name == PREFILL, scheduling_policy=d.scheduling_policy)
            predictor = cache._get(cache.predictors, (id(cost), id(spec)), (cost, spec),
                                   lambda: StepTimePredictor(cost, spec))
            roles.append(Role(name, per_replica, per_replica * d.replicas, tp, limits, plan, predictor,
                              d.data_parallel_size, tuple(pl for pl in placements if pl.role == name)))
    except InputError as err:
        return CompiledDeployment(roles=(), speculation=None, error=str(err), **common)
    return CompiledDeployment(roles=tuple(roles), speculation=speculation, **common)
