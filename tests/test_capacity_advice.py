"""Capacity advice a platform engineer can sign (issue 29): each symptom the issue lists, through the
CLI where a user meets it."""

import json
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from _optimizer_fixtures import TINY, write_workload

from servopt.costmodels.capacity import fleet_size
from servopt.optimizer.cli import main
from servopt.optimizer.study import FrontCandidate, next_rechecks, preferred_mask
from servopt.results._plot import pareto_figures
from servopt.results._report import _reason_lines, group_reasons, slo_targets
from servopt.search_spaces import SearchSpace, example_context

MISTRAL_4090 = {
    "model": "mistralai/Mistral-7B-Instruct-v0.2",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 10},
                "input_tokens": {"kind": "fixed", "value": 1024}, "output_tokens": {"kind": "fixed", "value": 256}},
    "slo": {"p99_ttft_s": 2, "p99_tpot_s": 0.05},
    "gpus": ["rtx4090"],
    "space": {"quantization": "bf16", "tp": 1, "mode": "aggregated", "speculation": "off"},
    "budget": {"trials": 8},
    "fidelity": {"search_requests": 300, "final_requests": 400},
}


def _optimize(tmp_path, name: str, data: dict, code: int = 0) -> pd.DataFrame:
    out = tmp_path / name
    assert main(["optimize", str(write_workload(tmp_path / f"{name}.yaml", data)), "--out", str(out),
                 "--no-progress"]) == code
    return pd.read_csv(out / "trials.csv")


def test_an_unservable_job_names_capacities_within_physics(tmp_path, capsys):
    # Issue 29 (1): Mistral-7B on L4s only, 3,840 / 256 tokens at 50 req/s: no 8 L4s carry it.
    data = {"model": "mistralai/Mistral-7B-Instruct-v0.2",
            "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 50},
                        "input_tokens": {"kind": "fixed", "value": 3840}, "output_tokens": {"kind": "fixed", "value": 256}},
            "slo": {"p99_ttft_s": 0.3, "p99_tpot_s": 0.01}, "gpus": ["l4"], "limits": {"max_gpus": 8},
            "budget": {"trials": 8}}
    trials = _optimize(tmp_path, "l4", data, code=2)
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if re.match(r"\s+- l4 \w+: at most", x)]
    assert lines
    # 8 L4s at their bf16 peak serve at most 16.3 requests/s of this mix (2 x 7.24e9 x 4,095 FLOPs each);
    # fp8 doubles the peak.
    for line in lines:
        at_most = float(re.search(r"at most ([\d.]+) requests/s", line).group(1))
        assert at_most < (16.3 if " bf16:" in line or " awq:" in line else 32.6), line
    per_replica = {round(float(x), 2) for x in re.findall(r"\(([\d.]+) requests/s per replica", out)}
    assert per_replica <= {round(x, 2) for x in trials["replica_requests_per_s"].dropna()} | {
        round(float(f"{x:.3g}"), 2) for x in trials["replica_requests_per_s"].dropna()}


def test_replicas_needed_agrees_with_the_engine_and_redundancy_buys_spares(tmp_path, capsys):
    # Issue 29 (2, 3): trials.csv said 1.49 replicas where 2 saturate; redundancy 0.3 gave 3 GPUs like 0.
    plain = _optimize(tmp_path, "plain", MISTRAL_4090)
    spare = _optimize(tmp_path, "spare", {**MISTRAL_4090, "redundancy": 0.3})
    for trials in (plain, spare):
        sized = trials[trials["replica_requests_per_s"].notna()]
        assert len(sized)
        assert np.allclose(sized["replicas_needed"], 10 / sized["replica_requests_per_s"])
    assert (plain["replicas"] == plain["serving_replicas"]).all()
    # `servopt predict` agrees: the cheapest front point's fleet carries 10 req/s, one replica fewer does not.
    capsys.readouterr()
    front_plain = pd.read_csv(tmp_path / "plain" / "pareto.csv")
    cheapest = front_plain.iloc[0]
    needed = float(plain.set_index("trial").loc[cheapest["trial"], "replicas_needed"])
    assert cheapest["replicas"] == int(np.ceil(needed - 1e-9))
    deployment = json.loads(cheapest["deployment"])
    for replicas, saturates in ((cheapest["replicas"], False), (cheapest["replicas"] - 1, True)):
        (tmp_path / "d.yaml").write_text(yaml.safe_dump({**deployment, "replicas": int(replicas)}))
        assert main(["predict", str(tmp_path / "plain.yaml"), "--deployment", str(tmp_path / "d.yaml"),
                     "--requests", "1500", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["saturated"] is saturates
    sized = spare[spare["serving_replicas"].notna()]
    assert (sized["replicas"] == [fleet_size(int(n), 0.3) for n in sized["serving_replicas"]]).all()
    front_spare = pd.read_csv(tmp_path / "spare" / "pareto.csv")
    # Every front point of the spare job runs ceil(N x 1.3) replicas for the N its traffic needs:
    # at least one more than it needs (the two searches may find different cheapest configurations).
    serving = spare.set_index("trial").loc[front_spare["trial"], "serving_replicas"].astype(int).to_numpy()
    assert (front_spare["replicas"] == [fleet_size(n, 0.3) for n in serving]).all()
    assert (front_spare["replicas"] > serving).all()
    # The spares carry the traffic with one replica down.
    assert not front_spare["n_minus_1_saturated"].astype(bool).any()


def test_targets_in_the_wrong_unit_are_warned_in_one_line(tmp_path, capsys):
    # Issue 29 (4): slo {p99_ttft_s: 500, p99_tpot_s: 50} (milliseconds meant) ran with no word.
    data = {**TINY, "slo": {"p99_ttft_s": 500, "p99_tpot_s": 50}, "budget": {"trials": 4}}
    _optimize(tmp_path, "units", data)
    err = capsys.readouterr().err.strip().splitlines()
    assert "servopt optimize: warning: slo.p99_tpot_s: 50 is in seconds" in err[0] and "did you mean 0.05 (50 ms)?" in err[0]
    assert "slo.p99_ttft_s: 500" in err[1] and "did you mean 0.5 (500 ms)?" in err[1]
    assert "did you mean 0.05 (50 ms)?" in (tmp_path / "units" / "report.md").read_text()
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"gpu": "h100", "max_model_len": 1024}))
    assert main(["predict", str(tmp_path / "units.yaml"), "--deployment", str(tmp_path / "d.yaml"), "--requests", "200",
                 "--analytic"]) == 0
    assert "servopt predict: warning: slo.p99_tpot_s: 50 is in seconds" in capsys.readouterr().err
    # A sensible SLO is not warned; a class's own SLO is checked too.
    classes = {**TINY, "budget": {"trials": 2}, "traffic": {
        **TINY["traffic"], "classes": [{"name": "a", "share": 1.0, "slo": {"p99_tpot_s": 40}}]}}
    _optimize(tmp_path, "classes", classes)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and "traffic.classes.0.slo.p99_tpot_s: 40" in err


