"""Every registered serving engine goes through the same checks: its defaults, a memory plan, a
step, a simulation, an estimate, and an export that its own parser accepts (skipped where the
engine's parser is not installed, as in test_export.py). An engine that is not registered is
refused in one line."""

import math

import pytest

from servopt.costmodels import Deployment, get_gpu, get_model, plan_memory
from servopt.costmodels.engines import DEFAULT_ENGINE, ENGINES, EngineRules, get_engine
from servopt.costmodels.errors import InputError
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.roofline import Batch
from servopt.costmodels.serving import Traffic, compile_deployment, estimate_compiled, simulate_compiled
from servopt.optimizer.cli import main
from servopt.results import ExportRequest, FrontPoint, ParserMissing, get_format

NAMES = sorted(ENGINES)
GPU = get_gpu("h100")
MODEL = get_model("llama-3.1-8b")
TRAFFIC = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 4},
                                  "input_tokens": {"kind": "fixed", "value": 512},
                                  "output_tokens": {"kind": "fixed", "value": 64}})


def compiled_on(name: str):
    deployment = Deployment(gpu=GPU.name, framework=name, max_model_len=4096)
    compiled = compile_deployment(MODEL, deployment, GPU, PerformanceProfile.spec_default(GPU))
    assert compiled.error is None and compiled.batch_problem() is None and compiled.memory_problem() is None
    return compiled


@pytest.mark.parametrize("name", NAMES)
def test_the_engine_is_registered_under_its_name_with_its_defaults(name):
    engine = get_engine(name)
    assert isinstance(engine, EngineRules) and engine.name == name
    version = engine.version(None)
    assert version == engine.version(engine.current_version)
    assert 0 < engine.memory_fraction(version) <= 1 and engine.block_size >= 1
    tokens, seqs = engine.batch_limits(GPU, version)
    assert engine.batch_problem(seqs, tokens) is None
    assert engine.min_batched_tokens(seqs) <= tokens
    assert engine.resolve(version, max_model_len=4096, max_num_seqs=seqs, max_num_batched_tokens=tokens)
    assert engine.scheduling_policies and engine.dp_waiting_weight >= 0
    rule = engine.step_rule(version, pp=1)
    assert rule.all2all_backend in engine.all2all_collectives
    assert engine.allreduce_implementation(1024.0, 2, GPU, version, captured=True) in engine.allreduce_implementations
    assert engine.tokenize_s_per_token(version, name) >= 0
    get_format(engine.export_format)


@pytest.mark.parametrize("name", NAMES)
def test_memory_plan(name):
    engine = get_engine(name)
    plan = plan_memory(MODEL, GPU, max_model_len=4096, framework=name)
    assert plan.fits and plan.kv_cache_blocks > 0
    assert plan.gpu_memory_utilization == engine.memory_fraction()
    pool = engine.kv_pool_bytes(GPU.memory_bytes, plan.gpu_memory_utilization, plan.weights_bytes_per_gpu, 0.0,
                                plan.activation_peak_bytes_per_gpu, plan.non_torch_bytes_per_gpu)
    assert plan.kv_cache_bytes_per_gpu == pytest.approx(pool) and 0 < pool < GPU.memory_bytes


@pytest.mark.parametrize("name", NAMES)
def test_a_step(name):
    cost = compiled_on(name).roles[0].predictor.cost
    assert cost.framework == name
    step = cost.step(Batch(decode_context=[1024] * 8))
    assert 0 < step.time_s < 1 and step.bound in ("memory", "compute")


@pytest.mark.parametrize("name", NAMES)
def test_a_simulation_and_an_estimate(name):
    compiled = compiled_on(name)
    simulated = simulate_compiled(compiled, TRAFFIC, num_requests=200, seed=0).summary
    estimated = estimate_compiled(compiled, TRAFFIC).summary
    for summary in (simulated, estimated):
        assert not summary.saturated
        assert math.isfinite(summary.ttft_s.p99) and 0 < summary.tpot_s.p99 < 1


@pytest.mark.parametrize("name", NAMES)
def test_an_export_its_own_parser_accepts(name):
    record = compiled_on(name).record()
    fmt = get_format(get_engine(name).export_format)
    request = ExportRequest({}, FrontPoint(trial=0, serve_id=record.weights.serve_id, deployment=record))
    exported = fmt.export(request)
    assert exported.trial == 0 and exported.shown
    try:
        summary = fmt.check(exported, request)
    except ParserMissing as missing:
        pytest.skip(f"{name}'s parser is not installed: {missing}")
    assert summary.startswith("# --check:")


def test_an_engine_not_modelled_is_refused_in_one_line():
    with pytest.raises(InputError, match=r"^framework 'sglang' is not modelled; servopt models: vllm$"):
        get_engine("sglang")
    with pytest.raises(ValueError, match="framework 'sglang' is not modelled"):
        Deployment(gpu="h100", framework="sglang")


def test_a_framework_that_names_no_engine_is_refused_by_its_field(tmp_path, capsys):
    # A list (unhashable) once reached the engine registry from the defaults' pre-check: a traceback.
    workload, deployment = tmp_path / "w.yaml", tmp_path / "d.yaml"
    workload.write_text("model: llama-3.1-8b\ntraffic: {arrival: {kind: poisson, rate_per_s: 5}, "
                        "input_tokens: {kind: fixed, value: 512}, output_tokens: {kind: fixed, value: 64}}\n")
    for value in ("[x]", "sglang", "{a: 1}"):
        deployment.write_text(f"gpu: h100\nframework: {value}\n")
        assert main(["predict", str(workload), "--deployment", str(deployment)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "': framework: " in err


def test_the_default_engine_is_left_out_of_a_deployment_as_written():
    # Stored trials and front files of the default engine read as servopt wrote them before.
    assert "framework" not in Deployment(gpu="h100").model_dump()
    assert Deployment.model_validate(Deployment(gpu="h100").model_dump()).framework == DEFAULT_ENGINE
