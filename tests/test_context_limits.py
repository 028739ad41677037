"""Issue 20: contexts as vLLM 0.33 allows them for each config, and the fix named when a job needs more."""

from __future__ import annotations

import copy

import pytest
from _optimizer_fixtures import TINY

from servopt.costmodels.architectures import get_model, vllm_max_model_len
from servopt.costmodels.errors import InputError
from servopt.optimizer._problem import build_problem
from servopt.optimizer.workload import parse_workload

YARN_FLAG = ('--hf-overrides \'{"rope_parameters":{"rope_type":"yarn","factor":4.0,'
             '"original_max_position_embeddings":32768,"rope_theta":1000000.0},"max_position_embeddings":131072}\'')


def job(model: str, prompt: dict, **extra) -> dict:
    data = copy.deepcopy(TINY)
    data.update(model=model, **extra)
    data["traffic"]["input_tokens"] = prompt
    return data


@pytest.mark.parametrize(("config", "family", "limit"), [
    ({"max_position_embeddings": 32768}, "qwen2", 32768),
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "llama", 131072),
    ({"max_position_embeddings": 163840, "rope_scaling": {"type": "yarn", "factor": 40}}, "deepseek_v3", 163840),
    ({"max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0}}, "llama", 8192),
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, "gemma3", 131072),
    ({"max_position_embeddings": 8192, "seq_length": 4096}, "llama", 4096),
    ({}, "llama", 2048),
])
def test_the_limit_is_the_one_vllm_derives_from_the_config(config, family, limit):
    """The smallest length key, times the RoPE factor unless the type already counts it (vllm/config/model.py@v0.33.0)."""
    assert vllm_max_model_len(config, family) == limit


def test_a_job_whose_requests_do_not_fit_is_told_the_rope_flag_its_card_documents():
    workload = parse_workload(job("Qwen/Qwen2.5-7B-Instruct", {"kind": "fixed", "value": 60000}), "w.yaml")
    with pytest.raises(InputError) as err:
        build_problem(workload)
    message = str(err.value)
    assert "more than the model's maximum context of 32,768" in message and YARN_FLAG in message
    assert "Qwen/Qwen2.5-7B (131,072)" in message  # a catalogued model with a longer context


def test_longer_tail_requests_are_capped_at_the_config_limit_and_the_note_says_how_to_serve_them():
    workload = parse_workload(job("Qwen/Qwen2.5-7B-Instruct", {"kind": "uniform", "low": 1000, "high": 40000}),
                              "w.yaml")
    problem = build_problem(workload)
    assert problem.ctx.max_model_len["Qwen/Qwen2.5-7B-Instruct"] == 32768
    assert YARN_FLAG in problem.max_model_len_basis["Qwen/Qwen2.5-7B-Instruct"]


def test_a_max_model_len_beyond_the_config_is_refused_with_the_fix():
    workload = parse_workload(job("Qwen/Qwen3-8B", {"kind": "fixed", "value": 512}, max_model_len=65536), "w.yaml")
    with pytest.raises(InputError, match=r"max_model_len: 65536 exceeds the model's maximum context of 40960: .*yarn"):
        build_problem(workload)


def test_a_checkpoint_is_limited_by_its_own_config_not_only_its_base():
    assert get_model("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8").max_context == 262144
    assert get_model("Qwen/Qwen3-30B-A3B-FP8").max_context == 40960
