"""Benchmark-client protocol: finite closed-loop runs, the front-end latency, silicon rows as measured."""

import pandas as pd
import pytest
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, traffic

from servopt.calibration.serving_fit import fit_serving_overheads
from servopt.calibration.silicon import REQUESTS_PER_CLIENT, silicon_run
from servopt.calibration.validate import E2EValidator
from servopt.costmodels.errors import InputError
from servopt.costmodels.roofline import StepCostModel
from servopt.costmodels.serving import estimate, simulate

FRONT_END_S = 0.004


def closed(concurrency, input_tokens=1024, **extra):
    return traffic({"kind": "closed_loop", "concurrency": concurrency, **extra}, input_tokens, 64)


def test_a_finite_benchmark_run_measures_every_request_burst_and_drain_included():
    # Four 4096-token prompts need two steps of the 8192-token budget.
    result = simulate(LLAMA_8B, deployment(), closed(4, 4096, requests_per_client=5), GPU, PROFILE)
    s = result.summary
    assert s.num_requests == s.num_measured == 20 and s.warmup_excluded == 0
    frame = result.requests
    assert (frame.arrival_s.iloc[:4] == 0).all()  # every client opens at once
    # The opening burst queues behind its own prompts: the first round waits longer than the rest.
    ttft = frame.first_token_s - frame.arrival_s
    assert ttft.iloc[:4].mean() > ttft.iloc[4:].mean()
    with pytest.raises(InputError, match="requests_per_client"):
        simulate(LLAMA_8B, deployment(), closed(4, requests_per_client=5), GPU, PROFILE, num_requests=7)


def test_the_front_end_adds_to_ttft_and_delays_the_next_request_of_a_client():
    profile = PROFILE.model_copy(update={"request_overhead_s": FRONT_END_S})
    alone = simulate(LLAMA_8B, deployment(), closed(1), GPU, profile, num_requests=4).requests
    prefill = StepCostModel(LLAMA_8B, GPU, profile).prefill_time_s(1024)
    assert (alone.first_token_s - alone.arrival_s).to_numpy() == pytest.approx(FRONT_END_S + prefill, rel=1e-6)
    # The next request is sent when the last one finishes and reaches the engine one front end later.
    assert alone.arrival_s.iloc[1] == pytest.approx(alone.finish_s.iloc[0])
    assert alone.scheduled_s.iloc[1] == pytest.approx(alone.finish_s.iloc[0] + FRONT_END_S)
    estimated = estimate(LLAMA_8B, deployment(), closed(1), GPU, profile).summary
    baseline = estimate(LLAMA_8B, deployment(), closed(1), GPU, PROFILE).summary
    assert estimated.ttft_s.mean - baseline.ttft_s.mean == pytest.approx(FRONT_END_S, rel=1e-3)


def test_a_silicon_row_runs_with_the_generators_flags_and_aiperfs_request_count():
    row = {"backend": "vllm", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "isl": 4096, "osl": 512,
           "tp_size": 4, "batch_size": 64, "silicon_concurrency": 64, "precision": float("nan")}
    run = silicon_run(row, "h100")
    d = run.deployment
    assert (d.tp, d.max_num_seqs) == (4, 64)
    assert (d.max_num_batched_tokens, d.max_model_len) == (64 + 4096 + 1500, 4096 + 512 + 1500)
    assert not d.enable_prefix_caching and d.quantization is None
    assert run.traffic.arrival.benchmark_requests == 64 * REQUESTS_PER_CLIENT


def test_the_serving_fit_recovers_known_step_overheads_and_keeps_the_front_end():
    truth = PROFILE.model_copy(update={"step_overhead_s": 1.2e-3, "step_overhead_per_seq_s": 40e-6,
                                       "request_overhead_s": 6e-3})
    rows = pd.DataFrame([{"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm",
                          "mode": "agg", "isl": isl, "osl": 128, "tp_size": 1, "batch_size": c,
                          "silicon_concurrency": c, "silicon_ttft_ms": 1.0, "silicon_tpot_ms": 1.0}
                         for isl, c in ((512, 2), (256, 32))])
    measured = E2EValidator(lambda gpu: truth).predict(rows)
    rows["silicon_ttft_ms"], rows["silicon_tpot_ms"] = measured["pred_ttft_ms"], measured["pred_tpot_ms"]
    fitted = fit_serving_overheads(rows, PROFILE.model_copy(update={"request_overhead_s": 6e-3})).profile
    assert fitted.step_overhead_s == pytest.approx(1.2e-3, rel=0.02)
    assert fitted.step_overhead_per_seq_s == pytest.approx(40e-6, rel=0.02)
    assert fitted.request_overhead_s == 6e-3


def test_fewer_requests_per_client_weigh_the_opening_burst_more():
    # The first round queues behind every client's prompt; the benchmark's mean TTFT carries that
    # excess divided by the rounds each client runs (what aiperf's request count decides).
    row = {"backend": "vllm", "model_path": "meta-llama/Llama-3.1-8B-Instruct", "system": "h100_sxm", "isl": 2048,
           "osl": 32, "tp_size": 1, "batch_size": 32, "silicon_concurrency": 32}
    ttft = {}
    for rounds in (2, 8):
        run = silicon_run(row, "h100", requests_per_client=rounds)
        assert run.traffic.arrival.benchmark_requests == 32 * rounds
        requests = simulate(LLAMA_8B, run.deployment, run.traffic, GPU, PROFILE).requests
        ttft[rounds] = (requests.first_token_s - requests.arrival_s).to_numpy()
    burst, rest = ttft[8][:32].mean(), ttft[8][32:].mean()
    assert burst > 2 * rest
    assert ttft[2].mean() > ttft[8].mean()
