"""One step formula: the event loop's scalar call, the vectorized call, the decode line, the operator
breakdown and capacity sizing all read StepCostModel._parts, so they agree on every kind of step:
V0 multi-step scheduling, data-parallel padding, MoE, sliding windows, MLA and a drafter's passes."""

import numpy as np
import pytest

from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.roofline import Batch, StepCostModel, aggregates_from_arrays
from servopt.costmodels.serving.compiled import compile_deployment
from servopt.costmodels.serving.predictor import StepComposition

GPU = get_gpu("h100")
# Learned coefficients away from their defaults, so that every term of the formula is exercised.
PROFILE = PerformanceProfile.spec_default(GPU).model_copy(update={
    "compute_scale": 1.1, "memory_scale": 1.2, "communication_scale": 0.9, "step_gpu_s": 4e-4,
    "layer_gpu_s": 5e-6, "seq_gpu_s": 3e-6, "moe_layer_gpu_s": 2e-5})

CASES = {
    "dense v0 multi-step": dict(model="llama-3.1-8b", vllm_version="0.6.3", num_scheduler_steps=8),
    "dense v1 async tp2": dict(model="llama-3.1-8b", vllm_version="0.15.0", tp=2),
    "sliding window": dict(model="gemma-2-9b-it", tp=2),
    "moe dp2 ep": dict(model="qwen3-30b-a3b", dp=2, expert_parallel=True),
    "mla": dict(model="deepseek-v2-lite"),
}
FIELDS = ("num_tokens", "num_sampled", "decode_query_tokens", "num_decode_seqs", "decode_context",
          "decode_context_windowed", "prefill_pairs", "prefill_pairs_windowed", "prefill_kv_tokens",
          "prefill_kv_tokens_windowed", "prefill_chunks")


def _cost(case: dict) -> StepCostModel:
    case = dict(case)
    return StepCostModel(get_model(case.pop("model")), GPU, PROFILE, **case)


def _batches(seed: int = 3):
    rng = np.random.default_rng(seed)
    for _ in range(60):
        chunks = rng.integers(1, 3000, rng.integers(0, 3)).tolist()
        batch = Batch(chunks, rng.integers(0, 5000, len(chunks)).tolist(),
                      rng.integers(1, 20000, rng.integers(0, 50)).tolist(), int(rng.integers(0, 3)))
        if chunks or batch.decode_context:
            yield batch, int(rng.integers(0, 4096))


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_scalar_vectorized_and_breakdown_are_one_formula(case):
    cost = _cost(case)
    for batch, padded in _batches():
        agg = cost.aggregate(batch)
        scalar_args = [float(getattr(agg, f)[0]) for f in FIELDS]
        scalar_args = [int(v) if f in ("num_tokens", "num_sampled", "decode_query_tokens", "num_decode_seqs",
                                        "prefill_chunks") else v for f, v in zip(FIELDS, scalar_args)]
        vectorized = float(cost.step_time_s(agg)[0])
        assert cost.step_s(*scalar_args) == pytest.approx(vectorized, rel=1e-12)
        assert cost.step(batch).time_s == pytest.approx(vectorized, rel=1e-12)
        assert sum(cost.step(batch).operators_s.values()) == pytest.approx(vectorized, rel=1e-9)
        padded_vectorized = float(cost.step_time_s(agg, padded_tokens=np.asarray([padded]))[0])
        assert cost.step_s(*scalar_args, padded) == pytest.approx(padded_vectorized, rel=1e-12)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_decode_line_is_the_formula_within_its_regime(case):
    cost = _cost(case)
    for num_seqs in (1, 7, 64):
        for per_seq_context in (10.0, 900.0, 30000.0):
            context = num_seqs * per_seq_context
            windowed = num_seqs * min(per_seq_context, cost.window or per_seq_context)
            for padded in (0, 512):
                line = cost.decode_line(num_seqs, 1, context, windowed, padded)
                for grow in (0.0, 1.0, 50.0):
                    c = min(context + num_seqs * grow, line.context_limit)
                    cw = min(windowed + num_seqs * grow if cost.window is None or per_seq_context + grow < cost.window
                             else windowed, line.window_limit)
                    exact = cost.step_s(num_seqs, num_seqs, num_seqs, num_seqs, c, cw, 0.0, 0.0, 0.0, 0.0, 0, padded)
                    line_s = line.intercept_s + line.slope_s * c + line.slope_window_s * cw
                    # Async scheduling holds the CPU time shown at the line's start (decode_line's docstring).
                    assert line_s == pytest.approx(exact, rel=1e-9 if grow == 0 or not cost.async_scheduling else 0.05)


