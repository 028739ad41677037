"""Benchmark-client protocol: finite closed-loop runs, the front-end latency, silicon rows as measured."""

import pandas as pd
import pytest
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, traffic

from servopt.calibration.corpus import MeasuredRun
from servopt.calibration.serving_fit import fit_serving, predictions
from servopt.calibration.silicon import REQUESTS_PER_CLIENT, inferencex_script, silicon_run
from servopt.costmodels.errors import InputError
from servopt.costmodels.roofline import StepCostModel
from servopt.costmodels.serving import estimate, simulate
from servopt.costmodels.engines.vllm import TOKENIZE_S_PER_TOKEN

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
    tokenize = 1024 * TOKENIZE_S_PER_TOKEN
    assert (alone.first_token_s - alone.arrival_s).to_numpy() == pytest.approx(FRONT_END_S + tokenize + prefill,
                                                                                rel=1e-6)
    # The next request is sent when the last one finishes and reaches the engine one front end later.
    assert alone.arrival_s.iloc[1] == pytest.approx(alone.finish_s.iloc[0])
    assert alone.scheduled_s.iloc[1] == pytest.approx(alone.finish_s.iloc[0] + FRONT_END_S + tokenize)
    estimated = estimate(LLAMA_8B, deployment(), closed(1), GPU, profile).summary
    baseline = estimate(LLAMA_8B, deployment(), closed(1), GPU, PROFILE).summary
    assert estimated.ttft_s.mean - baseline.ttft_s.mean == pytest.approx(FRONT_END_S, rel=1e-3)


def test_a_burst_waits_in_turn_for_the_front_ends_tokenizer():
    # vLLM's API server tokenizes one prompt at a time: the k-th of a burst reaches the engine k
    # tokenizations after the first; Dynamo's front end tokenizes them in parallel.
    burst = closed(8, 8192, requests_per_client=1)
    serial = simulate(LLAMA_8B, deployment(), burst, GPU, PROFILE).requests.sort_values("scheduled_s")
    gaps = serial.scheduled_s.diff().dropna().to_numpy()
    assert (gaps >= 8192 * TOKENIZE_S_PER_TOKEN * (1 - 1e-9)).all()
    parallel = simulate(LLAMA_8B, deployment(frontend="dynamo"), burst, GPU, PROFILE).requests
    assert parallel.scheduled_s.max() < serial.scheduled_s.max()


def test_a_silicon_row_runs_with_the_generators_flags_and_aiperfs_request_count():
    row = {"backend": "vllm", "model_path": "Qwen/Qwen3-32B", "system": "h100_sxm", "isl": 4096, "osl": 512,
           "tp_size": 4, "batch_size": 64, "silicon_concurrency": 64, "precision": float("nan")}
    run = silicon_run(row, "h100")
    d = run.deployment
    assert (d.tp, d.max_num_seqs) == (4, 64)
    assert (d.max_num_batched_tokens, d.max_model_len) == (64 + 4096 + 1500, 4096 + 512 + 1500)
    assert not d.enable_prefix_caching and d.quantization is None
    assert run.traffic.arrival.benchmark_requests == 64 * REQUESTS_PER_CLIENT


MINIMAX_ROW = {"backend": "vllm", "model_path": "MiniMaxAI/MiniMax-M2.5", "isl": 8192, "osl": 1024,
               "tp_size": 4, "batch_size": 16, "silicon_concurrency": 16, "precision": "fp8"}


def _source(measured, image="vllm/vllm-openai:v0.19.0-cu130"):
    return {"silicon_data_source": f"db-dump/2026-04-27; config_id=1; measured={measured}; {image}"}


