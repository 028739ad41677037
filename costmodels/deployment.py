"""The deployment spec: one point of the search space, as a user writes it in ``deployment.yaml``.

Example:
    >>> d = Deployment.model_validate({"gpu": "h100", "tp": 2, "quantization": "fp8"})
    >>> d.num_gpus, d.kv_cache_dtype, d.enable_chunked_prefill
    (2, 'auto', None)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from .engines import DEFAULT_ENGINE, ENGINES, EngineRules, get_engine
from .errors import MAX_MEMORY_GIB, MAX_TOKENS, Name, Spec
from .quantization import WeightScheme

# The default engine's defaults, which the fields below state when a file leaves them out.
_ENGINE = get_engine(DEFAULT_ENGINE)

# Bounds of what servopt models: beyond them a file is mistyped, and the simulator's work (one
# engine per instance, data-parallel rank and pipeline lane) would run for hours.
MAX_PARALLEL = 512  # TP, PP or DP degree
MAX_ENGINES = 512  # replicas x instances (or DP ranks) x pipeline lanes
MAX_SEQS = 2**20
MAX_BATCHED_TOKENS = 2**24
MIN_LINK_GBPS = 0.01  # 10 MB/s: slower than any datacenter link
MAX_LINK_GBPS = 1e5
# --num-scheduler-steps: vLLM took any count; beyond 64 a file is mistyped (the public runs used 10).
MAX_SCHEDULER_STEPS = 64
# How requests are spread over replicas (serving/router.py says what each does and which the vLLM
# Router offers); servopt searches and exports round_robin unless a workload says otherwise.
RouterPolicy = Literal["round_robin", "power_of_two", "least_outstanding"]
ROUTER = "round_robin"
Degree = Annotated[int, Field(ge=1, le=MAX_PARALLEL)]
Instances = Annotated[int, Field(ge=1, le=MAX_ENGINES)]
Seqs = Annotated[int, Field(ge=1, le=MAX_SEQS)]
BatchedTokens = Annotated[int, Field(ge=1, le=MAX_BATCHED_TOKENS)]
LinkGBps = Annotated[float, Field(ge=MIN_LINK_GBPS, le=MAX_LINK_GBPS)]

SpeculativeMethod = Literal["ngram", "draft_model", "eagle", "eagle3", "mtp"]


class SpeculativeConfig(Spec):
    """Speculative decoding: ``num_speculative_tokens`` drafted per verify step."""

    method: SpeculativeMethod
    num_speculative_tokens: int = Field(ge=1, le=16)
    acceptance_rate: float | None = Field(
        default=None, gt=0, lt=1, description="per-token acceptance; default: the method's published figure"
    )
    draft_model: Name | None = Field(default=None, description="draft model (draft_model, eagle/eagle3 heads)")
    draft_tp: Degree | None = None

    @model_validator(mode="after")
    def _check_draft(self) -> SpeculativeConfig:
        if self.method == "draft_model" and not self.draft_model:
            raise ValueError("method 'draft_model' needs draft_model (a preset alias or Hugging Face id)")
        return self


class DisaggregationConfig(Spec):
    """Prefill/decode disaggregation: P prefill instances and D decode instances.

    Limits left out inherit the deployment's. KV moves over NVLink when a prefill and a decode
    instance share a node, else over RDMA at ``rdma_gbps`` (GB/s per GPU).
    """

    prefill_instances: Instances
    prefill_tp: Degree = 1
    decode_instances: Instances
    decode_tp: Degree = 1
    prefill_max_num_seqs: Seqs | None = None
    prefill_max_num_batched_tokens: BatchedTokens | None = None
    decode_max_num_seqs: Seqs | None = None
    decode_max_num_batched_tokens: BatchedTokens | None = None
    same_node: bool | None = Field(default=None, description="default: when both fit in one node")
    rdma_gbps: LinkGBps = Field(default=50.0, description="cross-node KV link, GB/s (400 Gb/s InfiniBand = 50)")


class Deployment(Spec):
    """One replica configuration, replicated ``replicas`` times behind a router.

    A replica is one ``vllm serve`` instance of ``data_parallel_size`` ranks of ``tp x pp`` GPUs
    (vLLM's ``--data-parallel-size``): each rank has its own scheduler, ``max_num_seqs`` and KV
    cache, the instance's load balancer spreads requests over them, and for MoE models the routed
    experts span all ``data_parallel_size x tp`` GPUs, as tensor-parallel slices or, with
    ``enable_expert_parallel``, as whole experts (:mod:`.moe`).
    """

    gpu: Name
    tp: Degree = 1
    pp: Degree = 1
    data_parallel_size: Degree = Field(default=1, description="vLLM --data-parallel-size: ranks of tp GPUs per replica")
    enable_expert_parallel: bool = Field(
        default=False, description="vLLM --enable-expert-parallel: whole experts per GPU over the dp x tp GPUs")
    all2all_backend: Literal[tuple(_ENGINE.all2all_collectives)] | None = Field(  # type: ignore[valid-type]
        default=None, description="vLLM --all2all-backend for the MoE dispatch across DP ranks; default: vLLM's")
    replicas: Instances = 1
    quantization: WeightScheme | None = Field(
        default=None, description="default: the checkpoint's own, read from its config, else the model dtype"
    )
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    max_num_seqs: Seqs | None = Field(default=None, description="default: vLLM's for the GPU")
    max_num_batched_tokens: BatchedTokens | None = Field(default=None, description="default: vLLM's for the GPU")
    enable_chunked_prefill: bool | None = Field(
        default=None, description="default: the release's (V1: always; V0: only for max_model_len > 32768)")
    enable_prefix_caching: bool | None = Field(default=None, description="default: the release's (V1 on, V0 off)")
    enforce_eager: bool = Field(default=False, description="vLLM --enforce-eager: no CUDA graphs, every kernel launched")
    num_scheduler_steps: int = Field(
        default=1, ge=1, le=MAX_SCHEDULER_STEPS,
        description="vLLM --num-scheduler-steps (V0 multi-step scheduling, releases up to 0.10.0)")
    scheduling_policy: Literal[_ENGINE.scheduling_policies] = Field(  # type: ignore[valid-type]
        default=_ENGINE.scheduling_policies[0],
        description="vLLM --scheduling-policy: fcfs, or priority (requests' priority field, lower first)")
    gpu_memory_utilization: float = Field(default=_ENGINE.memory_fraction(), gt=0, le=1,
                                          description="default: vLLM's for vllm_version (0.9 up to 0.19, then 0.92)")
    max_model_len: int | None = Field(default=None, ge=2, le=MAX_TOKENS)
    kv_cache_memory_gib: float | None = Field(
        default=None, gt=0, le=MAX_MEMORY_GIB,
        description="KV cache per GPU (vLLM's --kv-cache-memory); default: what gpu_memory_utilization leaves")
    block_size: int = Field(default=_ENGINE.block_size, ge=1, le=1024)
    speculative: SpeculativeConfig | None = None
    disaggregation: DisaggregationConfig | None = None
    router: RouterPolicy = Field(
        default=ROUTER, description="how requests are spread over the replicas (serving.router): the vLLM Router's "
        "round_robin or power_of_two, or least_outstanding (no vLLM Router policy)")
    internode_gbps: LinkGBps = Field(default=50.0, description="link between nodes for PP sends, GB/s")
    vllm_version: Name | None = Field(
        default=None, description="the vLLM release serving it (its defaults and scheduling); default: servopt's target")
    frontend: Literal["vllm", "dynamo"] = Field(
        default="vllm", description="the HTTP front end: vLLM's API server (one tokenizer thread) or Dynamo's (parallel)")
    framework: Name = Field(default=DEFAULT_ENGINE, description="the serving engine (servopt models vllm)")

    @field_validator("framework")
    @classmethod
    def _modelled(cls, name: str) -> str:
        get_engine(name)
        return name

    @model_serializer(mode="wrap")
    def _default_framework_unsaid(self, handler: SerializerFunctionWrapHandler) -> dict:
        # A deployment on the default engine is written as servopt wrote it before engines had a
        # name, so that stored trials, caches keyed by the spec and front files stay as they were.
        data = handler(self)
        if data.get("framework") == DEFAULT_ENGINE:
            del data["framework"]
        return data

    @property
    def serving_engine(self) -> EngineRules:
        """The serving engine's rules (:class:`~servopt.costmodels.engines.EngineRules`)."""
        return get_engine(self.framework)

    @property
    def engine_version(self) -> tuple[int, int, int]:
        """The engine release serving it."""
        return self.serving_engine.version(self.vllm_version)

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, data: object) -> object:
        # The fields state the default engine's defaults; a deployment that names its engine or
        # release takes that one's where it leaves them out.
        if isinstance(data, dict) and (data.get("vllm_version") or data.get("framework")):
            framework = data.get("framework") or DEFAULT_ENGINE
            engine = ENGINES.get(framework) if isinstance(framework, str) else None
            if engine is None:
                return data  # not an engine's name: the field's own check says so, naming it
            defaults = {"gpu_memory_utilization": engine.memory_fraction(engine.version(data.get("vllm_version"))),
                        "block_size": engine.block_size}
            data = {**data, **{key: value for key, value in defaults.items() if data.get(key) is None}}
        return data

    @model_validator(mode="after")
    def _check_release(self) -> Deployment:
        problem = self.serving_engine.release_problem(self.engine_version, num_scheduler_steps=self.num_scheduler_steps)
        if problem:
            raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _check_data_parallel(self) -> Deployment:
        if self.data_parallel_size > 1 and self.pp > 1:
            raise ValueError("data_parallel_size > 1 with pp > 1 is not modelled; use tp x data_parallel_size")
        if self.data_parallel_size > 1 and self.disaggregation is not None:
            raise ValueError("data_parallel_size > 1 with disaggregation is not modelled; give each role tp only")
        return self

    @model_validator(mode="after")
    def _check_limits(self) -> Deployment:
        # The rest of vLLM's rule (drafts, max_model_len) needs the model: CompiledDeployment.batch_problem.
        problem = (self.max_num_seqs and self.max_num_batched_tokens
                   and self.serving_engine.batch_problem(self.max_num_seqs, self.max_num_batched_tokens))
        if problem:
            raise ValueError(problem[1])
        if self.engines > MAX_ENGINES:
            raise ValueError(f"{self.engines} engines (replicas x instances or data-parallel ranks x pp) is more "
                             f"than the {MAX_ENGINES} servopt simulates")
        return self

    @property
    def engines(self) -> int:
        """Engines the simulator runs: one per instance (or data-parallel rank) and pipeline lane."""
        d = self.disaggregation
        instances = self.data_parallel_size if d is None else d.prefill_instances + d.decode_instances
        return self.replicas * instances * self.pp

    @property
    def gpus_per_replica(self) -> int:
        if self.disaggregation is not None:
            d = self.disaggregation
            return d.prefill_instances * d.prefill_tp * self.pp + d.decode_instances * d.decode_tp * self.pp
        return self.tp * self.pp * self.data_parallel_size

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_replica * self.replicas
