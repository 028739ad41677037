import json

import pytest

from servopt.optimizer.cli import main

GIB = 1024**3


def run_json(capsys, *args: str) -> dict:
    assert main(["plan", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_json_has_the_documented_keys(capsys):
    result = run_json(capsys, "--model", "llama-3.1-8b", "--gpu", "h100", "--context", "4096", "--concurrency", "20")
    for key in ("weights_bytes", "kv_bytes_per_token", "kv_bytes_per_request", "kv_bytes_total", "fits",
                "max_concurrency", "kv_capacity_tokens", "decode_floor_s_per_token"):
        assert key in result
    assert result["kv_bytes_per_token"] == 128 * 1024
    assert result["kv_bytes_per_request"] == 0.5 * GIB
    assert result["kv_bytes_total"] == 10 * GIB
    assert result["fits"] is True
    assert result["prefill_s"] > result["decode_step_s"] > 0


def test_plan_seed_capacity_example(capsys):
    common = ["--model", "mistral-7b", "--gpu", "L4", "--context", "4096", "--concurrency", "20",
              "--gpu-memory-utilization", "0.95"]
    assert run_json(capsys, *common)["fits"] is False
    assert run_json(capsys, *common, "--quant", "awq")["fits"] is True
    assert run_json(capsys, *common, "--kv-dtype", "fp8")["fits"] is True


def test_plan_bytes_are_summed_over_tp_ranks(capsys):
    one = run_json(capsys, "--model", "llama-3.1-70b", "--gpu", "h100", "--tp", "4")
    assert one["weights_bytes"] == pytest.approx(4 * one["weights_bytes_per_gpu"], rel=0.01)
    assert one["kv_bytes_per_token"] == 320 * 1024


def test_plan_human_output_mentions_fit_and_profile(capsys):
    assert main(["plan", "--model", "qwen3-32b", "--gpu", "a100-80gb"]) == 0
    out = capsys.readouterr().out
    assert "fits" in out and "decode floor" in out and "Profile:" in out


@pytest.mark.parametrize("args,message", [
    (["--model", "llama-9b", "--gpu", "h100"], "unknown model 'llama-9b'"),
    (["--model", "llama-3.1-8b", "--gpu", "h900"], "unknown GPU 'h900'"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "3"], "does not divide the 32 attention heads"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--context", "10000000"], "exceeds"),
    (["--model", "llama-3.1-8b", "--gpu", "h100", "--tp", "128"], "beyond"),
])
def test_plan_input_errors_exit_2_with_one_line(capsys, args, message):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag,value,bound", [
    ("--concurrency", "-4", "from 1 to 1,048,576"), ("--concurrency", "0", "from 1 to 1,048,576"),
    ("--concurrency", "abc", "from 1 to 1,048,576"), ("--concurrency", str(10**12), "from 1 to 1,048,576"),
    ("--gpu-memory-utilization", "1.5", "(0, 1]"), ("--tp", "100000", "from 1 to 512"),
])
def test_plan_refuses_numbers_out_of_bounds_in_one_line(capsys, flag, value, bound):
    with pytest.raises(SystemExit) as exit_info:
        main(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", flag, value])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"servopt plan: error: argument {flag}: ") and bound in err and err.count("\n") == 1


@pytest.mark.parametrize("content,message", [
    ("{not json", "not valid JSON"),
    ('{"model_type": "llama", "hidden_size": 4096}', "num_attention_heads"),
    ('{"model_type": "bert"}', "not supported"),
])
def test_plan_malformed_config_json(tmp_path, capsys, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    assert main(["plan", "--model", str(path), "--gpu", "h100"]) == 2
    assert message in capsys.readouterr().err


def test_catalog_commands(capsys):
    assert main(["gpus"]) == 0
    out = capsys.readouterr().out
    assert "h100" in out and "mi300x" in out and "lambda" in out.lower()
    assert main(["models", "--json"]) == 0
    names = {row["name"] for row in json.loads(capsys.readouterr().out)}
    assert "meta-llama/Llama-3.1-8B" in names and "deepseek-ai/DeepSeek-V3" in names
