"""vLLM export: every searched value appears exactly as chosen, quoted for the shell."""

import importlib.util
import json
import shlex

import pytest

from servopt.results import launch_plan, render_shell

BASE = {
    "gpu": "h100", "tp": 2, "pp": 1, "replicas": 3, "quantization": "fp8", "kv_cache_dtype": "fp8",
    "max_num_seqs": 77, "max_num_batched_tokens": 3001, "enable_chunked_prefill": False,
    "enable_prefix_caching": True, "gpu_memory_utilization": 0.92, "max_model_len": 6144,
    "speculative": None, "disaggregation": None,
}


def point(**over):
    return {"trial": 7, "serve_id": "meta-llama/Llama-3.1-8B-Instruct", "deployment": {**BASE, **over}}


def flags(argv):
    out, i = {}, 0
    while i < len(argv):
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[argv[i]] = argv[i + 1]
            i += 2
        else:
            out[argv[i]] = True
            i += 1
    return out


def test_every_searched_value_is_exported_as_chosen():
    plan = launch_plan(point(), {})
    assert len(plan["instances"]) == 3 and plan["replicas"] == 3
    argv = shlex.split(plan["instances"][0]["command"])
    assert argv[:4] == ["CUDA_VISIBLE_DEVICES=0,1", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
    f = flags(argv[4:])
    assert f["--tensor-parallel-size"] == "2" and "--pipeline-parallel-size" not in f
    assert f["--quantization"] == "fp8" and f["--kv-cache-dtype"] == "fp8"
    assert f["--max-num-seqs"] == "77" and f["--max-num-batched-tokens"] == "3001"
    assert f["--no-enable-chunked-prefill"] is True and "--enable-chunked-prefill" not in f
    assert f["--max-model-len"] == "6144" and f["--gpu-memory-utilization"] == "0.92"
    assert f["--enable-prefix-caching"] is True
    devices = [shlex.split(i["command"])[0] for i in plan["instances"]]
    assert devices == ["CUDA_VISIBLE_DEVICES=0,1", "CUDA_VISIBLE_DEVICES=2,3", "CUDA_VISIBLE_DEVICES=4,5"]


def test_pipeline_and_bf16_and_prefix_caching_off():
    plan = launch_plan(point(tp=8, pp=2, replicas=1, quantization="bf16", enable_prefix_caching=False,
                             enable_chunked_prefill=True), {})
    f = flags(shlex.split(plan["instances"][0]["command"])[4:])
    assert f["--pipeline-parallel-size"] == "2" and f["--dtype"] == "bfloat16" and "--quantization" not in f
    assert f["--no-enable-prefix-caching"] is True and f["--enable-chunked-prefill"] is True
    assert plan["num_nodes"] == 2 and any("Ray" in n for n in plan["notes"])


def test_speculative_config_json_survives_the_shell():
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "acceptance_rate": None, "draft_tp": None}
    plan = launch_plan(point(speculative=spec, replicas=1), {})
    f = flags(shlex.split(plan["instances"][0]["command"])[4:])
    assert json.loads(f["--speculative-config"]) == {"method": "eagle3", "num_speculative_tokens": 3,
                                                      "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}


@pytest.mark.parametrize("scheme, method", [("awq", "awq_marlin"), ("gptq", "gptq_marlin"), ("int8", "compressed-tensors")])
def test_pre_quantized_checkpoints(scheme, method):
    plan = launch_plan(point(quantization=scheme, replicas=1), {})
    assert any("pre-quantized checkpoint" in n and scheme in n for n in plan["notes"])
    command = plan["instances"][0]["command"]
    assert f'"${{SERVOPT_{scheme.upper()}_CHECKPOINT:?' in command and f"--quantization {method}" in command
    given = launch_plan(point(quantization=scheme, replicas=1), {scheme: "org/My-Model-Quantized"})
    assert shlex.split(given["instances"][0]["command"])[3] == "org/My-Model-Quantized"
    assert not any("pre-quantized" in n for n in given["notes"])


def test_disaggregation_one_command_per_role_and_a_proxy():
    dis = {"prefill_instances": 1, "prefill_tp": 2, "decode_instances": 2, "decode_tp": 1,
           "prefill_max_num_seqs": None, "prefill_max_num_batched_tokens": None, "decode_max_num_seqs": None,
           "decode_max_num_batched_tokens": None, "same_node": None, "rdma_gbps": 50.0}
    plan = launch_plan(point(disaggregation=dis, replicas=1), {})
    roles = [i["role"] for i in plan["instances"]]
    assert roles == ["prefill", "decode", "decode"]
    for inst in plan["instances"]:
        f = flags(shlex.split(inst["command"])[5:])
        config = json.loads(f["--kv-transfer-config"])
        assert config == {"kv_connector": "NixlConnector",
                          "kv_role": "kv_producer" if inst["role"] == "prefill" else "kv_consumer"}
        assert f["--tensor-parallel-size"] == ("2" if inst["role"] == "prefill" else "1")
        assert "VLLM_NIXL_SIDE_CHANNEL_PORT" in inst["env"]
    proxy = shlex.split(plan["proxies"][0]["command"])
    assert proxy[2:4] == ["--port", "8192"] and "--prefiller-ports" in proxy and "--decoder-ports" in proxy
    script = render_shell(plan)
    assert script.count("vllm serve") == 3 and "toy_proxy_server.py" in script


def test_export_cli(tmp_path, capsys):
    from servopt.optimizer.cli import main

    front = {"study": "s", "workload": {"objective": {"cost": "usd_per_hour", "latency": "e2e"}, "checkpoints": {}},
             "points": [
                 {**point(), "trial": 1, "gpus_per_node": 8, "metrics": {"cost_usd_per_hour": 5.0, "p99_e2e_s": 9.0,
                                                                          "p99_ttft_s": 1, "p99_tpot_s": 0.02}},
                 {**point(tp=4), "trial": 2, "gpus_per_node": 8, "metrics": {"cost_usd_per_hour": 9.0, "p99_e2e_s": 4.0,
                                                                              "p99_ttft_s": 1, "p99_tpot_s": 0.02}}]}
    (tmp_path / "front.json").write_text(json.dumps(front))
    assert main(["export", str(tmp_path), "--pick", "fastest", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["trial"] == 2
    assert main(["export", str(tmp_path)]) == 0
    assert "--tensor-parallel-size 2" in capsys.readouterr().out
    assert main(["export", str(tmp_path), "--pick", "5"]) == 2
    assert "not on the front" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--format", "yaml", "--pick", "1"]) == 0
    assert "vllm_version: '0.33'" in capsys.readouterr().out


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_parser_accepts_the_flags():
    from servopt.results import check_with_vllm

    spec = {"method": "ngram", "num_speculative_tokens": 3, "draft_model": None, "acceptance_rate": None,
            "draft_tp": None}
    assert check_with_vllm(launch_plan(point(speculative=spec, replicas=1), {})) == []