def test_a_row_served_by_a_vllm_openai_image_runs_as_inferencex_ran_it():
    row = {**MINIMAX_ROW, "system": "b200_sxm", "backend_version": "0.19.0", **_source("2026-04-22T00:00:00.000Z")}
    run = silicon_run(row, "b200")
    d = run.deployment
    # vLLM's own API server with the script's flags: a 2 x ISL budget, fp8 KV cache, no prefix caching.
    assert d.frontend == "vllm" and d.max_num_batched_tokens == 2 * 8192 and d.kv_cache_dtype == "fp8"
    assert not d.enable_prefix_caching and d.gpu_memory_utilization == 0.90 and d.max_model_len == 8192 + 1024 + 200
    # 10C random prompts between 0.8 x and 1 x the lengths, behind a semaphore of C slots.
    records = run.traffic.arrival.records
    assert len(records.input_tokens) == 160 and run.traffic.arrival.max_concurrency == 16
    assert int(0.8 * 8192) <= min(records.input_tokens) < max(records.input_tokens) <= 8192
    assert int(0.8 * 1024) <= min(records.output_tokens) < max(records.output_tokens) <= 1024
    # The same row read as an aiperf row (the comparison the benchmark prints) keeps the old reading.
    assert silicon_run(row, "b200", harness="aiperf").deployment.frontend == "dynamo"
    with pytest.raises(InputError, match="harness"):
        silicon_run(row, "b200", harness="genai-perf")


def test_an_inferencex_row_takes_the_script_of_its_date():
    h200 = {**MINIMAX_ROW, "system": "h200_sxm"}
    # The warm-up caches the first prompt while the script leaves prefix caching on.
    source = _source("2026-03-01T00:00:00.000Z", "vllm/vllm-openai:v0.16.0")
    early = silicon_run({**h200, "backend_version": "0.16.0", **source})
    assert early.deployment.enable_prefix_caching and early.deployment.max_num_batched_tokens is None
    cached = early.traffic.arrival.records.cached_tokens
    assert cached[0] == early.traffic.arrival.records.input_tokens[0] and not any(cached[1:])
    # Prefix caching went off on 2026-03-27 19:17 (-07:00): a row measured the next day runs without it.
    assert not inferencex_script({**h200, **_source("2026-03-28T00:00:00.000Z")}).prefix_caching
    assert inferencex_script({**h200, **_source("2026-03-27T07:59:49Z")}).prefix_caching
    # A pull request's run before its script merged takes the first merged version.
    assert "a363463" in inferencex_script({**h200, **_source("2026-02-27")}).source
    with pytest.raises(InputError, match="no InferenceX"):
        inferencex_script({**MINIMAX_ROW, "system": "a100_sxm"})
    # InferenceMAX's Llama-3.1-70B FP8 sweeps: one slot per client, an fp8 KV cache, an 8192 budget.
    llama = silicon_run({**MINIMAX_ROW, "model_path": "nvidia/Llama-3.1-70B-Instruct-FP8", "system": "h100_sxm",
                         "tp_size": 8, "backend_version": "0.10.2", **_source("2025-10-01", "vllm/vllm-openai:v0.10.2")})
    assert (llama.deployment.max_num_seqs, llama.deployment.max_num_batched_tokens) == (16, 8192)
    assert llama.deployment.kv_cache_dtype == "fp8" and llama.deployment.frontend == "vllm"


def _synthetic_silicon_runs(truth: dict, model: str = "meta-llama/Llama-3.1-8B-Instruct") -> list:
    """Three silicon-style runs whose 'measurements' are the simulation's own under ``truth``."""
    runs = []
    for i, (isl, c) in enumerate(((512, 2), (256, 32), (2048, 4))):
        row = {"backend": "vllm", "model_path": model, "system": "h100_sxm",
               "isl": isl, "osl": 128, "tp_size": 1, "batch_size": c, "silicon_concurrency": c,
               "backend_version": "0.12.0"}
        run = silicon_run(row, "h100")
        runs.append(MeasuredRun(f"{model}:{i}", "test", run.model, "h100", "bf16", "0.12.0", "aiperf", {},
                                run.deployment, run.traffic))
    measured = predictions(runs, lambda gpu: PROFILE, truth)
    return [r.__class__(**{**r.__dict__, "measured": {"mean_tpot_ms": tpot, "mean_ttft_ms": ttft}})
            for r, tpot, ttft in zip(runs, measured["pred_mean_tpot_ms"], measured["pred_mean_ttft_ms"])]


