import pandas as pd
import pytest

from servopt.costmodels.architectures import ModelSpec, get_model, resolve_model
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import GIB, get_gpu
from servopt.costmodels.memory import kv_bytes_per_token, plan_memory, weight_bytes

KIB, MIB = 1024, 1024**2


def synthetic(layers: int, kv_heads: int, heads: int = 64, head_dim: int = 128) -> ModelSpec:
    return ModelSpec(name="synthetic", family="llama", num_layers=layers, hidden_size=heads * head_dim,
                     num_attention_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, intermediate_size=28672,
                     vocab_size=32000, attention_kind="gqa" if kv_heads < heads else "mha", max_context=32768)


# Seed section 3.2's table.
@pytest.mark.parametrize("layers,kv_heads,per_token,at_4k,at_32k", [
    (32, 8, 128 * KIB, 0.5 * GIB, 4 * GIB),
    (80, 8, 320 * KIB, 1.25 * GIB, 10 * GIB),
    (80, 64, 2.5 * MIB, 10 * GIB, 80 * GIB),
])
def test_seed_kv_table(layers, kv_heads, per_token, at_4k, at_32k):
    bytes_per_token = kv_bytes_per_token(synthetic(layers, kv_heads))
    assert bytes_per_token == per_token
    assert bytes_per_token * 4096 == at_4k
    assert bytes_per_token * 32768 == at_32k


def test_mla_caches_576_values_per_layer_per_token():
    for name in ("deepseek-v2-lite", "deepseek-v3"):
        model = get_model(name)
        assert model.kv_values_per_token_per_layer == 576
        assert kv_bytes_per_token(model) == model.num_layers * 576 * 2
    assert kv_bytes_per_token(get_model("deepseek-v3"), "fp8") == 61 * 576


def test_kv_heads_replicate_when_tp_exceeds_them():
    model = get_model("llama-3.1-70b")  # 8 KV heads
    assert kv_bytes_per_token(model, tp=8) == kv_bytes_per_token(model, tp=1)
    # At TP 16 every rank still holds one KV head: twice the bytes in total.
    assert kv_bytes_per_token(model, tp=16) == 2 * kv_bytes_per_token(model, tp=1)
    assert weight_bytes(model, "bf16", tp=16).total_bytes > weight_bytes(model, "bf16", tp=8).total_bytes


def test_weights_by_quantization_and_parallelism():
    model = get_model("llama-3.1-8b")
    bf16 = weight_bytes(model, "bf16")
    # Parameters in bf16 plus the RoPE cos/sin table vLLM precomputes (131072 positions x 128 dims).
    assert bf16.total_bytes == pytest.approx(model.num_params * 2 + 131072 * 128 * 2)
    fp8, awq = weight_bytes(model, "fp8"), weight_bytes(model, "awq")
    # Embeddings and LM head (2 x 525M params) stay in bf16.
    assert fp8.total_bytes == pytest.approx(bf16.total_bytes - fp8.quantized_params, rel=1e-9)
    assert awq.total_bytes < fp8.total_bytes < bf16.total_bytes
    assert weight_bytes(model, "bf16", tp=2).per_gpu_bytes == pytest.approx(bf16.per_gpu_bytes / 2, rel=0.01)
    pp2 = weight_bytes(model, "bf16", pp=2)
    assert bf16.per_gpu_bytes / 2 < pp2.per_gpu_bytes < bf16.per_gpu_bytes * 0.56


def test_seed_capacity_example_mistral_7b_on_24gb():
    """Seed section 7.2: 7B GQA, 4K context, 20 requests, 24 GB GPU at utilization 0.95."""
    model, gpu = get_model("mistral-7b"), get_gpu("l4")

    def fits(quant: str, kv: str) -> bool:
        plan = plan_memory(model, gpu, quantization=quant, kv_cache_dtype=kv, gpu_memory_utilization=0.95,
                           max_model_len=4096, max_num_batched_tokens=2048, max_num_seqs=256)
        return plan.fits and plan.max_concurrency(4096) >= 20

    assert not fits("bf16", "auto")
    assert fits("awq", "auto")
    assert fits("bf16", "fp8")
    assert fits("gptq", "fp8")


def test_fp8_kv_doubles_capacity_tokens():
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    auto = plan_memory(model, gpu, max_model_len=8192)
    fp8 = plan_memory(model, gpu, kv_cache_dtype="fp8", max_model_len=8192)
    assert fp8.kv_capacity_tokens == pytest.approx(2 * auto.kv_capacity_tokens, rel=0.001)


def test_blocks_and_tokens_are_consistent():
    plan = plan_memory(get_model("llama-3.1-8b"), get_gpu("h100"), max_model_len=8192)
    assert plan.kv_capacity_tokens == plan.kv_cache_blocks * 16
    assert plan.max_concurrency(4096) == pytest.approx(plan.kv_cache_blocks / 256)
    assert plan.max_concurrency(4097) == pytest.approx(plan.kv_cache_blocks / 257)


def test_sliding_window_layers_free_blocks_outside_the_window():
    plan = plan_memory(get_model("gemma-2-9b"), get_gpu("h100"), max_model_len=8192)
    # One full-attention group and one sliding (4096) group.
    assert plan.layout.groups == 2
    assert plan.blocks_needed(8192) < 2 * 512
    assert plan.blocks_needed(1024) == 2 * 64


def test_does_not_fit_reports_why():
    plan = plan_memory(get_model("llama-3.1-70b"), get_gpu("l4"))
    assert not plan.fits
    assert "exceed" in plan.problems[0]
    with pytest.raises(InputError, match="does not divide"):
        plan_memory(get_model("llama-3.1-8b"), get_gpu("h100"), tp=3)
    with pytest.raises(InputError, match="gpu_memory_utilization"):
        plan_memory(get_model("llama-3.1-8b"), get_gpu("h100"), gpu_memory_utilization=1.5)


def test_kv_capacity_matches_vllm_memory_profiles(data_dir):
    """vLLM 0.19 start-up logs on H100 (llm-d-planner): KV tokens within 3% on every row."""
    rows = pd.read_csv(data_dir / "vllm_memory_profiles_dev.csv")
    errors = []
    for row in rows.itertuples():
        plan = plan_memory(resolve_model(row.model).spec, get_gpu(row.gpu), tp=int(row.tp), pp=int(row.pp),
                           gpu_memory_utilization=row.gpu_memory_utilization, max_model_len=int(row.max_model_len),
                           max_num_batched_tokens=8192, max_num_seqs=1024)
        errors.append(abs(plan.kv_capacity_tokens / row.kv_cache_tokens - 1))
        assert plan.max_concurrency(int(row.max_model_len)) == pytest.approx(row.max_concurrency, rel=0.03)
    assert max(errors) < 0.03, errors
