"""The analytic estimate agrees with the simulation where queueing theory applies, and is fast."""

import math
import time

import pytest
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, poisson, run, traffic

from servopt.costmodels.serving import SLO, compile_deployment, estimate, estimate_compiled


@pytest.mark.parametrize("rate", [2.0, 8.0, 14.0])
def test_estimate_matches_simulated_means(rate):
    tr = traffic({"kind": "poisson", "rate_per_s": rate}, {"kind": "lognormal", "mean": 1024, "sigma": 0.5}, 256)
    sim = run(deployment(), tr, n=3000).summary
    est = estimate(LLAMA_8B, deployment(), tr, GPU, PROFILE).summary
    assert est.tpot_s.mean == pytest.approx(sim.tpot_s.mean, rel=0.1)
    assert est.ttft_s.mean == pytest.approx(sim.ttft_s.mean, rel=0.3)
    assert est.mean_batch_size == pytest.approx(sim.mean_batch_size, rel=0.15)
    assert est.e2e_s.mean == pytest.approx(sim.e2e_s.mean, rel=0.1)


def test_estimate_closed_loop_throughput_matches_simulation():
    for concurrency in (4, 64):
        tr = traffic({"kind": "closed_loop", "concurrency": concurrency}, {"kind": "uniform", "low": 500, "high": 1500},
                     {"kind": "uniform", "low": 100, "high": 300})
        sim = run(deployment(), tr, n=40 * concurrency).summary
        est = estimate(LLAMA_8B, deployment(), tr, GPU, PROFILE).summary
        assert est.requests_per_s == pytest.approx(sim.requests_per_s, rel=0.1)
        assert est.tpot_s.mean == pytest.approx(sim.tpot_s.mean, rel=0.15)


def test_estimate_flags_saturation_without_a_finite_ttft():
    est = estimate(LLAMA_8B, deployment(), poisson(60.0), GPU, PROFILE).summary
    assert est.saturated and "capacity" in est.saturation_reason
    assert math.isinf(est.ttft_s.p99) and 0 < est.requests_per_s < 60


def test_an_absurd_rate_saturates_without_costing_steps_beyond_the_engine():
    # Issue 30: rate_per_s 1e6 grew the step tables to the batch it implied (23 GB by trial 17).
    compiled = compile_deployment(LLAMA_8B, deployment(), GPU, PROFILE)
    start = time.process_time()
    assert estimate_compiled(compiled, poisson(1e6)).summary.saturated
    assert time.process_time() - start < 5
    role = compiled.roles[0]
    assert len(role.cost._tokens_list) <= 4 * role.limits.max_num_batched_tokens


def test_goodput_counts_requests_within_the_slo():
    tr = poisson(8.0)
    loose = estimate(LLAMA_8B, deployment(), tr, GPU, PROFILE, slo=SLO(p99_ttft_s=5.0, p99_tpot_s=1.0)).summary
    tight = estimate(LLAMA_8B, deployment(), tr, GPU, PROFILE, slo=SLO(p99_ttft_s=0.02)).summary
    assert loose.slo_met and loose.goodput_requests_per_s == pytest.approx(8.0, rel=0.01)
    assert not tight.slo_met and tight.goodput_requests_per_s < 4.0
    sim = run(deployment(), tr, n=2000, slo=SLO(p99_ttft_s=0.02)).summary
    assert sim.goodput_requests_per_s < 4.0 and not sim.slo_met


def test_estimate_is_far_faster_than_simulation():
    tr = traffic({"kind": "poisson", "rate_per_s": 8}, {"kind": "lognormal", "mean": 1024, "sigma": 0.5}, 256)
    start = time.perf_counter()
    run(deployment(), tr, n=4000)
    simulated = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(5):
        estimate(LLAMA_8B, deployment(), tr, GPU, PROFILE)
    estimated = (time.perf_counter() - start) / 5
    assert estimated * 20 < simulated


@pytest.mark.parametrize("replicas", [1, 4])
def test_p99_ttft_when_sequence_slots_bind(replicas):
    # max_num_seqs 16 at ~90% occupancy: requests wait for a slot. Behind the least-outstanding router
    # the replicas pool their slots (a request waits only when all are full), which the estimate
    # models; a per-replica queue fed Poisson arrivals would put its P99 several times higher.
    tr = traffic({"kind": "poisson", "rate_per_s": 5.0 * replicas}, 2048, 256)
    dep = deployment(max_num_seqs=16, replicas=replicas, router="least_outstanding")
    sim = run(dep, tr, n=3000).summary
    est = estimate(LLAMA_8B, dep, tr, GPU, PROFILE).summary
    assert est.mean_batch_size == pytest.approx(sim.mean_batch_size, rel=0.1)
    assert est.ttft_s.p99 == pytest.approx(sim.ttft_s.p99, rel=0.35)
