"""Replicas, routers, P/D disaggregation, pipeline lanes, reproducibility and saturation."""

import numpy as np
import pytest
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, poisson, run, traffic

from servopt.costmodels.memory import kv_bytes_per_token
from servopt.costmodels.roofline import StepCostModel
from servopt.costmodels.engines.vllm import TOKENIZE_S_PER_TOKEN


def test_same_seed_same_run_other_seed_other_run():
    tr = traffic({"kind": "gamma", "rate_per_s": 6, "cv": 2}, {"kind": "lognormal", "mean": 800, "sigma": 0.7},
                 {"kind": "uniform", "low": 20, "high": 300})
    a, b, c = (run(deployment(), tr, n=800, seed=s).requests for s in (7, 7, 8))
    assert a.equals(b)
    assert not a.equals(c)


def test_saturation_is_detected_and_reported():
    over = run(deployment(), poisson(60.0), n=3000).summary
    assert over.saturated and "grows without bound" in over.saturation_reason
    assert over.requests_per_s < 45
    under = run(deployment(), poisson(5.0), n=3000).summary
    assert not under.saturated and under.saturation_reason == ""


def test_round_robin_alternates_and_least_outstanding_balances():
    tr = traffic({"kind": "poisson", "rate_per_s": 36}, {"kind": "lognormal", "mean": 1000, "sigma": 1.0},
                 {"kind": "lognormal", "mean": 300, "sigma": 1.2})
    rr = run(deployment(replicas=3, router="round_robin"), tr, n=3000, whole_fleet=True)
    order = rr.requests.sort_values("arrival_s").instance.to_numpy()
    assert (np.diff(order) % 3 == 1).all()
    lo = run(deployment(replicas=3, router="least_outstanding"), tr, n=3000)
    counts = np.bincount(lo.requests.instance, minlength=3)
    assert counts.min() > 0.25 * len(lo.requests)
    # Steering around replicas busy with long requests shortens the tails.
    assert lo.summary.ttft_s.p99 < rr.summary.ttft_s.p99
    # Balanced batches also keep the decode tail from getting worse (within noise).
    assert lo.summary.tpot_s.p99 < 1.01 * rr.summary.tpot_s.p99


def test_power_of_two_balances_like_the_vllm_router_and_reproduces_its_seed():
    tr = traffic({"kind": "poisson", "rate_per_s": 36}, {"kind": "lognormal", "mean": 1000, "sigma": 1.0},
                 {"kind": "lognormal", "mean": 300, "sigma": 1.2})
    rr = run(deployment(replicas=3, router="round_robin"), tr, n=3000, whole_fleet=True)
    two, again = (run(deployment(replicas=3, router="power_of_two"), tr, n=3000) for _ in range(2))
    assert two.requests.equals(again.requests)
    counts = np.bincount(two.requests.instance, minlength=3)
    assert counts.min() > 0.25 * len(two.requests)
    # The less loaded of two steers around a replica busy with long requests, as least_outstanding does.
    assert two.summary.ttft_s.p99 < rr.summary.ttft_s.p99


def test_a_round_robin_fleet_is_one_replica_fed_every_nth_arrival():
    fleet = deployment(replicas=6, router="round_robin")
    whole = run(fleet, poisson(60.0), n=3000, whole_fleet=True).summary
    one = run(fleet, poisson(60.0), n=3000)
    assert set(one.requests.instance) == {0} and "1 of 6 identical replicas" in one.summary.notes[-1]
    gaps = np.diff(np.sort(one.requests.arrival_s.to_numpy()))
    assert gaps.mean() == pytest.approx(6 / 60.0, rel=0.05)  # Erlang-6 gaps: mean 6/rate, CV 1/sqrt(6)
    assert gaps.std() / gaps.mean() == pytest.approx(6 ** -0.5, rel=0.1)
    assert one.summary.requests_per_s == pytest.approx(whole.requests_per_s, rel=0.05)
    assert one.summary.ttft_s.p99 == pytest.approx(whole.ttft_s.p99, rel=0.1)
    assert one.summary.tpot_s.p99 == pytest.approx(whole.tpot_s.p99, rel=0.05)


def test_more_replicas_serve_proportionally_more():
    one = run(deployment(), poisson(10.0), n=2000).summary
    two = run(deployment(replicas=2), poisson(20.0), n=2000).summary
    assert two.requests_per_s == pytest.approx(2 * one.requests_per_s, rel=0.05)
    assert two.tpot_s.mean == pytest.approx(one.tpot_s.mean, rel=0.05)


def test_disaggregation_adds_the_kv_transfer_between_first_token_and_decode():
    dep = deployment(disaggregation={"prefill_instances": 1, "decode_instances": 1, "same_node": False,
                                     "rdma_gbps": 5.0})
    result = run(dep, poisson(2.0, 2000, 64), n=400)
    frame = result.requests
    transfer = 2000 * kv_bytes_per_token(LLAMA_8B) / 5e9
    assert (frame.kv_ready_s - frame.first_token_s).to_numpy() == pytest.approx(transfer, rel=1e-9)
    assert (frame.prefill_instance == 0).all() and (frame.instance == 1).all()
    # At low load the first token is the prefill alone: no decode ever shares a prefill step.
    cost = StepCostModel(LLAMA_8B, GPU, PROFILE)
    tokenize = 2000 * TOKENIZE_S_PER_TOKEN  # the front end's tokenizer, then the prefill
    assert result.summary.ttft_s.p50 == pytest.approx(tokenize + cost.prefill_time_s(2000), rel=0.02)
    # The second token comes after the transfer and one decode step; the other 62 are decode steps
    # that no prefill disturbs.
    decode = cost.decode_step_time_s(1, 2000 + 32)
    assert result.summary.tpot_s.p50 == pytest.approx(decode + transfer / 63, rel=0.02)
    assert result.summary.itl_s.p99 >= transfer


def test_prefill_queue_is_separate_from_decode_load():
    """Long outputs load the decode instance; prefill instances keep TTFT at the prefill time."""
    long_decode = poisson(6.0, 1000, 1500)
    pd = run(deployment(disaggregation={"prefill_instances": 1, "decode_instances": 2}), long_decode, n=1200).summary
    mixed = run(deployment(replicas=3), long_decode, n=1200).summary
    cost = StepCostModel(LLAMA_8B, GPU, PROFILE)
    assert pd.ttft_s.p90 < 1.5 * cost.prefill_time_s(1000)
    assert pd.ttft_s.p90 < mixed.ttft_s.p90


def test_pipeline_lanes_split_requests_and_each_step_is_a_full_pass():
    result = run(deployment(pp=2), poisson(12.0), n=2000)
    counts = np.bincount(result.requests.instance)
    assert len(counts) == 2 and counts.min() > 0.4 * counts.sum()
    single = run(deployment(pp=2), traffic({"kind": "closed_loop", "concurrency": 1}, 1024, 100), n=10).summary
    cost = StepCostModel(LLAMA_8B, GPU, PROFILE, pp=2)
    assert single.tpot_s.p50 == pytest.approx(cost.decode_step_time_s(1, 1024 + 50), rel=0.01)


def test_trace_replay_measures_every_request(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n" + "".join(f"{i * 0.2},{500 + i},{20 + i % 7}\n"
                                                                      for i in range(300)))
    result = run(deployment(), traffic({"kind": "trace", "path": str(path)}), n=None)
    s = result.summary
    assert s.num_requests == s.num_measured == 300
    assert result.requests.input_tokens.tolist() == [500 + i for i in range(300)]
    assert result.requests.arrival_s.iloc[-1] == pytest.approx(299 * 0.2)
