"""Every figure servopt prints or writes stays within physics (issue 29; ``costmodels/physics.py``):
throughput and capacity within the roofline of the GPUs they name, KV within memory, P50 <= P90 <=
P99, step times no faster than the hardware; over the default job, each example, ``predict`` of the
example deployments and ``plan`` for every catalog model. A failure names the figure: fix it at
its source, never clip it."""

import argparse
import json
from pathlib import Path

import pytest
import yaml

from servopt.costmodels.architectures import get_model, preset_models
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.physics import (
    Fleet, Load, check_latencies, check_memory, check_rate, check_steps, check_summary, max_requests_per_s,
)
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.serving import compile_deployment
from servopt.optimizer.cli import main
from servopt.optimizer._traffic import traffic_stats
from servopt.optimizer.commands.plan import compute_plan, plan_compiled
from servopt.optimizer.defaults import default_workload
from servopt.optimizer.job import Job
from servopt.optimizer.workload import load_workload, parse_workload

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
# A few trials and short simulations: enough to write every kind of figure (estimates, simulations,
# re-checks, capacities, one replica down) while the suite stays fast.
SMALL = {"budget": {"trials": 6}, "fidelity": {"search_requests": 200, "final_requests": 200}}


def _job(tmp_path, name: str, data: dict) -> Job:
    job = Job(parse_workload({**data, **SMALL}, name), tmp_path / name, name=name)
    job.run(progress=False)
    return job


def _l4_tp8():
    gpu = get_gpu("l4")
    return compile_deployment(get_model("mistral-7b"), Deployment(gpu="l4", tp=8, max_model_len=4096), gpu,
                              PerformanceProfile.spec_default(gpu))


def test_the_check_catches_the_figures_of_issue_29():
    fleet, load = Fleet.of(_l4_tp8()), Load(3840, 256)
    # 19.9 requests/s of 3,840-token prompts on 8 L4s: 122% of their bf16 peak.
    breach = check_rate(fleet, load, 19.9, "l4 capacity")
    assert len(breach) == 1 and "122% of the compute of 8 l4" in breach[0]
    assert check_rate(fleet, load, 0.99 * max_requests_per_s(fleet, load), "at the bound") == []
    # Quantiles out of order, a KV cache over full, a TPOT faster than reading the weights.
    summary = {"ttft_s": {"p50": 0.3, "p90": 0.2, "p99": 0.5}, "tpot_s": {"p50": 1e-5, "p90": 1e-5, "p99": 1e-5},
               "kv_utilization": 1.3, "requests_per_s": 1.0, "input_tokens_per_s": 3840.0, "output_tokens_per_s": 256.0}
    found = " | ".join(check_summary(fleet, load, summary, "s"))
    assert "out of order" in found and "KV utilization" in found and "reading the weights" in found
    assert check_latencies({"e2e_s": {"p50": 1.0, "p90": 2.0, "p99": 3.0}}, "fine") == []


def test_decode_streams_bound_the_rate_of_long_answers():
    # 16-token prompts and 4,000-token answers: the bandwidth, not the compute, binds.
    fleet = Fleet.of(_l4_tp8())
    load = Load(16, 4000, shortest_context_tokens=16)
    compute_only = fleet.num_gpus * fleet.peak_flops / load.flops_per_request(fleet)
    bound = max_requests_per_s(fleet, load)
    assert bound < 0.7 * compute_only
    assert any("HBM bandwidth" in b for b in check_rate(fleet, load, 1.1 * bound, "decode"))
    # Longer contexts read more KV every step: the bound falls.
    assert max_requests_per_s(fleet, Load(4000, 4000, shortest_context_tokens=4000)) < bound


def test_every_figure_of_the_default_job_is_within_physics(tmp_path):
    job = _job(tmp_path, "default", default_workload().model_dump(mode="json", exclude_none=True))
    data = job.collect()
    predicted = [t for t in data["trials"] if t.record.estimate is not None]
    assert predicted and data["rechecks"] and all(t.record.capacity for t in predicted)
    assert job.physics_breaches(data) == []


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_every_figure_of_each_example_is_within_physics(tmp_path, path):
    data = yaml.safe_load(path.read_text())
    job = _job(tmp_path, path.stem, data)
    assert job.physics_breaches() == []


@pytest.mark.parametrize("workload,deployment", [("chat.yaml", "h100-fp8.yaml"),
                                                 ("deepseek_v3_moe.yaml", "h200-dp8-ep.yaml")])
def test_predict_of_the_example_deployments_is_within_physics(capsys, workload, deployment):
    w, d = ROOT / "examples" / workload, ROOT / "examples" / "deployments" / deployment
    assert main(["predict", str(w), "--deployment", str(d), "--requests", "400", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    spec = Deployment.model_validate(yaml.safe_load(d.read_text()))
    gpu = get_gpu(spec.gpu)
    workload_spec = load_workload(w)
    compiled = compile_deployment(get_model(workload_spec.model), spec, gpu, PerformanceProfile.spec_default(gpu))
    stats = traffic_stats(workload_spec.traffic)
    load = Load.of(workload_spec.traffic, stats.mean_input_tokens, stats.mean_output_tokens, spec.enable_prefix_caching)
    assert check_summary(Fleet.of(compiled), load, doc, "predict") == []


def _plan_args(model: str, gpu: str, tp: int, **extra) -> argparse.Namespace:
    return argparse.Namespace(model=model, gpu=gpu, tp=tp, pp=1, quant=None, kv_dtype="auto", context=4096,
                              concurrency=8, gpu_memory_utilization=0.92, max_num_seqs=None,
                              max_num_batched_tokens=None, rate=None, output_tokens=None, occupancy_s=None,
                              redundancy=0.0, hardware=None, profile=None, **extra)


def test_plan_of_every_catalog_model_is_within_physics():
    breaches, planned = [], 0
    for name in sorted(preset_models()):
        for tp in (1, 2, 4, 8):  # the smallest TP whose weights fit an H200
            args = _plan_args(name, "h200", tp)
            try:
                result = compute_plan(args, with_fixes=False)
            except Exception:  # a TP that does not divide the model's heads
                continue
            if not result["memory_fits"]:
                continue
            _, _, _, compiled = plan_compiled(args)
            fleet = Fleet.of(compiled)
            what = f"plan {name} on h200 tp={tp}"
            breaches += check_memory(fleet, what)
            prefill_tokens = args.context  # one prompt of the whole context
            breaches += check_steps(fleet, prefill_tokens, result["prefill_s"], result["decode_step_s"], what)
            breaches += check_steps(fleet, 1, 1.0, result["decode_floor_s_per_token"], what + " decode floor")
            if result["kv_capacity_tokens"] * result["kv_bytes_per_token_per_gpu"] > result["kv_cache_bytes_per_gpu"] * 1.001:
                breaches.append(f"{what}: the KV pool's tokens need more bytes than the pool has")
            if result["weights_bytes_per_gpu"] + result["kv_cache_bytes_per_gpu"] > result["gpu_memory_bytes"]:
                breaches.append(f"{what}: weights and KV pool exceed the GPU")
            planned += 1
            break
    assert planned == len(preset_models()) and breaches == []


def test_plan_fixes_stay_within_memory():
    args = _plan_args("mistral-7b", "l4", 1)
    args.concurrency = 20
    result = compute_plan(args)
    assert result["fixes"]
    for fix in result["fixes"]:
        memory = get_gpu(fix["gpu"]).memory_bytes
        assert fix["weights_bytes_per_gpu"] + fix["kv_cache_bytes_per_gpu"] <= memory, fix["change"]
