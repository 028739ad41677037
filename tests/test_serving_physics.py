"""Physics checks of the simulator: queueing laws and the cost model's own step times."""

import numpy as np
import pytest
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, poisson, run, traffic

from servopt.costmodels.memory import plan_memory
from servopt.costmodels.roofline import StepCostModel
from servopt.costmodels.engines.vllm import TOKENIZE_S_PER_TOKEN


def _time_average_in_system(frame, start, end):
    """Requests in the system, averaged over [start, end] (exact integral of the step function)."""
    a = np.clip(frame.arrival_s.to_numpy(), start, end)
    f = np.clip(frame.finish_s.to_numpy(), start, end)
    return float((f - a).sum() / (end - start))


def test_littles_law_holds_on_the_simulated_requests():
    result = run(deployment(), poisson(8.0, 1024, 128), n=4000)
    frame = result.requests
    start, end = np.quantile(frame.arrival_s, [0.2, 0.8])
    inside = frame[(frame.arrival_s >= start) & (frame.arrival_s <= end)]
    latency = (inside.finish_s - inside.arrival_s).mean()
    throughput = len(inside) / (end - start)
    # L over the window counts the same requests, plus boundary effects of a few latencies.
    assert _time_average_in_system(frame, start, end) == pytest.approx(throughput * latency, rel=0.05)


def test_low_load_ttft_is_the_prefill_and_tpot_the_decode_step():
    result = run(deployment(), traffic({"kind": "closed_loop", "concurrency": 1}, 1500, 200), n=20)
    cost = StepCostModel(LLAMA_8B, GPU, PROFILE)
    s = result.summary
    tokenize = 1500 * TOKENIZE_S_PER_TOKEN  # the front end's tokenizer, then the prefill
    assert s.ttft_s.p50 == pytest.approx(tokenize + cost.prefill_time_s(1500), rel=0.01)
    assert s.tpot_s.p50 == pytest.approx(cost.decode_step_time_s(1, 1500 + 100), rel=0.01)
    assert s.itl_s.p99 == pytest.approx(cost.decode_step_time_s(1, 1700), rel=0.02)


def test_p99_rises_sharply_near_capacity():
    capacity = run(deployment(), traffic({"kind": "closed_loop", "concurrency": 400}, 1024, 128), n=2400)
    mu = capacity.summary.requests_per_s
    p99 = {load: run(deployment(), poisson(load * mu), n=3000).summary.ttft_s.p99 for load in (0.3, 0.6, 0.95)}
    assert p99[0.6] < 2.5 * p99[0.3]
    assert p99[0.95] > 4 * p99[0.6]


def test_chunked_prefill_off_raises_tpot_tail_under_long_prompts():
    # Whole 12k-token prompts stall every decode for a full prefill; requests with few output tokens
    # cannot amortise such a stall, which sets the TPOT tail.
    long_prompts = traffic({"kind": "poisson", "rate_per_s": 1.5}, 12000, {"kind": "lognormal", "mean": 100, "sigma": 1.2})
    chunked = run(deployment(max_num_batched_tokens=2048), long_prompts, n=600).summary
    whole = run(deployment(enable_chunked_prefill=False, max_num_batched_tokens=16384), long_prompts, n=600).summary
    assert whole.tpot_s.p99 > 2 * chunked.tpot_s.p99
    assert whole.itl_s.p99 > 2 * chunked.itl_s.p99


def test_fp8_kv_cache_raises_the_maximum_batch():
    auto = plan_memory(LLAMA_8B, GPU, kv_cache_dtype="auto", max_model_len=16384)
    fp8 = plan_memory(LLAMA_8B, GPU, kv_cache_dtype="fp8", max_model_len=16384)
    assert fp8.kv_capacity_tokens == pytest.approx(2 * auto.kv_capacity_tokens, rel=0.01)
    crowd = traffic({"kind": "closed_loop", "concurrency": 1024}, 6000, 1000)
    batch = {kv: run(deployment(kv_cache_dtype=kv), crowd, n=2500).summary.mean_batch_size for kv in ("auto", "fp8")}
    assert batch["fp8"] > 1.6 * batch["auto"]


def test_kv_pressure_preempts_the_newest_requests():
    crowd = traffic({"kind": "closed_loop", "concurrency": 600}, {"kind": "uniform", "low": 500, "high": 4000},
                    {"kind": "uniform", "low": 500, "high": 3000})
    result = run(deployment(max_num_seqs=600, gpu_memory_utilization=0.5), crowd, n=2000)
    assert result.summary.preemptions > 0
    frame = result.requests
    # Every request still completes all of its tokens, preempted or not.
    assert frame.finish_s.notna().all() and (frame.finish_s >= frame.first_token_s).all()