def test_accuracy_breaks_ties_at_equal_cost():
    # Issue 29 (5): at $23.92/h the front kept AWQ (2.37% drop) over FP8 (0.4%) for 70 ms of P99 e2e.
    points = np.array([[23.92, 5.00], [23.92, 5.07], [40.0, 3.0]])
    assert preferred_mask(points, [2.37, 0.4, 2.37]).tolist() == [False, True, True]
    # Beyond the tolerance the faster point stays; at equal accuracy too.
    assert preferred_mask(np.array([[23.92, 5.0], [23.92, 6.0]]), [2.37, 0.4]).tolist() == [True, False]
    assert preferred_mask(points, [1.0, 1.0, 1.0]).tolist() == [True, False, True]
    # The re-check rounds re-check the more accurate point first, and do not close it with the AWQ one.
    awq = FrontCandidate(1, {"accuracy_drop_pct": 2.37}, (23.92, 5.00), True)
    fp8 = FrontCandidate(2, {"accuracy_drop_pct": 0.4}, (23.92, 5.07), True)
    assert [c.number for c in next_rechecks([awq, fp8], {}, 100)] == [2]
    passed = {"requests": 100, "feasible": True}
    assert next_rechecks([awq, fp8], {2: {**passed, "values": [23.92, 5.1]}}, 100) == []
    failed = {"requests": 100, "feasible": False}
    assert [c.number for c in next_rechecks([awq, fp8], {2: {**failed, "values": [23.92, 5.1]}}, 100)] == [1]
    assert [c.number for c in next_rechecks([fp8, awq], {1: {**passed, "values": [23.92, 5.0]}}, 100)] == [2]


def test_the_front_table_shows_accuracy_and_the_tie_rule(tmp_path):
    _optimize(tmp_path, "tie", {**TINY, "budget": {"trials": 6}})
    md = (tmp_path / "tie" / "report.md").read_text()
    assert "acc. drop %" in md and "front keeps the point with the lower accuracy drop" in md
    assert "accuracy_drop_pct" in (tmp_path / "tie" / "pareto.csv").read_text().splitlines()[0]


def test_tp_pins_every_engines_tensor_parallelism():
    # Issue 29 (6): space {tp: 1} left disaggregated decode at TP 4 and 8.
    space = SearchSpace(example_context(), {"tp": 1})
    assert space.domain("prefill_tp").pinned == 1 and space.domain("decode_tp").pinned == 1
    narrowed = SearchSpace(example_context(), {"tp": [1, 2], "decode_tp": [4]})
    assert narrowed.domain("prefill_tp").values() == [1, 2] and narrowed.domain("decode_tp").pinned == 4


