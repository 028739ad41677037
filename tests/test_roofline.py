import numpy as np
import pytest

from servopt.costmodels.architectures import get_model
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.roofline import Batch, StepCostModel, aggregates_from_arrays, causal_pairs
from servopt.costmodels.engines.vllm import MAX_CUDAGRAPH_TOKENS


def cost_model(model="llama-3.1-8b", gpu="h100", **kwargs) -> StepCostModel:
    spec = get_gpu(gpu)
    return StepCostModel(get_model(model), spec, PerformanceProfile.spec_default(spec), **kwargs)


@pytest.mark.parametrize("model", ["llama-2-7b", "mistral-7b"])
def test_seed_decode_floor_of_a_7b_bf16_model_on_h100(model):
    # Seed section 2.2: ~14 GB of weights over 3.35 TB/s is about 4.2 ms per token.
    assert cost_model(model).weight_read_floor_s(context_tokens=1) == pytest.approx(4.2e-3, rel=0.05)


def test_decode_is_memory_bound_and_prefill_compute_bound():
    cost = cost_model()
    decode = cost.step(Batch(decode_context=[1024]))
    prefill = cost.step(Batch(prefill_tokens=[4096]))
    assert decode.bound == "memory" and prefill.bound == "compute"
    # Seed section 2.3: batch B reuses each weight byte B times, so intensity grows about linearly with B.
    assert decode.arithmetic_intensity == pytest.approx(1.0, rel=0.15)
    batch32 = cost.step(Batch(decode_context=[16] * 32))
    assert batch32.arithmetic_intensity == pytest.approx(32, rel=0.2)
    assert prefill.arithmetic_intensity > get_gpu("h100").balance_point_flops_per_byte()


def test_step_time_grows_with_batch_and_context_and_stays_above_the_floor():
    cost = cost_model()
    floor = cost.weight_read_floor_s(1024, 1)
    times = [cost.decode_step_time_s(b, 1024) for b in (1, 8, 64, 256)]
    assert floor < times[0] and all(a < b for a, b in zip(times, times[1:]))
    assert cost.decode_step_time_s(32, 512) < cost.decode_step_time_s(32, 8192)
    # A 4k prefill takes far longer than one decode step but far less per token.
    prefill = cost.prefill_time_s(4096)
    assert prefill > times[0] and prefill / 4096 < times[0]


def test_breakdown_sums_to_the_step_time_and_names_operators():
    step = cost_model().step(Batch(prefill_tokens=[512], prefill_offsets=[1024], decode_context=[2000] * 8))
    assert sum(step.operators_s.values()) == pytest.approx(step.time_s)
    for name in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "attention_decode", "attention_prefill", "lm_head"):
        assert step.operators_s[name] > 0


def test_vectorized_path_matches_single_steps():
    cost = cost_model()
    batches = [Batch(decode_context=[c] * n) for n, c in [(1, 100), (16, 3000), (200, 900)]]
    batches.append(Batch(prefill_tokens=[700, 300], prefill_offsets=[0, 2048], decode_context=[500] * 5))
    aggs = [cost.aggregate(b) for b in batches]
    stacked = aggregates_from_arrays(**{k: np.concatenate([getattr(a, k) for a in aggs]) for k in aggs[0].__dataclass_fields__})
    fast = cost.step_time_s(stacked)
    assert fast == pytest.approx([cost.step(b).time_s for b in batches])
    _, bound = cost.step_time_s(stacked, return_compute_bound=True)
    assert bound.tolist() == [cost.step(b).bound == "compute" for b in batches]


def test_causal_pairs():
    assert causal_pairs(4, 0) == 10  # 1 + 2 + 3 + 4
    assert causal_pairs(2, 5) == 2 * 5 + 3
    assert causal_pairs(8, 100, window=4) == 32


def test_tensor_parallelism_speeds_up_but_adds_all_reduces():
    one, two = cost_model(tp=1), cost_model(tp=2)
    t1, t2 = one.decode_step_time_s(32, 2048), two.decode_step_time_s(32, 2048)
    assert t2 < t1 < 2 * t2
    assert two.step(Batch(decode_context=[2048] * 32)).operators_s["tp_pp_communication"] > 0


