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


SEED_7B = ["--model", "mistral-7b", "--context", "4096", "--concurrency", "20"]


@pytest.mark.parametrize("gpu", ["rtx4090", "l4"])
def test_seed_7b_on_a_24_gb_card_does_not_fit_and_says_what_would(capsys, gpu):
    # Seed 7.1-7.2: 7B GQA in bf16 (14 GB), 4K context, 20 concurrent requests (10 GB of KV) on a 24 GB card.
    assert main(["plan", *SEED_7B, "--gpu", gpu]) == 0
    out = capsys.readouterr().out
    assert "fits                    NO" in out and "20 x 4096 tokens does not fit" in out
    fixes = run_json(capsys, *SEED_7B, "--gpu", gpu)["fixes"]
    by_change = {f["change"].split(" (")[0]: f for f in fixes}
    for change in ("INT4 weights", "FP8 KV cache", "TP 2"):
        assert by_change[change]["fits"], change
        assert f"- {by_change[change]['change']}: " in out
    larger = [f for f in fixes if f["change"].startswith(("a ", "an ")) and "GB GPU" in f["change"]]
    assert any(" 48 GB " in f["change"] for f in larger) and any(" 80 GB " in f["change"] for f in larger)
    assert all(f["fits"] for f in larger)
    # INT4 weights: 14 GB -> about 4 GB; FP8 KV: 10 GB -> 5 GB (seed 7.2).
    assert by_change["INT4 weights"]["weights_bytes_per_gpu"] < 0.3 * run_json(capsys, *SEED_7B, "--gpu", gpu)[
        "weights_bytes_per_gpu"]
    assert by_change["FP8 KV cache"]["kv_bytes_total"] == pytest.approx(5 * GIB)


def test_a_plan_that_fits_lists_no_fixes(capsys):
    result = run_json(capsys, "--model", "mistral-7b", "--gpu", "h100", "--context", "4096", "--concurrency", "20")
    assert result["fits"] and result["fixes"] == []


def test_seed_gpu_count_example_through_the_cli(capsys):
    # Seed 7.4: peak 10 QPS, 5 s a request, 20 concurrent per GPU: ceil(2.5) = 3 GPUs; +30% redundancy: 4.
    args = ["plan", "--model", "mistral-7b", "--gpu", "l4", "--quant", "awq", "--context", "4096",
            "--concurrency", "20", "--rate", "10", "--occupancy-s", "5"]
    assert main([*args, "--redundancy", "0.3"]) == 0
    out = capsys.readouterr().out
    assert "ceil(10 x 5 / 20) = ceil(2.5) = 3" in out and "ceil(3 x 1.3) = 4 replicas (1 spare) = 4 GPUs" in out
    assert run_json(capsys, *args[1:])["capacity"]["gpus"] == 3
    assert run_json(capsys, *args[1:], "--redundancy", "0.3")["capacity"]["gpus"] == 4


def test_plan_capacity_from_the_engine_model_matches_the_estimate(capsys):
    from servopt.costmodels.architectures import get_model
    from servopt.costmodels.deployment import Deployment
    from servopt.costmodels.hardware import get_gpu
    from servopt.calibration.registry import load_profile
    from servopt.costmodels.serving import Traffic, compile_deployment, estimate_compiled

    result = run_json(capsys, "--model", "mistral-7b", "--gpu", "rtx4090", "--context", "1280", "--output-tokens", "256",
                      "--rate", "10", "--redundancy", "0.3")
    c = result["capacity"]
    gpu = get_gpu("rtx4090")
    # The profile plan reads: the RTX 4090's, transferred from its architecture's fitted GPU.
    compiled = compile_deployment(get_model("mistral-7b"), Deployment(gpu="rtx4090", max_model_len=1280), gpu,
                                  load_profile(gpu))
    overload = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 100},
                                       "input_tokens": {"kind": "fixed", "value": 1024},
                                       "output_tokens": {"kind": "fixed", "value": 256}})
    saturated = estimate_compiled(compiled, overload).summary
    assert saturated.saturated and c["requests_per_s_per_replica"] == pytest.approx(saturated.requests_per_s, rel=0.01)
    assert c["serving_replicas"] == -(-10 // c["requests_per_s_per_replica"])
    assert c["replicas"] == -(-c["serving_replicas"] * 13 // 10) and c["gpus"] == c["replicas"]


def test_plan_rate_needs_output_tokens_or_a_measured_occupancy(capsys):
    assert main(["plan", "--model", "mistral-7b", "--gpu", "h100", "--rate", "10"]) == 2
    err = capsys.readouterr().err
    assert "--output-tokens" in err and "--occupancy-s" in err and len(err.strip().splitlines()) == 1


def test_mla_kv_per_token_says_per_instance_and_per_gpu(capsys):
    # DeepSeek-V3's 68.6 KiB latent is stored whole on each of the 8 TP ranks: 549 KiB per instance.
    assert main(["plan", "--model", "deepseek-v3", "--gpu", "h200", "--tp", "8"]) == 0
    line = next(line for line in capsys.readouterr().out.splitlines() if "KV per token" in line)
    assert "549.0 KiB per instance" in line and "68.6 KiB on each of its 8 GPUs" in line and "MLA latent" in line