def test_class_slos_read_as_targets_and_reasons_group(tmp_path):
    # Issue 29 (7): "P99 NUS <= 0 s" (a class's n_minus_1: false), and reasons listed one by one.
    assert slo_targets({"p99_ttft_s": 0.5, "p99_tpot_s": None, "n_minus_1": False}) == [("p99_ttft_s", "ttft", 0.5)]
    data = {**TINY, "budget": {"trials": 6}, "traffic": {**TINY["traffic"], "classes": [
        {"name": "chat", "share": 0.5, "slo": {"p99_ttft_s": 0.5}}, {"name": "batch", "share": 0.5, "priority": 1}]}}
    _optimize(tmp_path, "classes", data)
    md = (tmp_path / "classes" / "report.md").read_text()
    assert "NUS" not in md and "chat (50%, priority 0, P99 TTFT <= 0.5 s)" in md
    grouped = group_reasons([f"simulated P99 TTFT {x} s > SLO 0.5 s" for x in (0.61, 0.7, 0.93)]
                            + ["does not fit in memory on l4 (tp=1, pp=1): x", "does not fit in memory on l4 (tp=2, pp=1): x"])
    assert grouped == [(3, "simulated P99 TTFT 0.61-0.93 s > SLO 0.5 s"), (2, "does not fit in memory on l4 (tp=1-2, pp=1): x")]


def test_no_heading_stands_over_no_reasons():
    frame = pd.DataFrame({"feasible": [True, False, False], "reason": ["", "", float("nan")]})
    assert _reason_lines(frame) == []


def test_a_miss_is_never_printed_equal_to_its_target():
    from servopt.costmodels.serving.slo import above

    assert above(0.50049, 0.5) == "0.5005 s > SLO 0.5 s" and above(0.61, 0.5) == "0.61 s > SLO 0.5 s"


def _frames(calibrated: bool):
    row = {"trial": 0, "gpu": "l4", "fidelity": "simulate", "feasible": True, "objective_latency_s": 1.0,
           "cost_usd_per_hour": 1.0, "cost_usd_per_output_mtoken": 1.0, "cost_usd_per_total_mtoken": 1.0,
           "p99_ttft_s": 0.4, "p99_tpot_s": 0.02, "p99_itl_s": 0.02, "p99_e2e_s": 1.0, "output_tokens_per_s": 10.0,
           "accuracy_drop_pct": 0.0, "reason": "", "num_gpus": 1, "gpus_rented": 1, "serve_id": "m", "model": "m",
           "profile_calibrated": calibrated, "p99_ttft_s[chat]": 0.3, "simulated_requests": 100, "why": "",
           "deployment": '{"gpu": "l4", "tp": 1, "pp": 1, "replicas": 1, "quantization": "bf16", "kv_cache_dtype": '
                         '"auto", "max_num_seqs": 8, "max_num_batched_tokens": 512, "enable_chunked_prefill": true}'}
    frame = pd.DataFrame([row])
    return frame, frame.copy()


def test_plots_say_uncalibrated_and_draw_class_slos():
    trials, front = _frames(calibrated=False)
    figures = pareto_figures(trials, front, {"cost": "usd_per_hour", "latency": "e2e"}, {"p99_e2e_s": 2.0},
                             [{"name": "chat", "slo": {"p99_ttft_s": 0.5}}])
    assert list(figures) == ["e2e", "ttft"]  # the class's TTFT target adds its panel
    names = [t.name for t in figures["ttft"].data]
    assert "l4 (UNCALIBRATED)" in names
    assert "class chat SLO: P99 TTFT <= 0.5 s" in names and "class chat: front's P99 TTFT" in names
    assert any("UNCALIBRATED" in a.text for a in figures["e2e"].layout.annotations)
    calibrated = pareto_figures(*_frames(calibrated=True), {"cost": "usd_per_hour", "latency": "e2e"}, {})
    assert not any("UNCALIBRATED" in (t.name or "") for t in calibrated["e2e"].data)


def test_tenant_columns_do_not_widen_the_table(tmp_path):
    from servopt.results._report import FRONT_COLUMNS, front_columns

    data = {"workload": {"traffic": {"classes": [{"name": "chat"}, {"name": "batch"}]}}}
    front = pd.DataFrame({"model": ["m"], "n_minus_1_x": [0]})
    columns = front_columns(data, front)
    # One column per class (its P99 TTFT / TPOT / e2e in one cell), not one per class and metric.
    assert len(columns) == len(FRONT_COLUMNS) - 2 + 2
    assert [label for label, _ in columns[-2:]] == ["chat: P99 TTFT / TPOT / e2e s", "batch: P99 TTFT / TPOT / e2e s"]


@pytest.mark.parametrize("key", ["input_tokens", "output_tokens"])
def test_a_mis_indented_key_asks_whether_it_belongs_under_traffic(tmp_path, capsys, key):
    # Issue 29 (9): "unknown key (check its spelling)" for input_tokens one level too far left.
    data = {"model": "llama-3.1-8b", "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 5},
                                                 **({"output_tokens": TINY["traffic"]["output_tokens"]} if key == "input_tokens"
                                                    else {"input_tokens": TINY["traffic"]["input_tokens"]})},
            key: TINY["traffic"][key]}
    assert main(["optimize", str(write_workload(tmp_path / "w.yaml", data)), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{key}: unknown key here (did you mean traffic.{key}? it belongs under traffic:)" in err
    assert len(err.strip().splitlines()) == 1
