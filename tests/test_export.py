"""vLLM export: every searched value as chosen, one script per node, nothing a user wrote runs as code."""

import json
import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
from _optimizer_fixtures import compiled_record

from servopt.costmodels.errors import InputError
from servopt.results import find_vllm_python, launch_plan, node_scripts, render_readme, render_shell, serve_commands
from servopt.results._export import comment

BASE = {
    "gpu": "h100", "tp": 2, "pp": 1, "replicas": 3, "quantization": "fp8", "kv_cache_dtype": "fp8",
    "max_num_seqs": 77, "max_num_batched_tokens": 3001, "enable_chunked_prefill": False,
    "enable_prefix_caching": True, "gpu_memory_utilization": 0.92, "max_model_len": 6144,
    "speculative": None, "disaggregation": None,
}
DIS = {"prefill_instances": 1, "prefill_tp": 2, "decode_instances": 2, "decode_tp": 1,
       "prefill_max_num_seqs": None, "prefill_max_num_batched_tokens": None, "decode_max_num_seqs": None,
       "decode_max_num_batched_tokens": None, "same_node": None, "rdma_gbps": 50.0}


def record(weights=None, **over):
    """The deployment record of BASE with ``over`` (serving ``weights``: a weights record's fields)."""
    return compiled_record({"serve_id": "meta-llama/Llama-3.1-8B-Instruct", "deployment": {**BASE, **over},
                            "weights": weights})


def old_point(**over):
    """A front.json point as servopt wrote it before the deployment record: spec, roles and weights side by side."""
    r = record(**over)
    return {"serve_id": "meta-llama/Llama-3.1-8B-Instruct", "deployment": r.spec.model_dump(mode="json"),
            "weights": None, "roles": [role.model_dump(mode="json") for role in r.roles]}


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
    plan = launch_plan(record())
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


def test_pipeline_spans_nodes_with_one_script_each():
    plan = launch_plan(record(tp=8, pp=2, replicas=1, quantization="bf16", enable_prefix_caching=False,
                             enable_chunked_prefill=True))
    f = flags(shlex.split(plan["instances"][0]["command"])[4:])
    assert f["--pipeline-parallel-size"] == "2" and f["--dtype"] == "bfloat16" and "--quantization" not in f
    assert f["--distributed-executor-backend"] == "ray"
    assert f["--no-enable-prefix-caching"] is True and f["--enable-chunked-prefill"] is True
    scripts = node_scripts(plan)
    assert plan["num_nodes"] == 2 and sorted(scripts) == ["node-0.sh", "node-1.sh"]
    assert "ray start --head" in scripts["node-0.sh"] and "vllm serve" in scripts["node-0.sh"]
    assert "vllm serve" not in scripts["node-1.sh"] and 'ray start --address="$head_address:6379"' in scripts["node-1.sh"]
    readme = render_readme(plan, scripts)
    assert readme.index("node-0.sh") < readme.index("node-1.sh HEAD_ADDRESS")


def test_replicas_over_nodes_are_not_started_on_one_machine():
    plan = launch_plan(record(tp=4, replicas=4))  # 16 GPUs: two nodes of 8
    scripts = node_scripts(plan)
    assert sorted(scripts) == ["node-0.sh", "node-1.sh", "router.sh"]
    assert scripts["node-0.sh"].count("vllm serve") == 2 and scripts["node-1.sh"].count("vllm serve") == 2
    assert 'if [ "$#" -ne 2 ]' in scripts["router.sh"] and '"http://${node1}:8003"' in scripts["router.sh"]
    with pytest.raises(InputError, match="--out"):
        render_shell(plan)


@pytest.mark.parametrize("router, policy", [("round_robin", "round_robin"), ("power_of_two", "power_of_two"),
                                            ("least_outstanding", "power_of_two")])
def test_the_router_starts_the_policy_that_was_simulated(router, policy):
    plan = launch_plan(record(router=router))
    args = plan["router"]["args"]
    assert args[args.index("--policy") + 1] == policy
    assert any("does not offer" in note for note in plan["notes"]) == (router != policy)
    dis = launch_plan(record(disaggregation=DIS, replicas=1, router=router))["router"]["args"]
    assert dis[dis.index("--prefill-policy") + 1] == dis[dis.index("--decode-policy") + 1] == policy


