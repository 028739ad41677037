"""Traffic sampling and trace reading."""

import json

import numpy as np
import pytest

from servopt.costmodels.errors import InputError
from servopt.costmodels.serving.requests import draw_requests
from servopt.costmodels.serving.traffic import Traffic, read_trace


@pytest.mark.parametrize("spec", [
    {"kind": "fixed", "value": 300},
    {"kind": "uniform", "low": 100, "high": 500},
    {"kind": "lognormal", "mean": 700, "sigma": 0.8},
    {"kind": "histogram", "values": [100, 1000, 4000], "weights": [5, 3, 1]},
])
def test_length_samples_match_their_stated_moments(spec):
    t = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 1}, "input_tokens": spec,
                                "output_tokens": spec})
    dist = t.input_tokens
    x = dist.sample(np.random.default_rng(3), 200_000).astype(float)
    assert x.min() >= 1 and np.all(x == np.round(x))
    assert x.mean() == pytest.approx(dist.mean_tokens, rel=0.01)
    assert x.var() / x.mean() ** 2 == pytest.approx(dist.cv2, rel=0.05, abs=1e-9)


@pytest.mark.parametrize("arrival,cv2", [({"kind": "poisson", "rate_per_s": 4}, 1.0),
                                         ({"kind": "gamma", "rate_per_s": 4, "cv": 3}, 9.0)])
def test_arrival_processes_have_their_rate_and_burstiness(arrival, cv2):
    t = Traffic.model_validate({"arrival": arrival, "input_tokens": {"kind": "fixed", "value": 1},
                                "output_tokens": {"kind": "fixed", "value": 1}})
    times = t.arrival.arrival_times_s(np.random.default_rng(5), 200_000)
    gaps = np.diff(times)
    assert 1 / gaps.mean() == pytest.approx(4, rel=0.02)
    assert gaps.var() / gaps.mean() ** 2 == pytest.approx(cv2, rel=0.05)


def test_lengths_are_clipped_to_the_context_and_prefix_hits_are_whole_blocks():
    t = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 1},
                                "input_tokens": {"kind": "fixed", "value": 5000},
                                "output_tokens": {"kind": "fixed", "value": 500}, "shared_prefix_fraction": 0.3,
                                "max_context": 4096})
    drawn = draw_requests(t, 10, np.random.default_rng(0), max_model_len=4096, block_size=16, prefix_caching=True)
    assert (drawn.input_tokens + drawn.output_tokens).max() <= 4096 and drawn.clipped == 10
    assert (drawn.cached_tokens % 16 == 0).all() and (drawn.cached_tokens < drawn.input_tokens).all()
    assert draw_requests(t, 10, np.random.default_rng(0), max_model_len=4096, block_size=16,
                         prefix_caching=False).cached_tokens.sum() == 0


def test_csv_and_jsonl_traces_are_read_and_sorted(tmp_path):
    csv_path = tmp_path / "t.csv"
    csv_path.write_text("timestamp,input_len,output_len\n2.0,10,5\n1.0,20,6\n")
    jsonl_path = tmp_path / "t.jsonl"
    jsonl_path.write_text("\n".join(json.dumps({"arrival_s": t, "input_tokens": i, "output_tokens": o})
                                    for t, i, o in [(2.0, 10, 5), (1.0, 20, 6)]))
    for path in (csv_path, jsonl_path):
        trace = read_trace(path, time_unit="s")  # "timestamp" says no unit
        assert trace.arrival_s.tolist() == [0.0, 1.0]
        assert trace.input_tokens.tolist() == [20, 10] and trace.output_tokens.tolist() == [6, 5]


@pytest.mark.parametrize("content,message", [
    (None, "cannot be read"),
    ("", "is empty"),
    ("arrival_s,input_tokens\n0,5\n", "no output-token column"),
    ("arrival_s,input_tokens,output_tokens\n0,5,x\n", "line 2, column 'output_tokens': 'x' is not a number"),
    ("arrival_s,input_tokens,output_tokens\n0,0,3\n", "'0' is not a whole number >= 1"),
    ("arrival_s,input_tokens,output_tokens\n-1,5,3\n", "'-1' is not a number >= 0"),
    ('{"arrival_s": 0, "input_tokens": 3\n', "line 1 is not valid JSON"),
])
def test_unreadable_traces_name_the_file_and_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=message) as err:
        read_trace(path)
    assert "bad.csv" in str(err.value)
