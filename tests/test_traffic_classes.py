"""Tenant classes with priorities: the spec, vLLM's priority scheduling in the simulator, per-class
figures in the simulation, the estimate, predict, optimize and export."""

import json

import numpy as np
import pytest
import yaml

from servopt.costmodels.errors import InputError, validate_spec
from servopt.costmodels.serving import estimate
from servopt.costmodels.serving.priority import ClassLoad, class_waits
from servopt.costmodels.serving.queueing import Wait
from servopt.costmodels.serving.requests import DrawnRequests, RequestTable, draw_requests
from servopt.costmodels.serving.scheduler import BlockCounter, EngineLimits, Scheduler
from servopt.costmodels.serving.traffic import Traffic
from servopt.optimizer.cli import main
from servopt.results import launch_plan, sglang_plan

from _optimizer_fixtures import compiled_record
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, run

CHAT = {"name": "chat", "share": 0.5, "priority": 0,
        "input_tokens": {"kind": "lognormal", "mean": 512, "sigma": 0.6, "max": 8192},
        "output_tokens": {"kind": "lognormal", "mean": 128, "sigma": 0.6, "max": 2048}, "slo": {"p99_ttft_s": 0.5}}
BATCH = {"name": "batch", "share": 0.5, "priority": 1,
         "input_tokens": {"kind": "lognormal", "mean": 2048, "sigma": 0.5, "max": 8192},
         "output_tokens": {"kind": "lognormal", "mean": 256, "sigma": 0.5, "max": 2048}}
FIXED = {"kind": "fixed", "value": 100}


def two_classes(rate: float = 17.0) -> Traffic:
    return Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": rate}, "classes": [CHAT, BATCH]})


@pytest.mark.parametrize("classes,message", [
    ([{**CHAT, "share": 0.6}, BATCH], "classes: the shares add up to 1.1; make them add up to 1"),
    ([CHAT, {**BATCH, "name": "chat"}], "classes: the name 'chat' is used twice"),
    ([CHAT, {k: v for k, v in BATCH.items() if k != "output_tokens"}], "classes.1.output_tokens: required"),
    ([CHAT, {**BATCH, "priority": "1"}], "classes.1.priority: expected a whole number, not text"),
    ([CHAT, {**BATCH, "priority": 1.5}], "classes.1.priority: expected a whole number, not a number"),
    ([CHAT, {**BATCH, "share": 0}], "classes.1.share: Input should be greater than 0"),
    ([CHAT, {**BATCH, "slo": {"p99_ttft": 1}}], "classes.1.slo.p99_ttft: unknown key"),
    ([CHAT, {**BATCH, "tier": 2}], "classes.1.tier: unknown key"),
    ([], "classes: List should have at least 1 item"),
])
def test_bad_classes_get_one_line_naming_the_field(classes, message):
    with pytest.raises(InputError) as err:
        validate_spec(Traffic, {"arrival": {"kind": "poisson", "rate_per_s": 5}, "classes": classes}, "w.yaml")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_trace_has_no_classes_and_classes_take_the_traffics_own_lengths():
    trace = {"kind": "trace", "records": {"arrival_s": [0.0], "input_tokens": [10], "output_tokens": [5]}}
    with pytest.raises(InputError, match="classes need a generated arrival"):
        validate_spec(Traffic, {"arrival": trace, "classes": [{"name": "a", "share": 1}]}, "w.yaml")
    t = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 5}, "input_tokens": FIXED,
                                "output_tokens": FIXED, "classes": [{"name": "a", "share": 0.25, "priority": 3},
                                                                    {"name": "b", "share": 0.75}]})
    assert [c.priority for c in t.classes] == [3, 0] and t.class_lengths()[0] == (t.input_tokens, t.output_tokens)