def test_speculative_config_json_survives_the_shell():
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B",
            "acceptance_rate": None, "draft_tp": None}
    plan = launch_plan(record(speculative=spec, replicas=1))
    f = flags(shlex.split(plan["instances"][0]["command"])[4:])
    assert json.loads(f["--speculative-config"]) == {"method": "eagle3", "num_speculative_tokens": 3,
                                                      "model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}


def test_pre_quantized_checkpoint_is_served_with_its_method_and_kv_meaning():
    weights = {"scheme": "fp8", "serve_id": "nvidia/Llama-3.1-8B-Instruct-FP8", "vllm_quantization": "modelopt",
               "kv_cache_auto": "fp8", "source": "catalog", "format": "modelopt fp8"}
    plan = launch_plan(record(weights=weights, replicas=1, kv_cache_dtype="auto"))
    argv = shlex.split(plan["instances"][0]["command"])
    assert argv[3] == "nvidia/Llama-3.1-8B-Instruct-FP8" and flags(argv[4:])["--quantization"] == "modelopt"
    assert any("carries FP8 KV-cache scales" in n for n in plan["notes"])


@pytest.mark.parametrize("scheme", ["int8", "awq", "gptq", "nvfp4"])
def test_no_placeholder_when_a_checkpoint_is_unknown(scheme):
    with pytest.raises(InputError, match=f"names no {scheme} checkpoint"):
        launch_plan(record(quantization=scheme, replicas=1))


def test_each_instance_runs_its_compiled_roles_limits():
    # Limits the deployment leaves to vLLM come from the compiled deployment (vLLM's H100 defaults);
    # a P/D role's own limits override the deployment's.
    plan = launch_plan(record(max_num_seqs=None, max_num_batched_tokens=None, enable_chunked_prefill=True, replicas=1))
    f = flags(shlex.split(plan["instances"][0]["command"])[4:])
    assert f["--max-num-seqs"] == "1024" and f["--max-num-batched-tokens"] == "8192"
    dis = {**DIS, "decode_max_num_seqs": 33, "prefill_max_num_batched_tokens": 16384}
    plan = launch_plan(record(disaggregation=dis, replicas=1))
    limits = {i["role"]: flags(shlex.split(i["command"])[5:]) for i in plan["instances"]}
    assert limits["prefill"]["--max-num-batched-tokens"] == "16384" and limits["prefill"]["--max-num-seqs"] == "77"
    assert limits["decode"]["--max-num-seqs"] == "33" and limits["decode"]["--max-num-batched-tokens"] == "3001"
    stale = record(replicas=1).model_copy(update={"roles": ()})
    with pytest.raises(InputError, match="no compiled roles.*servopt report"):
        launch_plan(stale)


def test_disaggregation_uses_the_vllm_router():
    plan = launch_plan(record(disaggregation=DIS, replicas=1))
    roles = [i["role"] for i in plan["instances"]]
    assert roles == ["prefill", "decode", "decode"]
    for inst in plan["instances"]:
        f = flags(shlex.split(inst["command"])[5:])
        assert json.loads(f["--kv-transfer-config"]) == {
            "kv_connector": "NixlConnector", "kv_role": "kv_producer" if inst["role"] == "prefill" else "kv_consumer"}
        assert f["--tensor-parallel-size"] == ("2" if inst["role"] == "prefill" else "1")
    scripts = node_scripts(plan)
    router = shlex.split(scripts["router.sh"].splitlines()[-1])
    assert router[:3] == ["exec", "vllm-router", "--vllm-pd-disaggregation"]
    assert router.count("--prefill") == 1 and router.count("--decode") == 2
    assert "toy_proxy_server" not in "".join(scripts.values())


def test_uncalibrated_gpu_is_marked_in_every_file():
    plan = launch_plan(record(replicas=1), calibrated=False)
    scripts = node_scripts(plan)
    assert "# UNCALIBRATED" in scripts["node-0.sh"] and "UNCALIBRATED" in render_readme(plan, scripts)


def test_comments_cannot_be_broken_out_of():
    assert "\n" not in comment("a\nb\rc\u2028d") and comment("x$(y)") == "x$(y)"


def test_export_cli(tmp_path, capsys):
    from servopt.optimizer.cli import main

    front = {"study": "s", "workload": {"objective": {"cost": "usd_per_hour", "latency": "e2e"}},
             "gpus": {"h100": {"calibrated": True}},
             "points": [
                 {**old_point(replicas=1), "trial": 1, "gpus_per_node": 8, "metrics": {
                     "cost_usd_per_hour": 5.0, "p99_e2e_s": 9.0, "p99_ttft_s": 1, "p99_tpot_s": 0.02}},
                 {**old_point(tp=4), "trial": 2, "gpus_per_node": 8, "metrics": {
                     "cost_usd_per_hour": 9.0, "p99_e2e_s": 4.0, "p99_ttft_s": 1, "p99_tpot_s": 0.02}}]}
    (tmp_path / "front.json").write_text(json.dumps(front))
    assert main(["export", str(tmp_path), "--pick", "fastest", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["trial"] == 2
    assert main(["export", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "--tensor-parallel-size 2" in out and out.startswith("#!/usr/bin/env bash")
    assert os.access(tmp_path / "export-trial-1" / "node-0.sh", os.X_OK)
    assert main(["export", str(tmp_path), "--pick", "5"]) == 2
    assert "not on the front" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--format", "yaml", "--pick", "1"]) == 0
    assert "vllm_version: '0.33'" in capsys.readouterr().out


def test_export_refuses_a_tampered_front(tmp_path, capsys):
    from servopt.optimizer.cli import main

    bad = {**old_point(replicas=1), "serve_id": "x$(touch pwned)/m", "trial": 1, "gpus_per_node": 8,
           "metrics": {"cost_usd_per_hour": 1.0, "p99_e2e_s": 1.0, "p99_ttft_s": 1, "p99_tpot_s": 0.02}}
    front = {"study": "s", "workload": {"objective": {"cost": "usd_per_hour", "latency": "e2e"}}, "points": [bad]}
    (tmp_path / "front.json").write_text(json.dumps(front))
    assert main(["export", str(tmp_path)]) == 2
    assert "not a Hugging Face id" in capsys.readouterr().err


# --- nothing a workload says can run ----------------------------------------------------------

PAYLOADS = ["$(touch {m})", "`touch {m}`", "';touch {m};'", '";touch {m};"', "x\ntouch {m}", "$(touch${{IFS}}{m})"]


def _stub_path(tmp_path: Path) -> Path:
    """A bin folder whose vllm, vllm-router, ray and python only record their arguments."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in ("vllm", "vllm-router", "ray", "python", "python3"):
        path = stubs / name
        path.write_text('#!/bin/sh\nprintf "%s\\n" "$@" >> "$STUB_LOG"\nexit 0\n')
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return stubs


def _run_scripts(folder: Path, stubs: Path, log: Path) -> None:
    """Run every script with stubs first on PATH, giving each the node addresses its usage asks for."""
    env = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "STUB_LOG": str(log)}
    for script in sorted(folder.glob("*.sh")):
        wanted = re.search(r'"\$#" -ne (\d+)', script.read_text())
        addresses = ["127.0.0.1"] * (int(wanted.group(1)) if wanted else 0)
        done = subprocess.run(["bash", str(script), *addresses], env=env, capture_output=True,
                              text=True, timeout=60, cwd=folder)
        assert done.returncode == 0, (script.name, done.stderr)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_planted_strings_are_rejected_or_inert(tmp_path, payload, capsys):
    """Every workload string that reaches an export: ids are refused at input; a local checkpoint
    folder (whose name may be anything) is served quoted, and running every exported script with
    stub executables first on PATH creates no marker file."""
    from servopt.optimizer.cli import main
    from servopt.optimizer.workload import parse_workload

    marker = tmp_path / "pwned"
    evil = payload.format(m=marker)
    base = {"traffic": {"arrival": {"kind": "poisson", "rate_per_s": 2},
                        "input_tokens": {"kind": "fixed", "value": 512},
                        "output_tokens": {"kind": "fixed", "value": 64}}}
    for field in ("model", "checkpoints.int8", "checkpoints.awq", "alternatives.model", "alternatives.checkpoint",
                  "speculation.draft_model"):
        data = {**base, "model": "llama-3.1-8b"}
        if field == "model":
            data["model"] = evil
        elif field.startswith("checkpoints."):
            data["checkpoints"] = {field.split(".")[1]: evil}
        elif field.startswith("alternatives."):
            data["alternatives"] = [{"model": evil if field.endswith("model") else "llama-3.2-3b",
                                     "accuracy_drop_pct": 1.0, **({"checkpoint": evil} if field.endswith("checkpoint") else {})}]
        else:
            data["speculation"] = [{"method": "eagle3", "draft_model": evil, "acceptance_rate": 0.5}]
        with pytest.raises(InputError, match="not a Hugging Face id|control characters"):
            parse_workload(data, "workload")

    # A local checkpoint folder may carry any name: it is served, and quoted.
    folder = tmp_path / evil.replace("/", "_")
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
              "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    (folder / "config.json").write_text(json.dumps(config))
    workload = {**base, "model": str(folder), "gpus": ["h100"], "budget": {"trials": 12}, "seed": 1,
                "space": {"tp": [1, 2], "mode": ["aggregated", "disaggregated"]},
                "fidelity": {"search_requests": 60, "final_requests": 60}}
    job = tmp_path / "job"
    (tmp_path / "w.yaml").write_text(json.dumps(workload))
    if "\n" in evil:  # control characters are refused even in a path that exists
        assert main(["optimize", str(tmp_path / "w.yaml"), "--out", str(job), "--no-progress"]) == 2
        assert "control characters" in capsys.readouterr().err and not marker.exists()
        return
    assert main(["optimize", str(tmp_path / "w.yaml"), "--out", str(job), "--no-progress"]) == 0
    front = json.loads((job / "front.json").read_text())
    stubs, log = _stub_path(tmp_path), tmp_path / "calls.log"
    for p in front["points"]:
        out = tmp_path / f"export-{p['trial']}"
        assert main(["export", str(job), "--pick", str(p["trial"]), "--out", str(out)]) == 0
        capsys.readouterr()
        _run_scripts(out, stubs, log)
    assert not marker.exists()
    calls = log.read_text()
    assert str(folder) in calls.splitlines()  # the folder reached vllm as one argument, unchanged


def test_serve_commands_are_read_as_the_shell_reads_them():
    plan = launch_plan(record(disaggregation=DIS, replicas=1))
    commands = serve_commands(node_scripts(plan))
    assert len(commands) == 3 and all(c["argv"][:3] == ["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct"]
                                      for c in commands)
    assert not any(">" in word or word == "&" for c in commands for word in c["argv"])


@pytest.mark.skipif(find_vllm_python() is None, reason="vLLM is not installed (python3 -m venv .vllm-venv && "
                    "VLLM_TARGET_DEVICE=cpu .vllm-venv/bin/pip install vllm)")
def test_vllm_parser_accepts_the_scripts():
    from servopt.results import check_with_vllm

    spec = {"method": "ngram", "num_speculative_tokens": 3, "draft_model": None, "acceptance_rate": None,
            "draft_tp": None}
    weights = {"scheme": "int8", "serve_id": "RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a8",
               "vllm_quantization": "compressed-tensors", "kv_cache_auto": "auto", "source": "catalog", "format": ""}
    scripts = {}
    for i, p in enumerate([record(speculative=spec, replicas=1), record(weights=weights, quantization="int8"),
                           record(disaggregation=DIS, replicas=2), record(tp=8, pp=2, replicas=1, quantization="bf16"),
                           record(enforce_eager=True)]):
        scripts.update({f"{i}-{k}": v for k, v in node_scripts(launch_plan(p)).items()})
    version, problems = check_with_vllm(scripts)
    assert problems == [] and version.startswith("0.")
    bad = {"x.sh": "vllm serve m/x --port 1 --max-num-seqs lots\n"}
    assert check_with_vllm(bad)[1]
    # Multi-step scheduling left vLLM in 0.10.1: the target release refuses the flag, as servopt does.
    assert check_with_vllm({"y.sh": "vllm serve m/x --port 1 --num-scheduler-steps 8\n"})[1]
