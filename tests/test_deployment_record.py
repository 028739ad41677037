"""The deployment record: one typed object from the compiled deployment to front.json and the exporters."""

import json
from pathlib import Path

import pytest

from servopt.costmodels import Deployment, PerformanceProfile, get_gpu, get_model
from servopt.costmodels.errors import InputError
from servopt.costmodels.serving.compiled import (
    DECODE, PREFILL, REPLICA, DeploymentRecord, compile_deployment, num_nodes, place, role_name,
)
from servopt.optimizer.cli import main
from servopt.results import FrontPoint, TrialRecord, launch_plan, sglang_plan

OLD = Path(__file__).parent / "data" / "front_before_record"


def compiled(deployment: Deployment, model: str = "llama-3.1-8b", gpus_per_node: int | None = None):
    gpu = get_gpu(deployment.gpu)
    return compile_deployment(get_model(model), deployment, gpu, PerformanceProfile.spec_default(gpu),
                              gpus_per_node=gpus_per_node)


def test_roles_carry_their_placements_in_one_vocabulary():
    d = Deployment(gpu="h100", replicas=2, disaggregation={"prefill_instances": 2, "prefill_tp": 2,
                                                           "decode_instances": 1, "decode_tp": 4})
    c = compiled(d)
    assert [r.name for r in c.roles] == [PREFILL, DECODE]
    prefill, decode = c.roles
    assert [(p.replica, p.node, p.devices) for p in prefill.placements] == [
        (0, 0, [0, 1]), (0, 0, [2, 3]), (1, 1, [0, 1]), (1, 1, [2, 3])]
    assert [(p.replica, p.node, p.devices) for p in decode.placements] == [(0, 0, [4, 5, 6, 7]), (1, 1, [4, 5, 6, 7])]
    assert num_nodes(d, 8) == 2 and len(place(d, 4)) == 6
    bigger = c.with_replicas(3)
    assert len(bigger.role(PREFILL).placements) == 6 and bigger.record().num_nodes == 3
    assert role_name("serve") == role_name("aggregated") == REPLICA
    with pytest.raises(InputError, match="not one of"):
        role_name("router")


def test_record_holds_every_resolved_limit_and_round_trips():
    # Limits the deployment leaves out are vLLM's defaults for the GPU (H100: 8192 / 1024), in the record.
    record = compiled(Deployment(gpu="h100", tp=2, replicas=2), gpus_per_node=4).record()
    role = record.role(REPLICA)
    assert (role.max_num_batched_tokens, role.max_num_seqs, role.tp) == (8192, 1024, 2)
    assert record.max_model_len == get_model("llama-3.1-8b").max_context and record.gpus_per_node == 4
    assert record.weights.scheme == "bf16" and record.weights.vllm_quantization is None and record.moe is False
    assert [p.devices for _, p in record.instances()] == [[0, 1], [2, 3]]
    again = DeploymentRecord.model_validate(json.loads(record.model_dump_json()))
    assert again == record and again.instances() == record.instances()
    with pytest.raises(Exception):
        record.max_model_len = 1  # frozen


def test_compile_settles_the_weights_a_pre_quantized_checkpoint_serves():
    from servopt.costmodels.architectures import resolve_model

    resolved = resolve_model("RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic")
    gpu = get_gpu("h100")
    c = compile_deployment(resolved.spec, Deployment(gpu="h100"), gpu, PerformanceProfile.spec_default(gpu))
    # The file names no quantization: the checkpoint's own format is served, and the spec says so.
    assert c.quantization == resolved.quantization == c.deployment.quantization
    assert c.record().weights.vllm_quantization == resolved.spec.checkpoint.method


def test_a_rejected_point_is_recorded_as_drawn():
    # The search builds points without the spec's own checks; one that breaks them is still recorded.
    drawn = Deployment.model_construct(**{**Deployment(gpu="h100").model_dump(), "max_num_seqs": 512,
                                          "max_num_batched_tokens": 64})
    record = {"knobs": {}, "model": "m", "serve_id": "org/m", "fidelity": "precheck",
              "deployment": compiled(drawn).record().model_dump(mode="json"), "cost_usd_per_hour": 1.0,
              "gpus_rented": 1, "replicas": 1, "num_gpus": 1, "accuracy_drop_pct": 0.0, "feasible": False,
              "profile": "spec", "profile_calibrated": False, "eval_s": 0.0}
    back = TrialRecord.model_validate(json.loads(json.dumps(record)))
    assert back.deployment.spec.max_num_batched_tokens == 64


def test_front_json_of_an_old_job_exports_as_it_did():
    """front.json written before the record (spec, roles, weights and gpus_per_node side by side)
    still exports, to the same vLLM commands; its SGLang commands lose only the --quantization fp8
    that the old export passed for checkpoints already in FP8 (SGLang reads their config)."""
    front = json.loads((OLD / "front.json").read_text())
    expected = json.loads((OLD / "exports.json").read_text())
    for raw in front["points"]:
        point = FrontPoint.model_validate({**raw})
        want = expected[str(point.trial)]
        plan = launch_plan(point.deployment, trial=point.trial,
                           max_model_len_basis=front["max_model_len"][point.model]["basis"])
        assert [i["command"] for i in plan["instances"]] == want["vllm_commands"]
        assert plan["router"] == want["router"] and plan["notes"] == want["notes"]
        assert plan["num_nodes"] == want["num_nodes"]
        sglang = sglang_plan(point.deployment, trial=point.trial)
        old = [line for line in want["sglang_script"].splitlines() if "launch_server" in line]
        assert [i["command"] + " &" for i in sglang["instances"]] == [line.replace(" --quantization fp8", "")
                                                                       for line in old]


def test_export_cli_reads_an_old_front(tmp_path, capsys):
    (tmp_path / "front.json").write_text((OLD / "front.json").read_text())
    assert main(["export", str(tmp_path), "--pick", "25", "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [i["role"] for i in plan["instances"]] == [PREFILL, DECODE] and plan["weights"]["scheme"] == "fp8"


def test_export_reads_the_replica_down_flag_of_a_job_with_redundancy(tmp_path, capsys):
    """A job with redundancy writes among a point's metrics whether the fleet saturates with a
    replica down (true/false); export reads it, and refuses a true/false in any other figure."""
    front = json.loads((OLD / "front.json").read_text())
    for point in front["points"]:
        point["metrics"]["n_minus_1_saturated"] = False
    (tmp_path / "front.json").write_text(json.dumps(front))
    assert main(["export", str(tmp_path), "--pick", "25", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"]["n_minus_1_saturated"] is False
    front["points"][0]["metrics"]["p99_ttft_s"] = True
    (tmp_path / "front.json").write_text(json.dumps(front))
    assert main(["export", str(tmp_path), "--pick", "25", "--format", "json"]) == 2
    err = capsys.readouterr().err
    assert "points.0.metrics: p99_ttft_s: expected a number, not a true/false value (got true)" in err
