"""The deployment spec: one point of the search space, as a user writes it in ``deployment.yaml``.

Example:
    >>> d = Deployment.model_validate({"gpu": "h100", "tp": 2, "quantization": "fp8"})
    >>> d.num_gpus, d.kv_cache_dtype, d.enable_chunked_prefill
    (2, 'auto', True)
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .vllm_defaults import BLOCK_SIZE, GPU_MEMORY_UTILIZATION

SpeculativeMethod = Literal["ngram", "draft_model", "eagle", "eagle3", "mtp"]


class SpeculativeConfig(BaseModel):
    """Speculative decoding: ``num_speculative_tokens`` drafted per verify step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: SpeculativeMethod
    num_speculative_tokens: int = Field(ge=1, le=16)
    acceptance_rate: float | None = Field(
        default=None, gt=0, lt=1, description="per-token acceptance; default: the method's published figure"
    )
    draft_model: str | None = Field(default=None, description="draft model (draft_model, eagle/eagle3 heads)")
    draft_tp: int | None = Field(default=None, ge=1)

    @model_validator(mode="after")
    def _check_draft(self) -> SpeculativeConfig:
        if self.method == "draft_model" and not self.draft_model:
            raise ValueError("method 'draft_model' needs draft_model (a preset alias or Hugging Face id)")
        return self


class DisaggregationConfig(BaseModel):
    """Prefill/decode disaggregation: P prefill instances and D decode instances.

    Limits left out inherit the deployment's. KV moves over NVLink when a prefill and a decode
    instance share a node, else over RDMA at ``rdma_gbps`` (GB/s per GPU).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    prefill_instances: int = Field(ge=1)
    prefill_tp: int = Field(default=1, ge=1)
    decode_instances: int = Field(ge=1)
    decode_tp: int = Field(default=1, ge=1)
    prefill_max_num_seqs: int | None = Field(default=None, ge=1)
    prefill_max_num_batched_tokens: int | None = Field(default=None, ge=1)
    decode_max_num_seqs: int | None = Field(default=None, ge=1)
    decode_max_num_batched_tokens: int | None = Field(default=None, ge=1)
    same_node: bool | None = Field(default=None, description="default: when both fit in one node")
    rdma_gbps: float = Field(default=50.0, gt=0, description="cross-node KV link, GB/s (400 Gb/s InfiniBand = 50)")


class Deployment(BaseModel):
    """One replica configuration, replicated ``replicas`` times behind a router."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu: str
    tp: int = Field(default=1, ge=1)
    pp: int = Field(default=1, ge=1)
    replicas: int = Field(default=1, ge=1)
    quantization: Literal["bf16", "fp16", "fp8", "int8", "awq", "gptq", "mxfp4"] | None = Field(
        default=None, description="default: implied by the model id, else the model dtype"
    )
    kv_cache_dtype: Literal["auto", "fp8"] = "auto"
    max_num_seqs: int | None = Field(default=None, ge=1, description="default: vLLM's for the GPU")
    max_num_batched_tokens: int | None = Field(default=None, ge=1, description="default: vLLM's for the GPU")
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = Field(default=GPU_MEMORY_UTILIZATION, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    block_size: int = Field(default=BLOCK_SIZE, ge=1)
    speculative: SpeculativeConfig | None = None
    disaggregation: DisaggregationConfig | None = None
    router: Literal["least_outstanding", "round_robin"] = "least_outstanding"
    internode_gbps: float = Field(default=50.0, gt=0, description="link between nodes for PP sends, GB/s")

    @model_validator(mode="after")
    def _check_limits(self) -> Deployment:
        if (self.max_num_seqs and self.max_num_batched_tokens
                and self.max_num_batched_tokens < self.max_num_seqs):
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}), as vLLM requires"
            )
        return self

    @property
    def gpus_per_replica(self) -> int:
        if self.disaggregation is not None:
            d = self.disaggregation
            return d.prefill_instances * d.prefill_tp * self.pp + d.decode_instances * d.decode_tp * self.pp
        return self.tp * self.pp

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_replica * self.replicas

    def instance_gpus(self) -> list[int]:
        """GPUs of each vLLM instance, replica by replica, prefill instances before decode ones."""
        d = self.disaggregation
        if d is None:
            per_replica = [self.tp * self.pp]
        else:
            per_replica = [d.prefill_tp * self.pp] * d.prefill_instances + [d.decode_tp * self.pp] * d.decode_instances
        return per_replica * self.replicas

    def num_nodes(self, gpus_per_node: int) -> int:
        """Nodes the fleet occupies when each instance goes whole onto the next node with room for it
        (one that needs a node or more takes whole nodes of its own), as ``servopt export`` places them.

        >>> Deployment(gpu="h100", tp=2, replicas=3).num_nodes(4)
        2
        """
        nodes, used = 0, 0  # full nodes so far, GPUs taken on the open one
        for gpus in self.instance_gpus():
            if gpus >= gpus_per_node:
                nodes, used = nodes + (1 if used else 0) + -(-gpus // gpus_per_node), 0
            elif used + gpus > gpus_per_node:
                nodes, used = nodes + 1, gpus
            else:
                used += gpus
        return nodes + (1 if used else 0)
