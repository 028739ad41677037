"""What each vLLM release does by default (costmodels/engines/vllm.py's release table), and how a
deployment's vllm_version, enforce_eager and num_scheduler_steps reach the compiled engine."""

import pytest

from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.serving.compiled import compile_deployment
from servopt.costmodels.engines.vllm import RELEASES, parse_vllm_version, release, resolve_engine

V = parse_vllm_version
GPU = get_gpu("h100")
PROFILE = PerformanceProfile.spec_default(GPU)


def test_every_release_field_that_differs_cites_a_source_line():
    for row in RELEASES:
        for name, cite in row.sources:
            assert hasattr(row, name), name
            assert "@v0." in cite and ":" in cite.split("@", 1)[1], cite


def test_a_version_takes_the_newest_row_at_or_before_it_and_older_ones_are_refused():
    assert release(V("0.7.2")).since == (0, 7, 1)
    assert release(V("0.10.0")).multi_step and not release(V("0.10.1.1")).multi_step
    with pytest.raises(InputError, match="vllm_version 0.4.2.*0.5.5"):
        release(V("0.4.2"))


def test_v0_without_chunked_prefill_budgets_the_whole_context_as_vllm_does():
    engine = resolve_engine(V("0.6.3"), max_model_len=8192)
    assert (engine.engine, engine.chunked_prefill, engine.max_num_batched_tokens) == ("v0", False, 8192)
    assert resolve_engine(V("0.6.3"), max_model_len=1024).max_num_batched_tokens == 2048
    # Long-context models chunk by default in V0, in 512-token steps (with multi-step: the whole context).
    assert resolve_engine(V("0.6.3"), max_model_len=131072).max_num_batched_tokens == 512
    assert resolve_engine(V("0.6.3"), max_model_len=131072, num_scheduler_steps=8).max_num_batched_tokens == 131072


def test_vllm_07_turns_chunked_prefill_and_prefix_caching_off_for_mla_models():
    engine = resolve_engine(V("0.7.3"), max_model_len=131072, mla=True, chunked_prefill=True, prefix_caching=True)
    assert (engine.chunked_prefill, engine.prefix_caching) == (False, False)
    assert resolve_engine(V("0.7.0"), max_model_len=131072, mla=True).chunked_prefill


def test_v1_falls_back_to_v0_where_the_release_did():
    assert resolve_engine(V("0.8.3"), max_model_len=8192, num_scheduler_steps=10).engine == "v0"
    assert resolve_engine(V("0.8.3"), max_model_len=8192, scheduling_policy="priority").engine == "v0"
    assert resolve_engine(V("0.9.0"), max_model_len=8192, scheduling_policy="priority").engine == "v1"


def test_v1_forces_chunked_prefill_until_0_12_then_honours_the_flag():
    assert resolve_engine(V("0.11.0"), max_model_len=8192, chunked_prefill=False).chunked_prefill
    assert not resolve_engine(V("0.12.0"), max_model_len=8192, chunked_prefill=False).chunked_prefill


def test_cuda_graph_sizes_follow_the_release_and_enforce_eager_has_none():
    assert resolve_engine(V("0.12.0"), max_model_len=8192, max_num_seqs=64, max_num_batched_tokens=8192).graph_max_tokens == 128
    assert resolve_engine(V("0.9.0"), max_model_len=8192, max_num_seqs=64, max_num_batched_tokens=8192).graph_max_tokens == 512
    assert resolve_engine(V("0.33.0"), max_model_len=8192, max_num_seqs=1024, max_num_batched_tokens=16384,
                          blackwell=True).graph_max_tokens == 1024
    assert resolve_engine(V("0.12.0"), max_model_len=8192, enforce_eager=True).graph_max_tokens == 0


def test_num_scheduler_steps_needs_a_release_that_has_the_flag():
    Deployment(gpu="h100", vllm_version="0.6.3", num_scheduler_steps=10)
    with pytest.raises(ValueError, match="num_scheduler_steps: vLLM 0.12.0 has no --num-scheduler-steps"):
        Deployment(gpu="h100", vllm_version="0.12.0", num_scheduler_steps=10)


def test_the_compiled_deployment_carries_the_flags_its_release_resolves():
    model = get_model("llama-3.1-8b")
    v0 = compile_deployment(model, Deployment(gpu="h100", vllm_version="0.6.3", max_model_len=4096), GPU, PROFILE)
    assert (v0.deployment.enable_chunked_prefill, v0.deployment.enable_prefix_caching) == (False, False)
    assert v0.roles[0].limits.max_num_batched_tokens == 4096
    v1 = compile_deployment(model, Deployment(gpu="h100", max_model_len=4096), GPU, PROFILE)
    assert (v1.deployment.enable_chunked_prefill, v1.deployment.enable_prefix_caching) == (True, True)


def test_multi_step_scheduling_spreads_the_engines_cpu_time_over_its_decode_steps():
    model = get_model("llama-3.1-8b")
    steps = {}
    for n in (1, 8):
        d = Deployment(gpu="h100", vllm_version="0.6.3", max_model_len=4096, num_scheduler_steps=n)
        predictor = compile_deployment(model, d, GPU, PROFILE).roles[0].predictor
        steps[n] = predictor.decode_s(32, 32 * 1000.0, 32 * 1000.0)
    cpu_s = PROFILE.step_overhead_s + 32 * PROFILE.step_overhead_per_seq_s
    assert steps[1] - steps[8] == pytest.approx(cpu_s * 7 / 8, rel=1e-6)


def test_enforce_eager_runs_every_tp_all_reduce_on_the_eager_path():
    from servopt.calibration.registry import load_profile

    model, profile = get_model("llama-3.1-8b"), load_profile(GPU)  # measured custom all-reduce, graph and eager
    times = {}
    for eager in (False, True):
        d = Deployment(gpu="h100", tp=2, max_model_len=4096, enforce_eager=eager)
        times[eager] = compile_deployment(model, d, GPU, profile).roles[0].predictor.decode_s(8, 8000.0, 8000.0)
    assert times[True] > times[False]