def test_quantization_cuts_decode_time_and_fp8_raises_prefill_peak_on_hopper():
    bf16, fp8, awq = cost_model(), cost_model(quantization="fp8"), cost_model(quantization="awq")
    assert awq.decode_step_time_s(1, 512) < fp8.decode_step_time_s(1, 512) < bf16.decode_step_time_s(1, 512)
    assert fp8.prefill_time_s(8192) < bf16.prefill_time_s(8192)
    # On Ampere fp8 is weight-only: decode gains, prefill does not.
    a_bf16, a_fp8 = cost_model(gpu="a100-80gb"), cost_model(gpu="a100-80gb", quantization="fp8")
    assert a_fp8.decode_step_time_s(1, 512) < a_bf16.decode_step_time_s(1, 512)
    assert a_fp8.prefill_time_s(8192) >= a_bf16.prefill_time_s(8192)


def test_moe_reads_only_the_experts_a_batch_touches():
    mixtral = cost_model("mixtral-8x7b", tp=2)
    one = mixtral.step(Batch(decode_context=[256]))
    many = mixtral.step(Batch(decode_context=[256] * 64))
    # One token touches 2 of 8 experts; 64 tokens touch nearly all of them.
    assert many.operators_s["moe_experts"] > 2.5 * one.operators_s["moe_experts"]
    dense_equivalent = 46.7e9 * 2 / 2 / get_gpu("h100").memory_bandwidth_bytes_per_s
    assert one.time_s < dense_equivalent


def test_mla_and_sliding_window_models_step():
    deepseek = cost_model("deepseek-v2-lite")
    assert deepseek.decode_step_time_s(16, 4096) > 0
    gemma = cost_model("gemma-2-9b")
    # Half of Gemma 2's layers only read the last 4096 tokens.
    short, long = gemma.decode_step_time_s(8, 4096), gemma.decode_step_time_s(8, 8192)
    full_growth = cost_model("llama-3.1-8b").decode_step_time_s(8, 8192) / cost_model("llama-3.1-8b").decode_step_time_s(8, 4096)
    assert 1 < long / short < full_growth


def test_pipeline_parallel_adds_sends_across_nodes():
    intra = cost_model("llama-3.1-70b", tp=4, pp=2)
    inter = cost_model("llama-3.1-70b", tp=8, pp=2, internode_bytes_per_s=5e9)
    assert intra.step(Batch(prefill_tokens=[2048])).operators_s["tp_pp_communication"] > 0
    assert inter.prefill_time_s(2048) > cost_model("llama-3.1-70b", tp=8).prefill_time_s(2048)


@pytest.mark.parametrize("model", ["llama-3.1-70b", "qwen3-30b-a3b"])
def test_a_step_model_for_another_cuda_graph_size_shares_tables_and_times_steps_as_a_fresh_one(model):
    from servopt.calibration.registry import shipped_profile

    h100 = get_gpu("h100")
    profile = shipped_profile("h100")  # measured custom all-reduce curves, captured and eager
    base = StepCostModel(get_model(model), h100, profile, tp=4, graph_max_tokens=512)
    base.token_ops_time_s(20_000)  # grown before the copy is made
    copy = base.with_graph_max_tokens(64)
    fresh = StepCostModel(get_model(model), h100, profile, tp=4, graph_max_tokens=64)
    tokens = np.array([1, 64, 65, 512, 513, 8192, 20_000, 40_000])
    assert np.array_equal(copy.token_ops_time_s(tokens), fresh.token_ops_time_s(tokens))
    # Only the all-reduce of steps between the two capture sizes differs from the base.
    assert copy.token_ops_time_s(100) != base.token_ops_time_s(100)
    assert np.array_equal(copy.token_ops_time_s(tokens[tokens > 512]), base.token_ops_time_s(tokens[tokens > 512]))
    assert copy._shared is base._shared and base.with_graph_max_tokens(512) is base
    assert cost_model(model, tp=1).with_graph_max_tokens(64).graph_max_tokens == MAX_CUDAGRAPH_TOKENS  # no all-reduce


def test_token_tables_grown_step_by_step_equal_tables_built_at_once():
    grown = cost_model("llama-3.1-70b", tp=2)
    for top in (9000, 17_000, 40_000):
        grown.token_ops_time_s(top)
    at_once = cost_model("llama-3.1-70b", tp=2)
    at_once._grow_table(len(grown._table_s) - 1)
    assert np.array_equal(grown._table_s, at_once._table_s)
    assert np.array_equal(grown._table_compute_s, at_once._table_compute_s)
