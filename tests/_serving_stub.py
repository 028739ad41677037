"""TEMPORARY stand-in for ``servopt.costmodels.serving.simulate/estimate`` while the simulator is
written on branch ``sim``. Delete this file (and ``install()`` calls) once it lands on main.

It produces summaries of the simulator's shape from a crude M/M/1-like formula over the roofline
step model, so the optimizer's plumbing can be tested; its numbers mean nothing.
"""

from __future__ import annotations

import math
import sys
import types

import numpy as np

from servopt.costmodels.memory import plan_memory
from servopt.costmodels.roofline import StepCostModel


class _Summary:
    def __init__(self, data):
        self._data = data

    def to_dict(self):
        return dict(self._data)


class _Result:
    def __init__(self, data):
        self.summary = _Summary(data)


def _stats(traffic):
    from servopt.optimizer._traffic import traffic_stats

    return traffic_stats(traffic)


def _predict(model, deployment, traffic, gpu, profile, noise=0.0):
    s = _stats(traffic)
    d = deployment
    tp = d.disaggregation.decode_tp if d.disaggregation else d.tp
    cost = StepCostModel(model, gpu, profile, d.quantization, d.kv_cache_dtype, tp, d.pp)
    plan = plan_memory(model, gpu, quantization=d.quantization, kv_cache_dtype=d.kv_cache_dtype, tp=tp, pp=d.pp,
                       max_num_seqs=d.max_num_seqs, max_num_batched_tokens=d.max_num_batched_tokens,
                       max_model_len=d.max_model_len)
    ctx = s.mean_input_tokens + s.mean_output_tokens
    cap = min(d.max_num_seqs, max(plan.kv_capacity_tokens / ctx, 1))
    instances = d.disaggregation.decode_instances if d.disaggregation else 1
    rate = (s.rate_per_s or s.in_flight_requests / 10) / (d.replicas * instances)
    prefill = cost.prefill_time_s(math.ceil(s.mean_input_tokens), d.max_num_batched_tokens)
    batch = 1
    for _ in range(20):
        step = cost.decode_step_time_s(max(int(batch), 1), math.ceil(ctx), 0)
        occupancy = prefill + s.mean_output_tokens * step
        batch = min(rate * occupancy, cap)
    rho = rate * occupancy / cap
    saturated = rho >= 0.97
    rho = min(rho, 0.97)
    wait = prefill * rho / (1 - rho) * 2
    jitter = 1 + noise
    ttft = (prefill + wait) * jitter
    tpot = step * (1 + 0.3 * rho) * jitter
    e2e = ttft + s.mean_output_tokens * tpot
    def dist(mean):
        return {"mean": mean, "p50": mean * 0.9, "p90": mean * 1.6, "p99": mean * 2.5}
    return {
        "ttft_s": dist(ttft), "tpot_s": dist(tpot), "itl_s": dist(tpot), "e2e_s": dist(e2e),
        "requests_per_s": rate * d.replicas * instances, "output_tokens_per_s": rate * d.replicas * instances * s.mean_output_tokens,
        "goodput": 1.0, "saturated": bool(saturated), "saturation_reason": "arrivals exceed service rate" if saturated else None,
        "kv_utilization": float(batch * ctx / max(plan.kv_capacity_tokens, 1)), "mean_batch_size": float(batch),
        "compute_bound_share": 0.2, "queueing_share_p99_ttft": float(wait / (prefill + wait)),
    }


def estimate(model, deployment, traffic, gpu, profile, slo=None):
    return _Result(_predict(model, deployment, traffic, gpu, profile))


def simulate(model, deployment, traffic, gpu, profile, *, num_requests=None, seed=0, slo=None):
    noise = float(np.random.default_rng(seed + (num_requests or 0)).normal(0, 0.05))
    return _Result(_predict(model, deployment, traffic, gpu, profile, noise))


def install():
    """Bind the stub as servopt.costmodels.serving.{simulate, estimate} (only when they are absent)."""
    import servopt.costmodels.serving as serving

    if not hasattr(serving, "simulate"):
        serving.simulate = simulate
        serving.estimate = estimate