def test_arrivals_split_by_the_classes_shares_with_their_priorities_and_lengths():
    drawn = draw_requests(two_classes(), 20_000, np.random.default_rng(0), max_model_len=16384, block_size=16,
                          prefix_caching=True)
    chat = drawn.classes == 0
    assert chat.mean() == pytest.approx(0.5, abs=0.02)
    assert (drawn.priority == np.where(chat, 0, 1)).all()
    assert drawn.input_tokens[chat].mean() == pytest.approx(512, rel=0.05)
    assert drawn.input_tokens[~chat].mean() == pytest.approx(2048, rel=0.05)


def _scheduler(policy: str, priorities: list[int], blocks: int) -> Scheduler:
    n = len(priorities)
    drawn = DrawnRequests(np.arange(n, dtype=float), np.full(n, 64), np.full(n, 1000), np.zeros(n, dtype=int), 0,
                          classes=np.asarray(priorities), priority=np.asarray(priorities), num_classes=2)
    limits = EngineLimits(max_num_seqs=64, max_num_batched_tokens=4096, chunked_prefill=True, num_blocks=blocks,
                          scheduling_policy=policy)
    return Scheduler(RequestTable(drawn), limits, BlockCounter([-(-c // 16) for c in range(4096)]))


@pytest.mark.parametrize("policy,admitted_first,victim", [("fcfs", 0, 2), ("priority", 2, 1)])
def test_vllm_v1_priority_rule_orders_the_queue_and_preempts_the_worst_running_request(policy, admitted_first, victim):
    """Requests 0 and 1 have priority 1, request 2 priority 0 (arrivals in id order). vLLM V1: the
    waiting queue is (priority, arrival) ordered under priority; when blocks run out, fcfs preempts
    the newest running request (2), priority the largest (priority, arrival): request 1."""
    sched = _scheduler(policy, [1, 1, 0], blocks=15)
    sched.waiting.extend([0, 1, 2])
    assert list(sched.waiting)[0] == admitted_first
    plan = sched.plan_step()
    assert plan.admitted == 3 and not plan.victims
    sched.apply_step(plan, 0.0, 0.01)
    victims = []
    for step in range(200):  # decode until the 15 blocks (3 x 5 at 80 tokens) run out
        plan = sched.plan_step()
        if plan.victims:
            victims = plan.victims
            break
        sched.apply_step(plan, step * 0.01, (step + 1) * 0.01)
    assert victims[:1] == [victim]
    sched.apply_step(plan, 9.0, 9.01)
    assert sched.table.state[victim] == 0 and sched.table.computed[victim] == 0  # back to waiting, recomputed


def test_a_request_that_arrives_during_a_planned_step_does_not_take_an_admitted_ones_place():
    """Request 1 (priority 0) reaches the queue after a step that admits request 0 was planned: the
    step admits request 0 and request 1 waits for the next one, as in vLLM."""
    sched = _scheduler("priority", [1, 0], blocks=100)
    sched.waiting.append(0)
    plan = sched.plan_step()
    sched.waiting.append(1)
    assert list(sched.waiting) == [1, 0]
    sched.apply_step(plan, 0.0, 0.01)
    assert list(sched.running) == [0] and list(sched.waiting) == [1]


@pytest.mark.parametrize("policy,stops_at_arrivals", [("fcfs", False), ("priority", True)])
def test_a_decode_run_behind_a_blocked_head_stops_at_arrivals_only_under_priority(policy, stops_at_arrivals):
    """The head (request 1) needs 4 blocks, 1 is free: under fcfs nothing can be admitted before the
    run changes; under priority a new request may wait ahead of the head, and fit."""
    sched = _scheduler(policy, [1, 1], blocks=6)
    sched.waiting.append(0)
    sched.apply_step(sched.plan_step(), 0.0, 0.01)
    sched.waiting.append(1)
    assert sched.plan_run().horizon_matters is stops_at_arrivals


def test_priority_cuts_the_interactive_class_p99_ttft_and_the_batch_class_pays():
    """Would fail if priority did nothing: one H100 whose 64 sequence slots are ~90% busy."""
    results = {}
    for policy in ("fcfs", "priority"):
        summary = run(deployment(scheduling_policy=policy, max_num_seqs=64), two_classes(), n=4000).summary
        results[policy] = {c.name: c for c in summary.classes}
    fcfs, prio = results["fcfs"], results["priority"]
    assert prio["chat"].ttft_s.p99 < 0.5 * fcfs["chat"].ttft_s.p99
    assert prio["chat"].ttft_s.p99 < 0.5 and prio["chat"].slo_met and not fcfs["chat"].slo_met
    assert prio["batch"].ttft_s.p99 > fcfs["batch"].ttft_s.p99
    assert fcfs["chat"].requests_per_s + fcfs["batch"].requests_per_s == pytest.approx(
        run(deployment(max_num_seqs=64), two_classes(), n=4000).summary.requests_per_s, rel=1e-6)


def test_without_different_priorities_the_policy_changes_nothing():
    same = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 17},
                                   "classes": [CHAT, {**BATCH, "priority": 0}]})
    a, b = (run(deployment(scheduling_policy=p, max_num_seqs=64), same, n=1500).summary for p in ("fcfs", "priority"))
    assert [c.ttft_s.p99 for c in a.classes] == [c.ttft_s.p99 for c in b.classes]


def test_cobham_waits_conserve_work_and_collapse_to_fcfs():
    loads = [ClassLoad(4.0, 0.1, 0), ClassLoad(2.0, 0.1, 1), ClassLoad(2.0, 0.05, 1)]
    aggregate = Wait(0.9, 2.0)
    waits = class_waits("priority", loads, aggregate)
    rho = sum(c.utilization for c in loads)
    assert sum(c.utilization * w.mean_s for c, w in zip(loads, waits)) == pytest.approx(rho * aggregate.mean_s)
    assert waits[0].mean_s < aggregate.mean_s < waits[1].mean_s == waits[2].mean_s
    assert class_waits("fcfs", loads, aggregate) == [aggregate] * 3


def test_the_estimate_gives_each_class_its_priority_queue():
    prefill_bound = Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": 5}, "classes": [
        {**CHAT, "output_tokens": {"kind": "fixed", "value": 32}},
        {**BATCH, "input_tokens": {"kind": "lognormal", "mean": 12000, "sigma": 0.3, "max": 30000},
         "output_tokens": {"kind": "fixed", "value": 32}}]})
    p99 = {}
    for policy in ("fcfs", "priority"):
        s = estimate(LLAMA_8B, deployment(scheduling_policy=policy, max_model_len=32768), prefill_bound, GPU,
                     PROFILE).summary
        p99[policy] = {c.name: c.ttft_s.p99 for c in s.classes}
        assert "classes" in s.to_dict() and any("Cobham" in n or "first come" in n for n in s.notes)
    assert p99["priority"]["chat"] < 0.8 * p99["fcfs"]["chat"] and p99["priority"]["batch"] >= p99["fcfs"]["batch"]