def test_the_serving_fit_recovers_known_engine_and_front_end_costs():
    runs = _synthetic_silicon_runs({"step_overhead_s": 1.2e-3, "step_overhead_per_seq_s": 40e-6,
                                    "request_overhead_s": 6e-3})
    # Exact runs: the runs alone decide (no priors).
    fitted = fit_serving(runs, lambda gpu: PROFILE, names=("step_overhead_s", "step_overhead_per_seq_s",
                                                           "dynamo_request_overhead_s"), prior_weight=0.0)
    assert fitted["step_overhead_s"] == pytest.approx(1.2e-3, rel=0.05)
    assert fitted["step_overhead_per_seq_s"] == pytest.approx(40e-6, rel=0.05)
    # These runs went through Dynamo's front end (as aiconfigurator's silicon runs did): its own latency is fitted.
    assert fitted["dynamo_request_overhead_s"] == pytest.approx(6e-3, rel=0.1)
    # No V0 run: the V0 engine's costs are not identified, and the V1 engine's stand in.
    assert fitted["v0_step_overhead_s"] is None


HOST = {"step_overhead_s": 1.2e-3, "step_overhead_per_seq_s": 40e-6, "request_overhead_s": 6e-3,
        "dynamo_request_overhead_s": 6e-3}


def test_the_serving_fit_recovers_a_known_kernel_scale():
    truth = {**HOST, "memory_scale": 1.2}
    runs = [r for model in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B")
            for r in _synthetic_silicon_runs(truth, model)]
    fitted = fit_serving(runs, lambda gpu: PROFILE, start=HOST, names=("memory_scale",))
    # The prior (a scale near 1, 25% wide) pulls a little against three groups of exact runs. A kernel
    # scale is fitted per shipped GPU fit (the runs ran on the H100).
    assert fitted["memory_scale@h100"] == pytest.approx(1.2, rel=0.03)


def test_collinear_coefficients_explain_the_runs_and_the_prior_splits_them():
    # At these batches a decode step is mostly weight reads: a memory scale and a per-step cost move
    # every run's TPOT alike, so the runs fix their sum and the priors decide the split.
    truth = {**HOST, "memory_scale": 1.2, "step_gpu_s": 0.8e-3}
    runs = [r for model in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "Qwen/Qwen3-32B")
            for r in _synthetic_silicon_runs(truth, model)]
    fitted = fit_serving(runs, lambda gpu: PROFILE, start=HOST, names=("memory_scale", "step_gpu_s"))
    refit = predictions(runs, lambda gpu: PROFILE, fitted)
    # A maximum a posteriori fit: nine exact runs against two priors leave the TPOTs within 3%.
    assert refit["pred_mean_tpot_ms"].to_numpy() == pytest.approx(refit["measured_mean_tpot_ms"].to_numpy(), rel=0.03)
    assert 1.0 <= fitted["memory_scale@h100"] <= 1.3 and 0.0 <= fitted["step_gpu_s"] <= 1.6e-3


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


@pytest.mark.parametrize("gpu, version, limits", [
    ("a100-80gb", "0.12.0", (2048, 256)),  # A100 excluded from the large tier (vLLM PR #17885)
    ("h100", "0.12.0", (8192, 1024)),
    ("b200", "0.15.0", (8192, 1024)),      # no 160 GiB tier before 0.28
    ("b200", "0.28.0", (16384, 1024)),
    ("h100", "0.8.3", (2048, 256)),
    ("h100", "0.5.5", (512, 256)),
])
def test_vllm_batch_defaults_follow_the_version_and_the_device(gpu, version, limits):
    from servopt.costmodels.hardware import get_gpu
    from servopt.costmodels.engines.vllm import default_batch_limits, parse_vllm_version

    assert default_batch_limits(get_gpu(gpu), parse_vllm_version(version)) == limits
