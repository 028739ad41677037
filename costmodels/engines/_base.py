"""What a serving engine must say for servopt to model it: :class:`EngineRules`.

The cost models are the engine-independent physics (weights, KV bytes, kernels, the event loop);
an engine contributes the rules they are parameterised by. Each method below is one such rule, and
each rule of an engine cites where the engine decides it (``file@tag`` of its source).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..hardware import GPUSpec

Version = tuple[int, int, int]


@dataclass(frozen=True)
class EngineDefaults:
    """A deployment's engine as its release runs it: the generation, the resolved flags and the budget."""

    engine: str
    chunked_prefill: bool
    prefix_caching: bool
    async_scheduling: bool
    max_num_batched_tokens: int | None  # the release's default budget where it depends on the model (V0)
    graph_max_tokens: int  # largest step that replays a CUDA graph (0: none)
    graph_decode_only: bool  # V0 captures decode-only batches (its prefill steps run eagerly)
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class StepRule:
    """The engine's parameters of the step formula that do not depend on the deployment's limits:
    its generation (whose CPU costs the profile fits apart), whether it schedules the next step
    while the GPU runs this one, and its default MoE dispatch/combine backend across DP ranks."""

    generation: str
    async_scheduling: bool
    all2all_backend: str


class EngineRules(ABC):
    """One serving engine's rules (one subclass per engine, registered by :attr:`name`).

    ``export_format`` names the export format (``results``' registry) that writes the engine's
    launch commands and checks them with the engine's own parser.
    """

    # The name a deployment's ``framework`` gives, and the release servopt describes by default.
    name: ClassVar[str]
    current_version: ClassVar[str]
    export_format: ClassVar[str]
    # Tokens per KV-cache block by default.
    block_size: ClassVar[int]
    # The scheduling policies it offers, its default first.
    scheduling_policies: ClassVar[tuple[str, ...]]
    # All-reduce implementations the step model times (the profile prices each one).
    allreduce_implementations: ClassVar[tuple[str, ...]]
    # The MoE dispatch/combine backends across data-parallel ranks, and the collectives each runs.
    all2all_collectives: ClassVar[dict[str, tuple[str, str]]]
    # The load balancer over data-parallel ranks scores a rank waiting x this + running.
    dp_waiting_weight: ClassVar[int]
    # The context assumed when a model's config names no maximum length.
    default_max_model_len: ClassVar[int]
    # The largest step that replays a captured CUDA graph by default.
    graph_max_tokens: ClassVar[int]

    # --- releases ----------------------------------------------------------------------------------
    @abstractmethod
    def version(self, text: str | None) -> Version:
        """(major, minor, patch) of a version string; None means :attr:`current_version`."""

    @abstractmethod
    def release_problem(self, version: Version, *, num_scheduler_steps: int = 1) -> str | None:
        """Why ``version`` cannot run a deployment's flags (None when it can)."""

    @abstractmethod
    def resolve(self, version: Version, **flags) -> EngineDefaults:
        """What the release runs for a deployment (None flags: the release's defaults)."""

    # --- the scheduler's limits --------------------------------------------------------------------
    @abstractmethod
    def batch_limits(self, gpu: GPUSpec, version: Version | None = None) -> tuple[int, int]:
        """(token budget per step, sequences per step) by default on this GPU."""

    @abstractmethod
    def batch_problem(self, max_num_seqs: int, max_num_batched_tokens: int, drafts: int = 0,
                      chunked_prefill: bool = True, max_model_len: int = 0) -> tuple[float, str] | None:
        """(amount, reason) of the first start-up rule of the limits they break, or None."""

    @abstractmethod
    def min_batched_tokens(self, max_num_seqs: int, drafts: int = 0, chunked_prefill: bool = True,
                           max_model_len: int = 0) -> int:
        """The smallest token budget the engine serves these limits with."""

    # --- memory ------------------------------------------------------------------------------------
    @abstractmethod
    def memory_fraction(self, version: Version | None = None) -> float:
        """The default share of GPU memory the engine plans with."""

    @abstractmethod
    def kv_pool_bytes(self, gpu_bytes: float, fraction: float, weights_bytes: float, draft_weights_bytes: float,
                      activation_bytes: float, non_torch_bytes: float) -> float:
        """Bytes per GPU the engine gives its KV pool (before rounding to blocks): ``fraction`` of the
        GPU's memory as the engine reads its flag, with what else each GPU holds (a speculative
        draft model's weights share the pool's budget)."""

    # --- the step ----------------------------------------------------------------------------------
    @abstractmethod
    def step_rule(self, version: Version, pp: int) -> StepRule:
        """The step formula's engine parameters for a release and pipeline depth."""

    @abstractmethod
    def allreduce_implementation(self, message_bytes: float | np.ndarray, num_gpus: int, gpu: GPUSpec,
                                 version: Version, captured: bool | np.ndarray,
                                 nvlink: bool = True) -> str | np.ndarray:
        """Which all-reduce runs a TP message (one of :attr:`allreduce_implementations`)."""

    # --- host and front end ------------------------------------------------------------------------
    @abstractmethod
    def tokenize_s_per_token(self, version: Version, frontend: str) -> float:
        """Seconds the front end spends per prompt token, one request at a time."""

    # --- launch ------------------------------------------------------------------------------------
    @abstractmethod
    def launch_args(self, record: Any, role: Any) -> list[str]:
        """The engine's flags for one instance of a compiled ``role`` of ``record`` (a
        :class:`~servopt.costmodels.serving.compiled.DeploymentRecord` and one of its
        role records: typed loosely, as the records are built on the cost models that ask the
        engines for their rules), in a fixed order."""
