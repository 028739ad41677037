"""Data-parallel ranks and expert parallelism: memory per rank, the MoE step, lockstep simulation."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from serving_helpers import GPU, LLAMA_8B, PROFILE, deployment, run, traffic

from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.errors import InputError
from servopt.costmodels.memory import plan_memory, weight_bytes
from servopt.costmodels.moe import ExpertLayout
from servopt.costmodels.roofline import Batch, StepCostModel

QWEN_MOE = get_model("qwen3-30b-a3b")
DEEPSEEK_V3 = get_model("deepseek-v3")


def test_routed_experts_are_split_over_dp_x_tp_and_the_rest_is_replicated():
    m = DEEPSEEK_V3
    # Block FP8: one byte per weight plus one fp32 scale per 128 x 128 block.
    experts = m.num_moe_layers * m.moe.num_experts * m.expert_params * m.weight_scheme("fp8").weight_bytes_per_param
    assert m.weight_scheme("fp8").weight_bytes_per_param == pytest.approx(1 + 4 / 128**2)
    one = weight_bytes(m, "fp8", tp=1).per_gpu_bytes
    dp8 = weight_bytes(m, "fp8", tp=1, dp=8).per_gpu_bytes
    tp8 = weight_bytes(m, "fp8", tp=8).per_gpu_bytes
    assert one - dp8 == pytest.approx(experts * 7 / 8, rel=1e-9)  # only the experts shrink
    # Attention, dense layers, embeddings and the LM head stay whole on every rank (TP would split them).
    assert dp8 - tp8 == pytest.approx((one - experts) * 7 / 8, rel=0.01)
    plan = plan_memory(m, GPU.model_copy(update={"memory_gib": 141.0}), quantization="fp8", tp=1, dp=8)
    assert plan.num_gpus == 8 and plan.dp == 8


def test_expert_parallel_busiest_gpu_carries_more_than_the_mean():
    ep = ExpertLayout(128, 8, dp=4, tp=2, expert_parallel=True)
    tokens = np.array([1.0, 64.0, 4096.0])
    mean, busiest = ep.mean_pairs_per_gpu(tokens), ep.busiest_pairs_per_gpu(tokens)
    assert np.all(busiest > mean) and np.all(busiest <= tokens * 8)
    # The relative excess shrinks as 1/sqrt(tokens): large batches balance.
    assert busiest[2] / mean[2] - 1 < 0.2 * (busiest[1] / mean[1] - 1)
    tp = ExpertLayout(128, 8, dp=4, tp=2, expert_parallel=False)
    np.testing.assert_allclose(tp.busiest_pairs_per_gpu(tokens), tokens * 8)  # every pair, 1/8 of each expert
    assert tp.width_share == 1 / 8 and ep.experts_per_gpu == 16


def test_dispatch_and_combine_only_across_dp_ranks():
    def comm(**kw) -> float:
        cost = StepCostModel(QWEN_MOE, GPU, PROFILE, "bf16", **kw)
        return cost.step(Batch(decode_context=[1000] * 32)).operators_s["tp_pp_communication"]

    assert comm(tp=8, expert_parallel=True) == pytest.approx(comm(tp=8))  # one DP rank: the TP all-reduce combines
    assert comm(tp=1, dp=8, expert_parallel=True) > 0
    naive = comm(tp=1, dp=8, expert_parallel=True, vllm_version="0.10.0")  # all-reduce instead of reduce-scatter
    assert naive > comm(tp=1, dp=8, expert_parallel=True, vllm_version="0.12.0")
    across_nodes = StepCostModel(QWEN_MOE, GPU, PROFILE, "bf16", tp=2, dp=8, expert_parallel=True)
    within = StepCostModel(QWEN_MOE, GPU, PROFILE, "bf16", tp=2, dp=4, expert_parallel=True)
    tokens = np.array([4096.0])
    assert across_nodes._dispatch_combine_s(tokens)[0] > 4 * within._dispatch_combine_s(tokens)[0]
    with pytest.raises(InputError, match="tp 1"):
        StepCostModel(QWEN_MOE, GPU, PROFILE, "bf16", tp=2, dp=4, all2all_backend="deepep_low_latency")


def test_deployment_rejects_what_is_not_modelled():
    with pytest.raises(ValidationError, match="pp > 1"):
        Deployment.model_validate({"gpu": "h100", "tp": 8, "pp": 2, "data_parallel_size": 2})
    d = Deployment.model_validate({"gpu": "h100", "tp": 2, "data_parallel_size": 4, "replicas": 2})
    assert d.gpus_per_replica == 8 and d.num_gpus == 16


def test_moe_ranks_step_in_lockstep_and_an_idle_rank_joins():
    # One request: rank 0 decodes alone while rank 1 runs dummy steps; every step is the busy rank's,
    # timed by the DP cost model (experts over both ranks' padded tokens, dispatch and combine).
    dep = deployment(tp=1, data_parallel_size=2, enable_expert_parallel=True, max_model_len=4096)
    tr = traffic({"kind": "poisson", "rate_per_s": 0.01}, 512, 64)
    result = run(dep, tr, n=1, model=QWEN_MOE)
    cost = StepCostModel(QWEN_MOE, GPU, PROFILE, "bf16", tp=1, dp=2, expert_parallel=True)
    step = cost.decode_step_time_s(1, 512 + 32)
    assert result.summary.tpot_s.mean == pytest.approx(step, rel=0.02)
    alone = StepCostModel(QWEN_MOE, GPU, PROFILE, "bf16", tp=1).decode_step_time_s(1, 512 + 32)
    assert step != pytest.approx(alone, rel=0.01)


def test_dp_load_balancer_spreads_a_burst_and_ranks_keep_their_own_requests():
    dep = deployment(tp=1, data_parallel_size=2, enable_expert_parallel=True, max_model_len=4096)
    burst = traffic({"kind": "closed_loop", "concurrency": 8, "requests_per_client": 1}, 512, 64)
    frame = run(dep, burst, n=8, model=QWEN_MOE).requests
    assert sorted(frame["instance"].value_counts().tolist()) == [4, 4]
    # A dense model's ranks are independent engines: two requests on two ranks finish like one alone
    # (but for the instance's one front end, which tokenizes them one after the other).
    dense = deployment(tp=1, data_parallel_size=2)
    pair = traffic({"kind": "closed_loop", "concurrency": 2, "requests_per_client": 1}, 512, 64)
    single = traffic({"kind": "closed_loop", "concurrency": 1, "requests_per_client": 1}, 512, 64)
    two, one = run(dense, pair, n=2), run(deployment(tp=1), single, n=1)
    assert two.summary.e2e_s.mean == pytest.approx(one.summary.e2e_s.mean, rel=1e-3)
    assert LLAMA_8B.moe is None


def test_search_space_offers_dp_and_ep_for_moe_models_only():
    from servopt.search_spaces import SearchSpace, example_context

    dense = SearchSpace(example_context(), {"mode": "aggregated"})
    assert dense.domain("data_parallel_size").pinned == 1 and dense.domain("enable_expert_parallel").pinned is False
    moe = SearchSpace(example_context("qwen3-30b-a3b", ("h100",)), {"mode": "aggregated"})
    assert moe.domain("data_parallel_size").values() == [1, 2, 4, 8, 16]
    assert moe.domain("enable_expert_parallel").values() == [False, True]
    values = {"gpu": "h100", "tp": 2, "data_parallel_size": 4, "enable_expert_parallel": True, "quantization": "bf16",
              "kv_cache_dtype": "auto", "max_num_seqs": 64, "max_num_batched_tokens": 4096,
              "enable_chunked_prefill": True, "speculation": "off", "headroom": 0.0}
    candidate = moe.fixed(values)
    d = moe.deployment(candidate, replicas=2)
    assert (d.data_parallel_size, d.enable_expert_parallel, d.num_gpus) == (4, True, 16)
    assert not [v for v in moe.violations(candidate) if v.constraint == "moe_parallelism"]
    lone = moe.fixed({**values, "tp": 1, "data_parallel_size": 1})
    assert [v.constraint for v in moe.violations(lone)] == ["moe_parallelism"]  # EP over one GPU


def test_workload_with_a_method_no_model_has_is_an_input_error(tmp_path):
    from servopt.optimizer.cli import main

    path = tmp_path / "w.yaml"
    path.write_text("model: llama-3.1-8b\ntraffic: {arrival: {kind: poisson, rate_per_s: 1}, input_tokens: "
                    "{kind: fixed, value: 128}, output_tokens: {kind: fixed, value: 32}}\nspeculation: [{method: mtp}]\n")
    assert main(["optimize", str(path), "--out", str(tmp_path / "out"), "--no-progress"]) == 2


def test_vllm_export_writes_dp_and_ep_flags_and_headless_nodes():
    from _optimizer_fixtures import compiled_record

    from servopt.results import launch_plan, node_scripts

    d = {"gpu": "h200", "tp": 1, "pp": 1, "data_parallel_size": 16, "enable_expert_parallel": True, "replicas": 1,
         "quantization": "fp8", "kv_cache_dtype": "auto", "max_num_seqs": 256, "max_num_batched_tokens": 8192,
         "enable_chunked_prefill": True, "enable_prefix_caching": True, "gpu_memory_utilization": 0.92,
         "max_model_len": 8192, "speculative": None, "disaggregation": None}
    plan = launch_plan(compiled_record({"serve_id": "deepseek-ai/DeepSeek-V3", "deployment": d}))
    assert plan["num_nodes"] == 2 and plan["router"] is None  # one endpoint: the first node's
    scripts = node_scripts(plan)
    head, other = scripts["node-0.sh"], scripts["node-1.sh"]
    for script in (head, other):
        assert "--data-parallel-size 16 --enable-expert-parallel" in script
        assert '--data-parallel-address "$head_address"' in script and 'head_address="$1"' in script
    assert "--headless --data-parallel-start-rank 8" in other and "--headless" not in head


def test_a_qk_norm_over_all_heads_adds_a_tp_all_reduce_per_layer():
    """MiniMax-M2 norms q and k over every head: under TP each rank holds a slice of the heads, so
    vLLM all-reduces the sums of squares (MiniMaxText01RMSNormTP.forward_qk) before scaling."""
    from servopt.costmodels.architectures import resolve_model
    from servopt.costmodels.hardware import get_gpu
    from servopt.costmodels.profile import PerformanceProfile

    gpu = get_gpu("b200")
    profile = PerformanceProfile.spec_default(gpu)
    minimax = resolve_model("MiniMaxAI/MiniMax-M2.5").spec
    per_head = minimax.model_copy(update={"qk_norm_across_heads": False})
    assert minimax.qk_norm_across_heads

    def comm_s(spec, tp):
        cost = StepCostModel(spec, gpu, profile, quantization="fp8", tp=tp, vllm_version="0.19.0")
        return cost.step(Batch(decode_context=[1024] * 4)).operators_s["tp_pp_communication"]

    assert comm_s(minimax, 2) > 1.3 * comm_s(per_head, 2)  # a third all-reduce beside the two of every layer
    assert comm_s(minimax, 1) == comm_s(per_head, 1) == 0.0
