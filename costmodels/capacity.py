"""Capacity planning: how many replicas a traffic level needs (seed section 7.4).

The seed's rule of thumb, by Little's law: a replica that holds ``C`` requests at once, each for
``occupancy_s`` seconds, serves ``C / occupancy_s`` requests per second, so

    replicas = ceil(peak QPS x occupancy_s / C) x (1 + redundancy)     (rounded up again)

:func:`replica_capacity` fills in ``C`` and ``occupancy_s`` for one replica configuration from the
memory plan and the roofline step model: ``C`` is the smaller of ``max_num_seqs`` and the requests
whose mean context fits the KV cache, and a request occupies its slot for its prefill plus its
output tokens at the decode step time of a full batch. This ignores queueing and the way prefill
chunks slow co-scheduled decodes, so it is a lower bound that a simulation must confirm.

Example (the seed's: 10 QPS, 5 s per request, 20 concurrent requests per GPU, 30% redundancy):
    >>> replicas_needed(10, 5.0, 20)
    3
    >>> replicas_needed(10, 5.0, 20, redundancy=0.3)
    4
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import InputError
from .memory import MemoryPlan
from .roofline import Batch, StepCostModel
from .serving.compiled import DECODE, PREFILL, Role

# Guards against float noise such as 2.0000000000000004 rounding up to 3.
_EPSILON = 1e-9


def replicas_needed(peak_qps: float, occupancy_s: float, per_replica_concurrency: float,
                    redundancy: float = 0.0) -> int:
    """Replicas for ``peak_qps`` requests per second, each holding a slot for ``occupancy_s``.

    ``redundancy`` is the spare share added on top (0.3 = 30%), for failures and bursts.
    """
    if peak_qps < 0 or occupancy_s < 0:
        raise InputError(f"peak QPS and occupancy must be non-negative (got {peak_qps}, {occupancy_s})")
    if per_replica_concurrency <= 0:
        raise InputError(f"per-replica concurrency must be positive (got {per_replica_concurrency})")
    if redundancy < 0:
        raise InputError(f"redundancy must be non-negative (got {redundancy})")
    serving = max(math.ceil(peak_qps * occupancy_s / per_replica_concurrency - _EPSILON), 1)
    return max(math.ceil(serving * (1 + redundancy) - _EPSILON), 1)


@dataclass(frozen=True)
class ReplicaCapacity:
    """What one replica sustains: ``concurrency`` requests at once, each for ``occupancy_s``."""

    concurrency: float
    occupancy_s: float
    kv_limited: bool

    @property
    def requests_per_s(self) -> float:
        """Little's law: the request rate one replica sustains."""
        return self.concurrency / self.occupancy_s

    def replicas_for(self, peak_qps: float, redundancy: float = 0.0) -> int:
        return replicas_needed(peak_qps, self.occupancy_s, self.concurrency, redundancy)


def replica_capacity(cost: StepCostModel, plan: MemoryPlan, *, mean_input_tokens: float,
                     mean_output_tokens: float, max_num_seqs: int, max_num_batched_tokens: int,
                     num_speculative_tokens: int = 0, tokens_per_decode_step: float = 1.0) -> ReplicaCapacity:
    """Capacity of one replica for requests of the given mean lengths.

    With speculative decoding each decode step verifies ``1 + num_speculative_tokens`` tokens per
    sequence and a sequence gains ``tokens_per_decode_step`` of them on average.
    """
    if mean_input_tokens <= 0 or mean_output_tokens <= 0:
        raise InputError("mean input and output tokens must be positive")
    context = mean_input_tokens + mean_output_tokens / 2  # mean context over a request's decode
    kv_fit = plan.kv_capacity_tokens / float(plan.kv_tokens_needed(math.ceil(mean_input_tokens + mean_output_tokens)))
    concurrency = min(float(max_num_seqs), kv_fit)
    if concurrency < 1:
        raise InputError(
            f"one request of {mean_input_tokens + mean_output_tokens:.0f} tokens does not fit the KV cache "
            f"of {plan.kv_capacity_tokens} tokens"
        )
    batch = max(int(concurrency), 1)
    decode_step_s = cost.decode_step_time_s(batch, math.ceil(context), num_speculative_tokens)
    prefill_s = cost.prefill_time_s(math.ceil(mean_input_tokens), max_num_batched_tokens)
    occupancy = prefill_s + mean_output_tokens * decode_step_s / tokens_per_decode_step
    return ReplicaCapacity(concurrency=concurrency, occupancy_s=occupancy, kv_limited=kv_fit < max_num_seqs)


def prefill_capacity(cost: StepCostModel, mean_input_tokens: float, max_num_batched_tokens: int) -> ReplicaCapacity:
    """A P/D prefill instance: as many prompts per step as the token budget holds, one step each."""
    prompt = max(math.ceil(mean_input_tokens), 1)
    per_step = max(max_num_batched_tokens // prompt, 1)
    if per_step > 1:
        step_s = cost.step(Batch(prefill_tokens=[prompt] * per_step)).time_s
    else:
        step_s = cost.prefill_time_s(prompt, max_num_batched_tokens)
    return ReplicaCapacity(concurrency=float(per_step), occupancy_s=step_s, kv_limited=False)


def role_capacity(role: Role, mean_input_tokens: float, mean_output_tokens: float, num_speculative_tokens: int = 0,
                  tokens_per_decode_step: float = 1.0) -> ReplicaCapacity:
    """Capacity of one engine of a compiled role, with its own limits: a replica serves whole
    requests (:func:`replica_capacity`), a prefill instance their prompts (:func:`prefill_capacity`),
    and a decode instance holds a request only while it generates."""
    limits = role.limits
    if role.name == PREFILL:
        return prefill_capacity(role.cost, mean_input_tokens, limits.max_num_batched_tokens)
    cap = replica_capacity(role.cost, role.plan, mean_input_tokens=mean_input_tokens, mean_output_tokens=mean_output_tokens,
                           max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens,
                           num_speculative_tokens=num_speculative_tokens, tokens_per_decode_step=tokens_per_decode_step)
    if role.name == DECODE:
        decode_s = role.cost.decode_step_time_s(max(int(cap.concurrency), 1),
                                                math.ceil(mean_input_tokens + mean_output_tokens / 2), num_speculative_tokens)
        cap = ReplicaCapacity(cap.concurrency, mean_output_tokens * decode_s, cap.kv_limited)
    return cap
