import optuna
import pytest

from servopt.costmodels.errors import InputError
from servopt.search_spaces import Choices, IntRange, SearchSpace, example_context


@pytest.fixture(scope="module")
def ctx():
    return example_context()


def base_values(**over):
    values = {"gpu": "h100", "mode": "aggregated", "tp": 1, "quantization": "bf16", "kv_cache_dtype": "auto",
              "max_num_seqs": 64, "max_num_batched_tokens": 4096, "enable_chunked_prefill": True,
              "speculation": "off", "headroom": 0.0}
    values.update(over)
    return values


def test_pin_and_narrow(ctx):
    space = SearchSpace(ctx, {"tp": [1, 2], "quantization": ["bf16", "fp8"], "max_num_seqs": {"low": 16, "high": 512},
                              "kv_cache_dtype": "fp8"})
    assert space.domain("tp") == Choices((1, 2))
    assert space.domain("quantization").values() == ["bf16", "fp8"]
    assert space.domain("max_num_seqs") == IntRange(16, 512, log=True)
    assert space.domain("kv_cache_dtype").pinned == "fp8"


@pytest.mark.parametrize("settings, key", [
    ({"tensor_parallel": [1]}, "space.tensor_parallel"),
    ({"tp": [3]}, "space.tp"),
    ({"tp": "two"}, "space.tp"),
    ({"tp": []}, "space.tp"),
    ({"quantization": ["fp4"]}, "space.quantization"),
    ({"max_num_seqs": {"low": 0, "high": 10}}, "space.max_num_seqs"),
    ({"max_num_seqs": {"low": 64, "high": 16}}, "space.max_num_seqs"),
    ({"max_num_seqs": {"lo": 64}}, "space.max_num_seqs.lo"),
    ({"enable_chunked_prefill": 1}, "space.enable_chunked_prefill"),
    ({"gpu": "b200"}, "space.gpu"),
    ({"headroom": -1}, "space.headroom"),
    ({"quantization": {"low": 1}}, "space.quantization"),
])
def test_bad_settings_name_the_key(ctx, settings, key):
    with pytest.raises(InputError, match=key.replace(".", r"\.")):
        SearchSpace(ctx, settings)


def test_conditional_knobs_are_not_suggested(ctx):
    space = SearchSpace(ctx, {"speculation": ["off", "ngram"]})
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=optuna.samplers.RandomSampler(seed=3))
    seen_disaggregated = seen_off = False
    for _ in range(60):
        trial = study.ask()
        c = space.sample(trial)
        if c["mode"] == "aggregated":
            assert "tp" in trial.params and "prefill_tp" not in trial.params and "decode_tp" not in trial.params
        else:
            seen_disaggregated = True
            assert "tp" not in trial.params and {"prefill_tp", "decode_tp", "prefill_instances"} <= set(trial.params)
        if c["speculation"] == "off":
            seen_off = True
            assert "num_speculative_tokens" not in trial.params
        else:
            assert 1 <= c["num_speculative_tokens"] <= 6
        study.tell(trial, [0.0, 0.0])
    assert seen_disaggregated and seen_off


def test_pinned_knobs_are_not_suggested_but_in_the_candidate(ctx):
    space = SearchSpace(ctx, {"gpu": "h100", "quantization": "fp8"})
    study = optuna.create_study(directions=["minimize", "minimize"])
    trial = study.ask()
    c = space.sample(trial)
    assert c["gpu"] == "h100" and c["quantization"] == "fp8"
    assert "gpu" not in trial.params and "quantization" not in trial.params


def reasons(space, **over):
    return {v.constraint: v.reason for v in space.violations(space.fixed(base_values(**over)), replicas=1)}


def test_constraints(ctx):
    space = SearchSpace(ctx)
    assert reasons(space) == {}
    assert "batch_limits" in reasons(space, max_num_seqs=512, max_num_batched_tokens=256)
    assert "batch_limits" in reasons(space, speculation="ngram", num_speculative_tokens=4, max_num_seqs=1024,
                                     max_num_batched_tokens=4096)
    assert "batch_limits" in reasons(space, enable_chunked_prefill=False, max_num_batched_tokens=2048)
    assert "accuracy" in reasons(space, quantization="gptq")
    assert "fits_node" in reasons(space, tp=16)
    assert "tp_divides_heads" in reasons(space, tp=3)
    assert "max_gpus" in {v.constraint for v in space.violations(space.fixed(base_values(tp=8)), replicas=9)}


def test_memory_and_quantization_support():
    small = example_context("llama-3.1-70b", gpus=("l4", "h100"))
    space = SearchSpace(small)
    assert "memory" in reasons(space, gpu="l4", tp=1)
    assert "memory" not in reasons(space, gpu="h100", tp=4)


