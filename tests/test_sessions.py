"""Multi-turn sessions (history, think time, a prefix cache of conversations) and the length presets
of public request sets."""

import json
from pathlib import Path

import numpy as np
import pytest

from servopt.costmodels.errors import InputError, validate_spec
from servopt.costmodels.serving import estimate
from servopt.costmodels.serving.datasets import catalog, dataset
from servopt.costmodels.serving.prefix_cache import PrefixCache
from servopt.costmodels.serving.requests import draw_requests
from servopt.costmodels.serving.scheduler import BlockCounter
from servopt.costmodels.serving.traffic import Traffic
from servopt.optimizer._traffic import traffic_stats

from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, run

SHARED_RUNS = Path(__file__).resolve().parents[2] / "shared" / "data" / "measured" / "e2e" / "vllm_bench_runs"
SHAREGPT = {"kind": "dataset", "name": "sharegpt"}


def sessions(rate: float = 3.0, turns: dict | None = None, think_s: float = 20.0, **extra) -> Traffic:
    return Traffic.model_validate({
        "arrival": {"kind": "sessions", "rate_per_s": rate, "turns": turns or {"kind": "uniform", "low": 1, "high": 8},
                    "think_time": {"kind": "exponential", "mean_s": think_s}},
        "input_tokens": SHAREGPT, "output_tokens": SHAREGPT, **extra})


def test_a_turns_prompt_is_the_conversation_so_far_plus_its_new_message():
    t = Traffic.model_validate({"arrival": {"kind": "sessions", "rate_per_s": 1, "turns": {"kind": "fixed", "value": 4},
                                            "think_time": {"kind": "fixed", "value_s": 5}},
                                "input_tokens": {"kind": "fixed", "value": 100},
                                "output_tokens": {"kind": "fixed", "value": 50}})
    drawn = draw_requests(t, 8, np.random.default_rng(0), max_model_len=4096, block_size=16, prefix_caching=True)
    assert drawn.input_tokens.tolist() == [100, 250, 400, 550] * 2
    assert drawn.session.tolist() == [0] * 4 + [1] * 4 and drawn.follow_up.tolist() == [1, 2, 3, -1, 5, 6, 7, -1]
    assert np.isnan(drawn.arrival_s[[1, 2, 3]]).all() and drawn.think_s[1:4].tolist() == [5.0] * 3
    short = draw_requests(t, 8, np.random.default_rng(0), max_model_len=400, block_size=16, prefix_caching=True)
    # A conversation ends where its next turn would not fit the context: two turns each (100+50, 250+50).
    assert short.input_tokens.tolist() == [100, 250] * 4 and (short.follow_up[1::2] == -1).all()


@pytest.mark.parametrize("arrival,message", [
    ({"turns": {"kind": "lognormal", "mean": 3, "sigma": 1}}, "declare at most 1000 turns"),
    ({"turns": {"kind": "fixed", "value": 5000}}, "declare at most 1000 turns"),
    ({"turns": SHAREGPT}, "turns.kind: 'dataset' is not one of 'fixed', 'uniform', 'lognormal', 'histogram'"),
    ({"think_time": {"kind": "exponential", "mean": 3}}, "think_time.exponential.mean: unknown key"),
    ({"think_time": {"kind": "fixed", "value_s": -1}}, "value_s: Input should be greater than or equal to 0"),
])
def test_bad_sessions_get_one_line_naming_the_field(arrival, message):
    spec = {"kind": "sessions", "rate_per_s": 1, "turns": {"kind": "fixed", "value": 3},
            "think_time": {"kind": "fixed", "value_s": 1}, **arrival}
    with pytest.raises(InputError, match=message):
        validate_spec(Traffic, {"arrival": spec, "input_tokens": SHAREGPT, "output_tokens": SHAREGPT}, "w.yaml")
    with pytest.raises(ValueError, match="shared_prefix_fraction: with sessions"):
        sessions(shared_prefix_fraction=0.2)


def test_turns_are_sent_their_think_time_after_the_previous_answer():
    frame = run(deployment(), sessions(rate=1.0, think_s=5.0), n=300).requests
    table = draw_requests(sessions(rate=1.0, think_s=5.0), 300, np.random.default_rng(0), max_model_len=16384,
                          block_size=16, prefix_caching=True)
    before = np.flatnonzero(table.follow_up >= 0)
    after = table.follow_up[before]
    gap = frame["arrival_s"].to_numpy()[after] - frame["finish_s"].to_numpy()[before]
    assert gap == pytest.approx(table.think_s[after])