def test_multi_step_scheduling_is_read_by_every_caller():
    # Issue 27's case: the vectorized model ignored --num-scheduler-steps while the event loop's twin read it.
    one, eight = (StepCostModel(get_model("llama-3.1-8b"), GPU, PROFILE, vllm_version="0.6.3", num_scheduler_steps=n)
                  for n in (1, 8))
    agg = one.aggregate(Batch(decode_context=[1000] * 8))
    assert float(eight.step_time_s(agg)[0]) < float(one.step_time_s(agg)[0])
    assert float(eight.step_time_s(agg)[0]) == pytest.approx(eight.step_s(8, 8, 8, 8, 8000.0, 8000.0, 0, 0, 0, 0, 0))
    assert eight.decode_step_time_s(8, 1000) == pytest.approx(eight.step_s(8, 8, 8, 8, 8000.0, 8000.0, 0, 0, 0, 0, 0))
    # A step with a prefill chunk schedules and processes outputs itself: it pays the whole CPU time.
    mixed = one.aggregate(Batch(prefill_tokens=[256], decode_context=[1000] * 8))
    assert float(eight.step_time_s(mixed)[0]) == pytest.approx(float(one.step_time_s(mixed)[0]))


def test_drafter_passes_follow_the_same_formula():
    model = get_model("llama-3.1-8b")
    deployment = Deployment.model_validate({"gpu": "h100", "max_model_len": 8192, "speculative": {
        "method": "draft_model", "draft_model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}})
    predictor = compile_deployment(model, deployment, GPU, PROFILE).roles[0].predictor
    assert predictor.drafter is not None
    for num_seqs in (1, 16):
        context = num_seqs * 1500.0
        line = predictor.decode_line(num_seqs, context, context)
        composition = StepComposition(num_seqs, context, context, 0, 0, 0.0, 0.0, 0.0, 0.0)
        assert line.intercept_s + line.slope_s * context == pytest.approx(predictor.step_s(composition), rel=1e-9)
        # The drafter's g passes run inside the target's step: GPU time only, no engine CPU time of their own.
        drafter = predictor.drafter
        draft = sum(drafter.step_s(num_seqs, num_seqs, num_seqs, num_seqs, context + j * num_seqs,
                                   context + j * num_seqs, 0, 0, 0, 0, 0, host=False) for j in range(3))
        target = predictor.cost.step_s(4 * num_seqs, 4 * num_seqs, 4 * num_seqs, num_seqs, context, context,
                                       0, 0, 0, 0, 0)
        assert predictor.step_s(composition) == pytest.approx(target + draft, rel=1e-9)


def test_prefill_time_is_the_formula_over_its_chunks():
    cost = _cost(CASES["dense v1 async tp2"])
    chunks = [2048, 2048, 904]
    offsets = np.cumsum([0] + chunks[:-1]).astype(float)
    each = [float(cost.step_time_s(cost.aggregate(Batch([c], [int(o)])))[0]) for c, o in zip(chunks, offsets)]
    assert cost.prefill_time_s(5000, 2048) == pytest.approx(sum(each), rel=1e-12)
    arrays = aggregates_from_arrays(num_tokens=[8.0], num_sampled=[8.0], decode_query_tokens=[8.0],
                                    decode_context=[8000.0], prefill_pairs=[0.0], prefill_kv_tokens=[0.0],
                                    prefill_chunks=[0.0], num_decode_seqs=[8.0])
    assert cost.decode_step_time_s(8, 1000) == pytest.approx(float(cost.step_time_s(arrays)[0]), rel=1e-12)


def test_learned_costs_add_to_every_step():
    base = StepCostModel(get_model("qwen3-30b-a3b"), GPU, PerformanceProfile.spec_default(GPU), vllm_version="0.12.0")
    extra = {"step_gpu_s": 1e-3, "layer_gpu_s": 1e-5, "seq_gpu_s": 2e-6, "moe_layer_gpu_s": 3e-5}
    more = StepCostModel(base.model, GPU, PerformanceProfile.spec_default(GPU).model_copy(update=extra),
                         vllm_version="0.12.0")
    m = base.model
    added = 1e-3 + 1e-5 * m.num_layers + 3e-5 * m.num_moe_layers + 2e-6 * 16
    assert more.decode_step_time_s(16, 1000) - base.decode_step_time_s(16, 1000) == pytest.approx(added, rel=1e-9)
