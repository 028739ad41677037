"""Cost: $/hour for GPUs used or whole nodes rented, $ per million output tokens and per million
tokens (input + output)."""

import pytest
from _optimizer_fixtures import TINY, compiled_record

from servopt.costmodels.deployment import Deployment
from servopt.costmodels.serving.compiled import num_nodes
from servopt.optimizer._evaluate import Evaluator
from servopt.optimizer._problem import build_problem
from servopt.optimizer.workload import parse_workload
from servopt.results import launch_plan

# Three TP1 prefill instances and one TP8 decode instance: 11 GPUs.
PD = {"gpu": "h100", "disaggregation": {"prefill_instances": 3, "prefill_tp": 1, "decode_instances": 1,
                                        "decode_tp": 8}, "max_num_seqs": 64, "max_num_batched_tokens": 4096}


@pytest.mark.parametrize("spec, node, nodes", [
    (PD, 8, 2),
    ({"gpu": "h100", "tp": 2, "replicas": 3}, 8, 1),
    ({"gpu": "h100", "tp": 2, "replicas": 5}, 8, 2),
    ({"gpu": "h100", "tp": 4, "replicas": 3}, 4, 3),
    ({"gpu": "h100", "tp": 8, "pp": 2, "replicas": 2}, 8, 4),
    ({**PD, "replicas": 2}, 8, 4),
])
def test_nodes_as_export_places_the_instances(spec, node, nodes):
    d = Deployment.model_validate({**spec, "max_num_seqs": 64, "max_num_batched_tokens": 4096})
    assert num_nodes(d, node) == nodes
    record = compiled_record({"serve_id": "meta-llama/Llama-3.1-8B-Instruct",
                              "deployment": {**d.model_dump(mode="json"), "quantization": "bf16"}}, gpus_per_node=node)
    assert record.num_nodes == nodes and launch_plan(record)["num_nodes"] == nodes


def evaluator(**changes):
    return Evaluator(build_problem(parse_workload({**TINY, **changes}, "test")))


SUMMARY = {"input_tokens_per_s": 3000.0, "output_tokens_per_s": 1000.0}


def test_whole_nodes_rent_every_gpu_of_each_node():
    d = Deployment.model_validate(PD)
    per_gpu = evaluator(pricing={"whole_nodes": False}).cost(d, SUMMARY)
    whole = evaluator(pricing={"whole_nodes": True}).cost(d, SUMMARY)
    price = per_gpu["cost_usd_per_hour"] / 11
    assert d.num_gpus == 11 and per_gpu["gpus_rented"] == 11 and whole["gpus_rented"] == 16
    assert whole["cost_usd_per_hour"] == pytest.approx(16 * price)


def test_a_gpu_priced_by_its_node_rents_whole_nodes_unless_told_otherwise():
    # H100: the price of Lambda's 8-GPU instance; H200: RunPod's price of one GPU.
    five_tp2 = {"tp": 2, "replicas": 5, "max_num_seqs": 64, "max_num_batched_tokens": 4096}
    default = evaluator(gpus=["h100", "h200"])
    h100 = default.cost(Deployment.model_validate({"gpu": "h100", **five_tp2}), SUMMARY)
    h200 = default.cost(Deployment.model_validate({"gpu": "h200", **five_tp2}), SUMMARY)
    assert (h100["gpus_rented"], h200["gpus_rented"]) == (16, 10)
    per_gpu = evaluator(gpus=["h100"], pricing={"whole_nodes": False})
    assert per_gpu.cost(Deployment.model_validate({"gpu": "h100", **five_tp2}), SUMMARY)["gpus_rented"] == 10


def test_per_million_output_tokens_and_all_tokens():
    costs = evaluator().cost(Deployment(gpu="h100", tp=2), SUMMARY)
    hourly = costs["cost_usd_per_hour"]
    assert costs["cost_usd_per_output_mtoken"] == pytest.approx(hourly / (1000 * 3600 / 1e6))
    assert costs["cost_usd_per_total_mtoken"] == pytest.approx(hourly / (4000 * 3600 / 1e6))


def test_before_a_prediction_the_offered_load_prices_tokens():
    # TINY offers 8 requests/s of 512 input and 128 output tokens.
    costs = evaluator().cost(Deployment(gpu="h100"), None)
    assert costs["cost_usd_per_output_mtoken"] == pytest.approx(costs["cost_usd_per_hour"] / (8 * 128 * 3600 / 1e6))
    closed = evaluator(traffic={**TINY["traffic"], "arrival": {"kind": "closed_loop", "concurrency": 8}})
    assert closed.cost(Deployment(gpu="h100"), None)["cost_usd_per_output_mtoken"] is None


def test_the_old_cost_name_asks_which_tokens():
    from servopt.costmodels.errors import InputError

    with pytest.raises(InputError, match="usd_per_output_mtoken .*usd_per_total_mtoken"):
        parse_workload({**TINY, "objective": {"cost": "usd_per_mtoken"}}, "test")
