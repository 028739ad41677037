"""Speculative decoding: acceptance statistics, drafter costs and memory."""

import numpy as np
import pytest
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, run, traffic

from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import SpeculativeConfig
from servopt.costmodels.errors import InputError
from servopt.costmodels.memory import plan_memory
from servopt.costmodels.speculation import (METHODS, build_speculation, expected_tokens_per_verify,
                                            sample_tokens_per_verify)


@pytest.mark.parametrize("a,g", [(0.5, 1), (0.8, 4), (0.9, 7)])
def test_sampled_tokens_per_verify_match_the_truncated_geometric_mean(a, g):
    draws = sample_tokens_per_verify(np.random.default_rng(0), a, g, 400_000)
    assert draws.min() == 1 and draws.max() == g + 1
    assert draws.mean() == pytest.approx(expected_tokens_per_verify(a, g), rel=5e-3)
    assert expected_tokens_per_verify(a, g) == pytest.approx(sum(a**j for j in range(g + 1)))


def test_every_method_has_a_sourced_default():
    for method in METHODS.values():
        assert 0 < method.default_acceptance < 1 and method.source


HEADS = {"ngram": None, "eagle": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "eagle3": "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"}


def test_drafters_cost_memory_and_time():
    spec = {m: build_speculation(SpeculativeConfig(method=m, num_speculative_tokens=3, draft_model=head), LLAMA_8B,
                                 GPU, PROFILE, "bf16", "auto", 1, 1) for m, head in HEADS.items()}
    assert spec["ngram"].head.cost is None and spec["ngram"].head.weights_bytes_per_gpu == 0
    assert spec["eagle3"].head.weights_bytes_per_gpu > spec["eagle"].head.weights_bytes_per_gpu > 0
    draft = build_speculation(SpeculativeConfig(method="draft_model", num_speculative_tokens=3,
                                                draft_model="llama-3.1-8b"), get_model("llama-3.1-70b"),
                              GPU, PROFILE, "bf16", "auto", 4, 1)
    assert draft.head.weights_bytes_per_gpu > 3e9  # 8B in bf16 over 4 GPUs
    base = plan_memory(LLAMA_8B, GPU)
    with_head = plan_memory(LLAMA_8B, GPU, extra_weights_bytes_per_gpu=spec["eagle"].head.weights_bytes_per_gpu,
                            extra_kv_bytes_per_token_per_gpu=spec["eagle"].head.kv_bytes_per_token_per_gpu)
    assert with_head.kv_capacity_tokens < base.kv_capacity_tokens


def test_speculation_only_where_it_exists():
    def build(method, target, head=None, g=3):
        return build_speculation(SpeculativeConfig(method=method, num_speculative_tokens=g, draft_model=head), target,
                                 GPU, PROFILE, "fp8", "auto", 8, 1)

    with pytest.raises(InputError, match="num_nextn_predict_layers"):
        build("mtp", LLAMA_8B)
    deepseek = get_model("deepseek-v3")
    assert deepseek.num_mtp_layers == 1 and build("mtp", deepseek).head.weights_bytes_per_gpu > 0
    with pytest.raises(InputError, match="EAGLE3-LLaMA3.1-Instruct-8B"):  # no head named: the known ones are listed
        build("eagle3", LLAMA_8B)
    with pytest.raises(InputError, match="not a published eagle head"):  # a head of the wrong method
        build("eagle", LLAMA_8B, HEADS["eagle3"])
    with pytest.raises(InputError, match="none is published"):
        build("eagle", deepseek, "yuhuili/EAGLE-LLaMA3.1-Instruct-8B")
    gpt_oss = get_model("gpt-oss-120b")
    assert build("eagle3", gpt_oss, "nvidia/gpt-oss-120b-Eagle3-throughput", g=1).num_speculative_tokens == 1
    with pytest.raises(InputError, match="at most 1"):
        build("eagle3", gpt_oss, "nvidia/gpt-oss-120b-Eagle3-throughput", g=2)


def test_draft_model_must_share_the_vocabulary():
    with pytest.raises(InputError, match="vocabulary"):
        build_speculation(SpeculativeConfig(method="draft_model", num_speculative_tokens=3, draft_model="qwen3-8b"),
                          LLAMA_8B, GPU, PROFILE, "bf16", "auto", 1, 1)


def test_speculation_helps_at_batch_one_and_hurts_at_large_batch():
    eagle = {"method": "eagle", "num_speculative_tokens": 4, "acceptance_rate": 0.6, "draft_model": HEADS["eagle"]}
    single = traffic({"kind": "closed_loop", "concurrency": 1}, 512, 256)
    plain = run(deployment(), single, n=30).summary
    spec = run(deployment(speculative=eagle), single, n=30).summary
    assert spec.tpot_s.mean < 0.7 * plain.tpot_s.mean
    # Short contexts at a large batch: the verify pass is compute-bound and 1 + g tokens per
    # sequence cost more than the ~2.2 tokens they return.
    crowd = traffic({"kind": "closed_loop", "concurrency": 512}, 128, 256)
    plain = run(deployment(max_num_seqs=512), crowd, n=1600).summary
    spec = run(deployment(max_num_seqs=512, speculative=eagle), crowd, n=1600).summary
    assert spec.output_tokens_per_s < plain.output_tokens_per_s
    assert spec.tpot_s.mean > plain.tpot_s.mean
