"""SGLang export: the deployment's parallelism, batching and memory as SGLang flags, checked by SGLang's parser."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from _optimizer_fixtures import TINY, compiled_record, write_workload

from servopt.costmodels.errors import InputError
from servopt.optimizer.cli import main
from servopt.results import FrontPoint, check_with_sglang, render_sglang, sglang_plan

ROOT = Path(__file__).resolve().parents[1]
BASE = {
    "gpu": "h200", "tp": 1, "pp": 1, "replicas": 1, "quantization": "fp8", "kv_cache_dtype": "auto",
    "max_num_seqs": 64, "max_num_batched_tokens": 4096, "enable_chunked_prefill": True, "enable_prefix_caching": True,
    "gpu_memory_utilization": 0.92, "max_model_len": 8192, "speculative": None, "disaggregation": None,
}


def point(model="deepseek-v3", serve_id="deepseek-ai/DeepSeek-V3", **over):
    return compiled_record({"model": model, "serve_id": serve_id, "deployment": {**BASE, **over}})


def flags(args: list[str]) -> dict:
    out, i = {}, 0
    while i < len(args):
        if i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[args[i]], i = args[i + 1], i + 2
        else:
            out[args[i]], i = True, i + 1
    return out


def test_moe_data_and_expert_parallel_map_to_dp_attention_and_ep():
    plan = sglang_plan(point(data_parallel_size=8, enable_expert_parallel=True))
    f = flags(plan["instances"][0]["args"])
    assert f["--tp-size"] == "8" and f["--dp-size"] == "8" and f["--enable-dp-attention"] is True
    assert f["--ep-size"] == "8" and f["--quantization"] == "fp8" and f["--max-running-requests"] == "64"
    assert f["--chunked-prefill-size"] == "4096" and f["--context-length"] == "8192"
    assert 0.5 < float(f["--mem-fraction-static"]) < 0.92  # weights and KV pool, not activations
    assert plan["instances"][0]["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    dense = flags(sglang_plan(point("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", tp=2, data_parallel_size=2,
                                    kv_cache_dtype="fp8", enable_chunked_prefill=False,
                                    enable_prefix_caching=False))["instances"][0]["args"])
    assert dense["--tp-size"] == "2" and dense["--dp-size"] == "2" and "--enable-dp-attention" not in dense
    assert dense["--kv-cache-dtype"] == "fp8_e4m3" and dense["--chunked-prefill-size"] == "-1"
    assert dense["--disable-radix-cache"] is True
    with pytest.raises(InputError, match="span nodes"):
        sglang_plan(point(data_parallel_size=16))


def test_speculation_disaggregation_and_shell_quoting():
    spec = {"method": "eagle3", "num_speculative_tokens": 3, "draft_model": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}
    plan = sglang_plan(point("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct; rm -rf /", speculative=spec))
    f = flags(plan["instances"][0]["args"])
    assert f["--speculative-algorithm"] == "EAGLE3" and f["--speculative-num-draft-tokens"] == "4"
    assert shlex.split(plan["instances"][0]["command"])[5] == "meta-llama/Llama-3.1-8B-Instruct; rm -rf /"
    dis = {"prefill_instances": 1, "prefill_tp": 2, "decode_instances": 2, "decode_tp": 2}
    plan = sglang_plan(point("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", disaggregation=dis))
    assert [flags(i["args"])["--disaggregation-mode"] for i in plan["instances"]] == ["prefill", "decode", "decode"]
    assert "--pd-disaggregation" in plan["routers"][0]["args"] and "router" in render_sglang(plan)


def sglang_python() -> str | None:
    """An interpreter with SGLang: SERVOPT_SGLANG_PYTHON, the repo's .sglang-venv, or this one (found
    without importing SGLang, which takes seconds)."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('sglang') is None)"
    for candidate in (os.environ.get("SERVOPT_SGLANG_PYTHON"), str(ROOT / ".sglang-venv" / "bin" / "python"),
                      shutil.which("python3")):
        if candidate and Path(candidate).exists():
            if subprocess.run([candidate, "-c", probe], capture_output=True, timeout=60).returncode == 0:
                return candidate
    return None


@pytest.fixture(scope="module")
def sglang():
    python = sglang_python()
    if python is None:
        pytest.skip("SGLang is not installed (pip install sglang into .sglang-venv, or set SERVOPT_SGLANG_PYTHON)")
    return python


def test_sglang_parser_accepts_the_default_jobs_front_and_moe_exports(sglang, tmp_path, capsys, monkeypatch):
    default = yaml.safe_load((ROOT / "optimizer" / "data" / "default_workload.yaml").read_text())
    workload = {**default, "budget": TINY["budget"], "fidelity": TINY["fidelity"], "space": TINY["space"]}
    path = write_workload(tmp_path / "default.yaml", workload)
    assert main(["optimize", str(path), "--out", str(tmp_path / "out"), "--no-progress", "--json"]) == 0
    capsys.readouterr()
    front = json.loads((tmp_path / "out" / "front.json").read_text())
    plans = [sglang_plan(FrontPoint.model_validate(p).deployment) for p in front["points"]]
    spec = {"method": "mtp", "num_speculative_tokens": 1, "draft_model": None}
    plans += [sglang_plan(point(data_parallel_size=8, enable_expert_parallel=True, kv_cache_dtype="fp8",
                                speculative=spec)),
              sglang_plan(point("llama-3.1-8b", "meta-llama/Llama-3.1-8B-Instruct", quantization="bf16",
                                disaggregation={"prefill_instances": 1, "prefill_tp": 1, "decode_instances": 1,
                                                "decode_tp": 1}))]
    bad = sglang_plan(point())["instances"][0]
    bad = {**bad, "args": bad["args"] + ["--kv-cache-dtype", "fp9"]}
    # One run of SGLang's parser over every server (importing SGLang takes seconds).
    problems = check_with_sglang({"instances": [i for plan in plans for i in plan["instances"]] + [bad]}, sglang)
    assert len(problems) == 1 and "fp9" in problems[0]
    monkeypatch.setenv("SERVOPT_SGLANG_PYTHON", sglang)
    assert main(["export", str(tmp_path / "out"), "--format", "sglang", "--check"]) == 0
    out = capsys.readouterr().out
    assert "python -m sglang.launch_server" in out and "SGLang's parser accepts" in out
