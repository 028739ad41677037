"""The deployment spec: one point of the search space, as a user writes it in ``deployment.yaml``.

Example:
    >>> d = Deployment.model_validate({"gpu": "h100", "tp": 2, "quantization": "fp8"})
    >>> d.num_gpus, d.kv_cache_dtype, d.enable_chunked_prefill
    (2, 'auto', True)
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from .errors import MAX_TOKENS, Name, Spec
from .vllm_defaults import BLOCK_SIZE, GPU_MEMORY_UTILIZATION

# Bounds of what servopt models: beyond them a file is mistyped, and the simulator's work (one
# engine per instance and pipeline lane) would run for hours.
MAX_PARALLEL = 512  # TP or PP degree
MAX_ENGINES = 512  # replicas x instances x pipeline lanes
MAX_SEQS = 2**20
MAX_BATCHED_TOKENS = 2**24
MIN_LINK_GBPS = 0.01  # 10 MB/s: slower than any datacenter link
MAX_LINK_GBPS = 1e5
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
    """One replica configuration, replicated ``replicas`` times behind a router."""

    gpu: Name
    tp: Degree = 1
    pp: Degree = 1
    replicas: Instances = 1
    quantization: Literal["bf16", "fp16", "fp8", "int8", "awq", "gptq", "mxfp4"] | None = Field(
        default=None, description="default: implied by the model id, else the model dtype"
    )
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    max_num_seqs: Seqs | None = Field(default=None, description="default: vLLM's for the GPU")
    max_num_batched_tokens: BatchedTokens | None = Field(default=None, description="default: vLLM's for the GPU")
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = Field(default=GPU_MEMORY_UTILIZATION, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=2, le=MAX_TOKENS)
    block_size: int = Field(default=BLOCK_SIZE, ge=1, le=1024)
    speculative: SpeculativeConfig | None = None
    disaggregation: DisaggregationConfig | None = None
    router: Literal["least_outstanding", "round_robin"] = "least_outstanding"
    internode_gbps: LinkGBps = Field(default=50.0, description="link between nodes for PP sends, GB/s")

    @model_validator(mode="after")
    def _check_limits(self) -> Deployment:
        if (self.max_num_seqs and self.max_num_batched_tokens
                and self.max_num_batched_tokens < self.max_num_seqs):
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )
        if self.engines > MAX_ENGINES:
            raise ValueError(
                f"{self.engines} engines (replicas x instances x pp) is more than the {MAX_ENGINES} servopt simulates"
            )
        return self

    @property
    def engines(self) -> int:
        """Engine instances the simulator runs: one per replica (or P/D instance) and pipeline lane."""
        d = self.disaggregation
        instances = 1 if d is None else d.prefill_instances + d.decode_instances
        return self.replicas * instances * self.pp

    @property
    def gpus_per_replica(self) -> int:
        if self.disaggregation is not None:
            d = self.disaggregation
            return d.prefill_instances * d.prefill_tp * self.pp + d.decode_instances * d.decode_tp * self.pp
        return self.tp * self.pp

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_replica * self.replicas
