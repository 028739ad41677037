"""Benchmark clients as their sources send (calibration/bench_clients.py) and a capped open-loop trace."""

import numpy as np
import pytest

from servopt.calibration.bench_clients import AiperfConcurrency, GuideLLM, InferencePerf, VllmBenchServe
from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.serving import simulate

GPU = get_gpu("h100")


def test_vllm_bench_serve_caps_requests_in_flight_and_times_them_from_their_send():
    n = 24
    traffic = VllmBenchServe(max_concurrency=4).traffic([2048] * n, [32] * n)
    result = simulate(get_model("llama-3.1-8b"), Deployment(gpu="h100", max_model_len=4096), traffic, GPU,
                      PerformanceProfile.spec_default(GPU))
    r = result.requests.sort_values("arrival_s")
    # At most four in flight: each send after the first four waits for a finish.
    in_flight = [int(((r.arrival_s <= t) & (r.finish_s > t)).sum()) for t in r.arrival_s]
    assert max(in_flight) <= 4 and (r.arrival_s.iloc[4:] > 0).all()
    uncapped = simulate(get_model("llama-3.1-8b"), Deployment(gpu="h100", max_model_len=4096),
                        VllmBenchServe().traffic([2048] * n, [32] * n), GPU, PerformanceProfile.spec_default(GPU))
    assert result.summary.ttft_s.mean < 0.5 * uncapped.summary.ttft_s.mean


def test_vllm_bench_serve_constant_rate_at_infinite_burstiness():
    assert VllmBenchServe(request_rate=4.0, burstiness=float("inf")).arrival(3)["send_s"] == [0.0, 0.25, 0.5]


def test_aiperf_is_closed_loop_clients_that_start_together():
    arrival = AiperfConcurrency(concurrency=4, request_count=40, warmup_request_count=8).arrival(40)
    assert arrival == {"kind": "closed_loop", "concurrency": 4, "requests_per_client": 10}
    with pytest.raises(InputError, match="multiple of concurrency"):
        AiperfConcurrency(concurrency=4, request_count=42).arrival(42)


def test_guidellm_sends_its_initial_burst_whatever_the_flag_says():
    send = GuideLLM("poisson", rate=3.0).arrival(10)["send_s"]
    assert send[:3] == [0.0, 0.0, 0.0] and all(b > a for a, b in zip(send[2:], send[3:]))
    assert GuideLLM("poisson", rate=3.0).arrival(10) == GuideLLM("poisson", rate=3.0).arrival(10)  # seeded (42)


def test_inference_perf_poisson_spreads_each_seconds_draw_over_that_second():
    send = np.asarray(InferencePerf("poisson", rate=5.0).arrival(200)["send_s"])
    assert np.all(np.diff(send) >= 0) and abs(len(send) / send[-1] - 5.0) < 1.0
    with pytest.raises(InputError, match="sends 8 requests, not 9"):
        InferencePerf("constant", rate=4.0, duration_s=2.0).arrival(9)


def test_a_saved_vllm_bench_run_with_a_binding_cap_replays_its_requests_behind_the_cap(tmp_path):
    """A result JSON whose --max-concurrency is below its prompt count is replayed request by request
    (its own lengths and order) behind that cap, not approximated by closed-loop clients."""
    import json

    from servopt.calibration.vllm_bench import read_bench_result

    path = tmp_path / "run.json"
    path.write_text(json.dumps({
        "model_id": "m", "num_prompts": 4, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2,
        "duration": 2.0, "completed": 4, "total_input_tokens": 1000, "total_output_tokens": 16,
        "input_lens": [100, 200, 300, 400], "output_lens": [4, 4, 4, 4], "ttfts": [0.05, 0.05, 0.06, 0.06],
        "itls": [[0.01] * 3] * 4, "errors": [""] * 4}))
    arrival = read_bench_result(path).traffic_spec(seed=0, vllm_version="0.12.0")["arrival"]
    assert arrival["kind"] == "trace" and arrival["max_concurrency"] == 2
    assert arrival["records"]["input_tokens"] == [100, 200, 300, 400]