def test_predict_reports_each_class_in_json_and_text(tmp_path, capsys):
    workload = tmp_path / "w.yaml"
    workload.write_text(yaml.safe_dump({"model": "llama-3.1-8b", "traffic": {
        "arrival": {"kind": "poisson", "rate_per_s": 17}, "classes": [CHAT, BATCH]}}))
    dep = tmp_path / "d.yaml"
    dep.write_text(yaml.safe_dump({"gpu": "h100", "max_model_len": 16384, "max_num_seqs": 64,
                                   "scheduling_policy": "priority"}))
    assert main(["predict", str(workload), "--deployment", str(dep), "--requests", "800", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["classes"]) == {"chat", "batch"}
    chat = out["classes"]["chat"]
    assert set(chat["ttft_s"]) == {"mean", "p50", "p90", "p99"} and {"tpot_s", "itl_s", "e2e_s"} <= set(chat)
    assert chat["priority"] == 0 and chat["slo"] == {"ttft": 0.5} and chat["goodput_requests_per_s"] > 0
    assert chat["goodput"] == chat["goodput_requests_per_s"]
    assert main(["predict", str(workload), "--deployment", str(dep), "--requests", "800"]) == 0
    text = capsys.readouterr().out
    assert "class chat: priority 0, 50% of arrivals" in text and "class batch: priority 1" in text


def test_optimize_rule_names_each_class_that_misses_its_slo():
    from servopt.optimizer._evaluate import CLASS_SLO_CONSTRAINT, Evaluator
    from servopt.optimizer._problem import build_problem
    from servopt.optimizer.workload import Workload

    w = Workload.model_validate({"model": "llama-3.1-8b", "gpus": ["h100"], "traffic": {
        "arrival": {"kind": "poisson", "rate_per_s": 17}, "classes": [CHAT, {**BATCH, "slo": {"p99_e2e_s": 60}}]}})
    problem = build_problem(w)
    assert problem.space.domain("scheduling_policy").values() == ["fcfs", "priority"]
    evaluator = Evaluator(problem)

    def summary(chat_ttft: float, batch_e2e: float) -> dict:
        stats = {"mean": 0, "p50": 0, "p90": 0}
        return {"ttft_s": {**stats, "p99": 1.0}, "tpot_s": {**stats, "p99": 0.02}, "e2e_s": {**stats, "p99": 9.0},
                "saturated": False, "classes": {
                    "chat": {"ttft_s": {**stats, "p99": chat_ttft}, "e2e_s": {**stats, "p99": 5.0}},
                    "batch": {"ttft_s": {**stats, "p99": 1.0}, "e2e_s": {**stats, "p99": batch_e2e}}}}

    assert evaluator._prediction_violations(summary(1.0, 30))[CLASS_SLO_CONSTRAINT] == pytest.approx(1.0)
    assert evaluator._prediction_violations(summary(0.25, 90))[CLASS_SLO_CONSTRAINT] == pytest.approx(0.5)
    assert evaluator._prediction_violations(summary(0.25, 30))[CLASS_SLO_CONSTRAINT] == pytest.approx(-0.5)


def test_export_schedules_by_priority_and_tells_clients_how_to_set_it():
    d = {"gpu": "h100", "tp": 1, "pp": 1, "replicas": 1, "quantization": "bf16", "kv_cache_dtype": "auto",
         "max_num_seqs": 64, "max_num_batched_tokens": 8192, "enable_chunked_prefill": True,
         "enable_prefix_caching": True, "gpu_memory_utilization": 0.92, "max_model_len": 16384,
         "scheduling_policy": "priority", "speculative": None, "disaggregation": None}
    point = compiled_record({"model": "llama-3.1-8b", "serve_id": "meta-llama/Llama-3.1-8B-Instruct", "deployment": d})
    classes = [{"name": "chat", "priority": 0}, {"name": "batch; rm -rf /", "priority": 1}]
    plan = launch_plan(point, classes=classes)
    assert plan["instances"][0]["args"][-2:] == ["--scheduling-policy", "priority"]
    assert any('"priority"' in n and "extra_body" in n and "batch; rm -rf / priority 1" in n for n in plan["notes"])
    sglang = sglang_plan(point, classes=[{"name": "a", "priority": 0}, {"name": "b", "priority": 12}])
    args = sglang["instances"][0]["args"]
    assert args[-4:] == ["--enable-priority-scheduling", "--schedule-low-priority-values-first",
                         "--priority-scheduling-preemption-threshold", "13"]
    fcfs = launch_plan(compiled_record({"model": "llama-3.1-8b", "serve_id": "meta-llama/Llama-3.1-8B-Instruct",
                                        "deployment": {**d, "scheduling_policy": "fcfs"}}))
    assert "--scheduling-policy" not in fcfs["instances"][0]["args"]
