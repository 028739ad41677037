"""Prompts a server has seen before (traffic.prompt_cache): warm caches and repeated finite prompt sets."""

import numpy as np
import pytest

from servopt.costmodels.serving.requests import draw_requests
from servopt.costmodels.serving.traffic import Traffic


def traffic(prompt_cache):
    return Traffic.model_validate({
        "arrival": {"kind": "poisson", "rate_per_s": 2},
        "input_tokens": {"kind": "uniform", "low": 100, "high": 3000},
        "output_tokens": {"kind": "fixed", "value": 16}, "prompt_cache": prompt_cache})


def draw(prompt_cache, prefix_caching=True):
    return draw_requests(traffic(prompt_cache), 12, np.random.default_rng(0), max_model_len=8192, block_size=16,
                         prefix_caching=prefix_caching)


def test_a_warm_cache_holds_every_full_block_of_every_prompt():
    drawn = draw({"kind": "warm"})
    assert np.array_equal(drawn.cached_tokens, (drawn.input_tokens - 1) // 16 * 16)


def test_a_repeated_prompt_set_misses_once_then_hits_and_keeps_its_lengths():
    drawn = draw({"kind": "repeated", "distinct_prompts": 5})
    assert np.array_equal(drawn.input_tokens[5:10], drawn.input_tokens[:5])
    assert not drawn.cached_tokens[:5].any() and drawn.cached_tokens[5:].all()
    seen = draw({"kind": "repeated", "distinct_prompts": 5, "seen_before": True})
    assert seen.cached_tokens.all()


def test_without_prefix_caching_nothing_is_cached():
    assert not draw({"kind": "warm"}, prefix_caching=False).cached_tokens.any()


@pytest.mark.parametrize("spec, message", [
    ({"kind": "repeated"}, "distinct_prompts: required"),
    ({"kind": "warm", "seen_before": True}, "takes no distinct_prompts"),
])
def test_a_prompt_cache_that_does_not_say_enough_is_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        traffic(spec)
