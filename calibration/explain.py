"""Where a simulated run's TTFT and TPOT go: kernels, collectives, host, queueing and client.

``servopt validate --e2e TABLE --explain`` prints, next to every row's measured and predicted mean
TTFT and TPOT, the parts of the prediction, so that a miss points at the component that makes it:

- **client**: the front end before the engine sees the request (its latency, ``request_overhead_s``
  of the profile, and its tokenization, one prompt at a time behind vLLM's API server), as a
  request's first token pays it (TTFT only).
- **queueing**: time between reaching the engine and its first scheduled step (waiting behind
  other requests, for a free slot or KV blocks); in TPOT, what the request's decode steps take
  beyond a plain decode step of its batch: other requests' prefill chunks in the same steps, and
  preemptions.
- **kernels**, **collectives**, **host**: the request's own prefill (TTFT) or a decode step of its
  batch (TPOT) split by the roofline's operator breakdown: GPU kernels, the tensor/pipeline/expert
  parallel communication, and the engine's CPU time that async scheduling does not hide.

The step splits are the roofline's shares of a representative step (the request's prompt as one
chunk after its cached prefix; a decode step of the run's mean batch at its mean context), applied
to the simulated durations; the parts add up to the predicted means.

Example:
    >>> PARTS
    ('client', 'queueing', 'kernels', 'collectives', 'host')
"""

from __future__ import annotations

import numpy as np

from ..costmodels.profile import PerformanceProfile
from ..costmodels.roofline import Batch
from ..costmodels.serving.simulator import simulate_compiled
from .corpus import MeasuredRun, compiled_run

PARTS = ("client", "queueing", "kernels", "collectives", "host")
# Operators of the roofline's breakdown (StepTime.operators_s) that are communication between GPUs
# (tensor and pipeline parallel; an MoE model's dispatch and combine are counted there too), and the
# engine's CPU time.
COLLECTIVE_OPS = ("tp_pp_communication",)
HOST_OPS = ("step_overhead",)


def _shares(breakdown: dict[str, float]) -> dict[str, float]:
    """kernels / collectives / host shares of a step's time."""
    total = sum(breakdown.values()) or 1.0
    collectives = sum(breakdown.get(k, 0.0) for k in COLLECTIVE_OPS)
    host = sum(breakdown.get(k, 0.0) for k in HOST_OPS)
    return {"kernels": (total - collectives - host) / total, "collectives": collectives / total, "host": host / total}


def explain_run(run: MeasuredRun, profile: PerformanceProfile, seed: int = 0) -> dict[str, float]:
    """``ttft_<part>_ms`` and ``tpot_<part>_ms`` of a run's predicted means (module docstring)."""
    compiled = compiled_run(run, profile)
    requests = simulate_compiled(compiled, run.traffic, seed=seed).requests
    role = compiled.roles[0]
    cost = role.cost
    prompt = requests.input_tokens.to_numpy(float)
    cached = requests.cached_tokens.to_numpy(float)
    output = requests.output_tokens.to_numpy(float)
    arrival, scheduled = requests.arrival_s.to_numpy(), requests.scheduled_s.to_numpy()
    first, finish = requests.first_token_s.to_numpy(), requests.finish_s.to_numpy()
    client = compiled.request_overhead_s + compiled.tokenize_s_per_token * prompt
    queueing = np.maximum(scheduled - arrival - client, 0.0)
    prefill = first - arrival - client - queueing
    chunk = int(min(max(np.mean(prompt - cached), 1), role.limits.max_num_batched_tokens))
    prefill_shares = _shares(cost.step(Batch(prefill_tokens=[chunk], prefill_offsets=[int(np.mean(cached))])).operators_s)
    out = {"ttft_client_ms": float(np.mean(client)) * 1e3, "ttft_queueing_ms": float(np.mean(queueing)) * 1e3}
    out.update({f"ttft_{k}_ms": float(np.mean(prefill)) * v * 1e3 for k, v in prefill_shares.items()})
    decoding = output > 1
    if not decoding.any():
        return out | {f"tpot_{k}_ms": 0.0 for k in PARTS}
    tpot = (finish - first)[decoding] / (output[decoding] - 1)
    # The mean decode batch by Little's law: decoding time summed over the run's span.
    span = float(np.max(finish) - np.min(arrival))
    batch = max(1, min(role.limits.max_num_seqs, int(round(float(np.sum((finish - first)[decoding])) / span))))
    context = int(np.mean(prompt + output / 2))
    step = cost.step(Batch(decode_context=[context] * batch))
    plain = min(step.time_s, float(np.mean(tpot)))
    out.update({"tpot_client_ms": 0.0, "tpot_queueing_ms": (float(np.mean(tpot)) - plain) * 1e3})
    out.update({f"tpot_{k}_ms": plain * v * 1e3 for k, v in _shares(step.operators_s).items()})
    return out
