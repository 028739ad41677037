"""One step formula: the event loop's scalar call, the vectorized call and the decode line agree."""

import numpy as np
import pytest
from serving_helpers import GPU, LLAMA_8B, PROFILE

from servopt.costmodels.architectures import get_model
from servopt.costmodels.roofline import Batch, StepCostModel
from servopt.costmodels.serving.predictor import StepComposition, StepTimePredictor


@pytest.mark.parametrize("model_name", ["llama-3.1-8b", "gemma-2-9b-it", "qwen3-30b-a3b"])
def test_scalar_call_matches_vectorized_formula(model_name):
    cost = StepCostModel(get_model(model_name), GPU, PROFILE, tp=2)
    fast = cost.step_s
    rng = np.random.default_rng(1)
    for _ in range(40):
        batch = Batch(prefill_tokens=rng.integers(1, 3000, rng.integers(0, 3)).tolist(),
                      decode_context=rng.integers(1, 20000, rng.integers(0, 50)).tolist(),
                      num_speculative_tokens=int(rng.integers(0, 3)))
        if not len(batch.prefill_tokens) and not len(batch.decode_context):
            continue
        batch = Batch(batch.prefill_tokens, rng.integers(0, 5000, len(batch.prefill_tokens)).tolist(),
                      batch.decode_context, batch.num_speculative_tokens)
        agg = cost.aggregate(batch)
        fields = [float(getattr(agg, f)[0]) for f in (
            "num_tokens", "num_sampled", "decode_query_tokens", "num_decode_seqs", "decode_context",
            "decode_context_windowed", "prefill_pairs", "prefill_pairs_windowed", "prefill_kv_tokens",
            "prefill_kv_tokens_windowed", "prefill_chunks")]
        fields = [int(f) if i in (0, 1, 2, 3, 10) else f for i, f in enumerate(fields)]
        assert fast(*fields) == pytest.approx(float(cost.step_time_s(agg)[0]), rel=1e-12)


def test_decode_line_is_exact_within_its_regime():
    predictor = StepTimePredictor(StepCostModel(LLAMA_8B, GPU, PROFILE))
    line = predictor.decode_line(32, 32 * 1000.0, 32 * 1000.0)
    for ctx in (32 * 1000.0, 32 * 1500.0, 32 * 4000.0):
        assert line.intercept_s + line.slope_s * ctx == pytest.approx(predictor.decode_s(32, ctx, ctx), rel=1e-12)
    direct = StepCostModel(LLAMA_8B, GPU, PROFILE).decode_step_time_s(32, 1500)
    assert predictor.decode_s(32, 32 * 1500.0, 32 * 1500.0) == pytest.approx(direct, rel=1e-12)


def test_mixed_step_costs_more_than_its_decodes():
    predictor = StepTimePredictor(StepCostModel(LLAMA_8B, GPU, PROFILE))
    decode = predictor.decode_s(16, 16 * 2000.0, 16 * 2000.0)
    mixed = predictor.step_s(StepComposition(16, 16 * 2000.0, 16 * 2000.0, 2048, 1, 2048 * 2049 / 2,
                                             2048 * 2049 / 2, 2048.0, 2048.0))
    assert mixed > 2 * decode