def test_prefix_cache_hits_follow_the_history_and_the_kv_capacity():
    hits = {}
    for label, fields in {"full": {}, "small": {"kv_cache_memory_gib": 10.0},
                          "off": {"enable_prefix_caching": False}}.items():
        result = run(deployment(**fields), sessions(), n=3000)
        frame = result.requests
        hits[label] = frame["cached_tokens"].sum() / frame["input_tokens"].sum()
        hits[label + " ttft"] = result.summary.ttft_s.p50
    assert hits["full"] > 0.5 and hits["off"] == 0
    assert hits["small"] < 0.5 * hits["full"]  # a smaller pool evicts conversations before their next turn
    assert hits["full ttft"] < hits["off ttft"]


def test_the_cache_evicts_the_least_recently_freed_conversation_from_its_tail():
    cache = PrefixCache(64, BlockCounter([-(-c // 16) for c in range(2048)]))
    cache.sync(48)  # a request took 16 blocks
    cache.release(1, 16, 250)  # and freed them: 15 full blocks cached for conversation 1, its partial block not
    cache.sync(48)  # the next request's 16 blocks come from the head: 16 of the 48 never used
    cache.release(2, 16, 250)
    cache.sync(20)  # 44 more taken: the other 32 free, conversation 1's partial block and 11 of its tail blocks
    assert cache.peek(1, 1000) == 4 * 16 and cache.peek(2, 1000) == 15 * 16
    assert cache.peek(2, 100) == 96  # a hit is whole blocks, short of the prompt's last token
    assert cache.take(1, 1000) == 64 and cache.peek(1, 1000) == 0 and cache.queued == 16


def test_the_estimate_reads_cache_hits_from_the_retention_time():
    full, small = (estimate(LLAMA_8B, deployment(**f), sessions(), GPU, PROFILE).summary
                   for f in ({}, {"kv_cache_memory_gib": 10.0}))
    share = [float(n.split("engine: ")[1].split("%")[0]) for s in (full, small) for n in s.notes if "sessions" in n]
    assert share[0] > 30 and share[1] < share[0] / 2
    stats = traffic_stats(sessions())
    assert stats.rate_per_s == pytest.approx(3.0 * 4.5, rel=0.05)  # sessions per second times their turns
    assert "a longest conversation: 8 turns" in stats.max_context_basis


def test_a_preset_draws_pairs_of_one_request_together():
    t = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 1}, "input_tokens": SHAREGPT,
                                "output_tokens": SHAREGPT})
    drawn = draw_requests(t, 5000, np.random.default_rng(0), max_model_len=4096, block_size=16, prefix_caching=False)
    table = dataset("sharegpt")
    pairs = set(zip(table.input_tokens.tolist(), table.output_tokens.tolist()))
    assert set(zip(drawn.input_tokens.tolist(), drawn.output_tokens.tolist())) <= pairs
    assert t.input_tokens.mean_tokens == pytest.approx(table.input_tokens.mean())
    with pytest.raises(InputError, match="input_tokens.dataset.name: unknown dataset; known: arxiv-summarization"):
        validate_spec(Traffic, {"arrival": {"kind": "poisson", "rate_per_s": 1},
                                "input_tokens": {"kind": "dataset", "name": "lmsys"}, "output_tokens": SHAREGPT}, "w")


def test_every_preset_says_where_it_comes_from():
    for name, meta in catalog().items():
        assert {"source", "license", "tokenizer", "derivation"} <= set(meta), name
        table = dataset(name)
        assert len(table.input_tokens) == meta["requests"] and table.input_tokens.max() == meta["input_tokens"]["max"]


@pytest.mark.skipif(not SHARED_RUNS.is_dir(), reason="../shared (measured vllm bench serve runs) is absent")
def test_sharegpt_is_what_vllm_bench_serve_sent():
    runs = [json.loads(p.read_text()) for p in sorted(SHARED_RUNS.glob("*Llama-3.3*sharegpt*.json"))]
    table = dataset("sharegpt")
    assert table.input_tokens.tolist() == runs[0]["input_lens"]
    assert (table.output_tokens == np.max([r["output_lens"] for r in runs], axis=0)).all()
    # vLLM's sampler bounds: prompts of 4 to 1024 tokens.
    assert table.input_tokens.min() >= 4 and table.input_tokens.max() <= 1024