def test_pre_quantized_checkpoint_fixes_the_scheme():
    from dataclasses import replace

    from servopt.costmodels.architectures import resolve_model
    from servopt.search_spaces import ModelChoice, weight_options

    base = example_context()
    awq_id = "hugging-quants/Meta-Llama-3.1-8B-Instruct-AWQ-INT4"
    resolved = resolve_model(awq_id)
    choice = ModelChoice(awq_id, resolved.spec, awq_id, weight_options(resolved.spec, awq_id, resolved.quantization))
    only_awq = replace(base, models={awq_id: choice}, max_model_len={awq_id: 4096})
    assert SearchSpace(only_awq).domain("quantization").pinned == "awq"
    both = replace(base, models={**base.models, awq_id: replace(choice, accuracy_drop_pct=1.0)},
                   max_model_len={**base.max_model_len, awq_id: 4096})
    space = SearchSpace(both)
    assert "quantization_on_gpu" in reasons(space, model=awq_id, quantization="fp8")
    assert "quantization_on_gpu" not in reasons(space, model=awq_id, quantization="awq")


def test_quantization_is_offered_only_where_it_can_be_served():
    """fp8 on the fly, int8 through a checkpoint; awq/gptq need one and are not offered without."""
    space = SearchSpace(example_context())
    assert space.domain("quantization").values() == ["bf16", "fp8", "int8"]
    with pytest.raises(InputError, match="outside what servopt searches"):
        SearchSpace(example_context(), {"quantization": "awq"})


def test_pipeline_parallel_only_for_models_beyond_a_node():
    assert SearchSpace(example_context()).domain("pp").values() == [1]
    big = SearchSpace(example_context("llama-3.1-405b", gpus=("h100",)))
    assert big.domain("pp").values() == [1, 2, 4]
    assert "fits_node" in reasons(big, tp=4, pp=2)


def test_deployment_of_a_disaggregated_candidate(ctx):
    space = SearchSpace(ctx)
    c = space.fixed(base_values(mode="disaggregated", prefill_instances=1, decode_instances=3, prefill_tp=2,
                                decode_tp=1, speculation="ngram", num_speculative_tokens=3))
    d = space.deployment(c, replicas=2)
    assert d.disaggregation.prefill_tp == 2 and d.disaggregation.decode_instances == 3
    assert d.speculative.method == "ngram" and d.speculative.num_speculative_tokens == 3
    assert d.num_gpus == 2 * (2 + 3)


def test_enumerate_respects_conditions(ctx):
    space = SearchSpace(ctx, {"gpu": ["h100", "a100-80gb"], "mode": "aggregated", "tp": [1, 2], "quantization": "fp8",
                              "kv_cache_dtype": ["auto", "fp8"], "max_num_seqs": [64, 256],
                              "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
                              "speculation": ["off", "ngram"], "num_speculative_tokens": [2, 4], "headroom": [0.0, 0.5]})
    points = list(space.enumerate())
    # 2 gpus x 2 tp x 2 kv x 2 seqs x (off + ngram x 2 g) x 2 headroom
    assert len(points) == 2 * 2 * 2 * 2 * 3 * 2
    assert all(("num_speculative_tokens" in p.values) == (p["speculation"] != "off") for p in points)
    with pytest.raises(InputError, match="too large to enumerate"):
        list(SearchSpace(ctx).enumerate())


def test_memory_check_counts_what_each_drafter_holds():
    from dataclasses import replace

    from servopt.search_spaces._context import SpeculationChoice, example_context

    ctx = example_context()
    ctx = replace(ctx, speculation={**ctx.speculation, "eagle3": SpeculationChoice("eagle3", "eagle3", "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")})

    space = SearchSpace(ctx)

    def pool(speculation: str) -> float:
        extra = {"num_speculative_tokens": 2} if speculation != "off" else {}
        return space.compile(space.fixed(base_values(speculation=speculation, max_num_seqs=256, **extra))).kv_pool_gib()

    assert pool("ngram") == pool("off")  # n-gram lookup runs on the CPU
    assert pool("eagle3") < pool("off")  # the head's weights and KV share the pool


def test_complete_draws_the_missing_knobs_of_the_chosen_branch_within_their_domains():
    import numpy as np

    space = SearchSpace(example_context(), {"gpu": "h100"})
    rng = np.random.default_rng(0)
    for mode in ("aggregated", "disaggregated"):
        for _ in range(20):
            values = space.complete({"mode": mode}, rng)
            candidate = space.fixed(values)  # raises when an active knob is missing
            assert candidate.values["mode"] == mode and candidate.values["gpu"] == "h100"
            for name, value in candidate.values.items():
                assert space._domains[name].contains(value), (name, value)
    log_range = IntRange(1, 1024, log=True)
    assert {log_range.draw(rng) for _ in range(200)} <= set(range(1, 1025))
