import math

import pytest

from servopt.costmodels.architectures import get_model
from servopt.costmodels.capacity import replica_capacity, replicas_needed
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.memory import plan_memory
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.roofline import StepCostModel


def test_seed_example_three_gpus_then_four_with_redundancy():
    # Seed 7.4: 10 QPS x 5 s / 20 concurrent = 2.5 -> 3 GPUs; +30% redundancy -> 4.
    assert replicas_needed(10, 5.0, 20) == 3
    assert replicas_needed(10, 5.0, 20, redundancy=0.3) == 4


def test_exact_multiple_does_not_round_up_on_float_noise():
    assert replicas_needed(0.1 * 3, 10.0, 1.0) == 3
    assert replicas_needed(0, 5.0, 20) == 1


@pytest.mark.parametrize("args", [(-1, 5, 20), (10, -5, 20), (10, 5, 0), (10, 5, 20, -0.1)])
def test_bad_inputs_raise(args):
    with pytest.raises(InputError):
        replicas_needed(*args)


def test_replica_capacity_littles_law():
    gpu = get_gpu("h100")
    model = get_model("llama-3.1-8b")
    cost = StepCostModel(model, gpu, PerformanceProfile.spec_default(gpu))
    plan = plan_memory(model, gpu, max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=4096)
    cap = replica_capacity(cost, plan, mean_input_tokens=1000, mean_output_tokens=200, max_num_seqs=64,
                           max_num_batched_tokens=4096)
    assert cap.concurrency == 64 and not cap.kv_limited
    decode = cost.decode_step_time_s(64, 1100)
    assert cap.occupancy_s == pytest.approx(cost.prefill_time_s(1000, 4096) + 200 * decode)
    assert cap.requests_per_s == pytest.approx(64 / cap.occupancy_s)
    assert cap.replicas_for(10 * cap.requests_per_s) == 10


def test_replica_capacity_kv_limited_on_a_small_gpu():
    gpu = get_gpu("l4")
    model = get_model("llama-3.1-8b")
    cost = StepCostModel(model, gpu, PerformanceProfile.spec_default(gpu), "fp8")
    plan = plan_memory(model, gpu, quantization="fp8", max_num_seqs=512, max_num_batched_tokens=2048,
                       max_model_len=8192)
    cap = replica_capacity(cost, plan, mean_input_tokens=6000, mean_output_tokens=500, max_num_seqs=512,
                           max_num_batched_tokens=2048)
    assert cap.kv_limited and cap.concurrency < 512
    assert math.isclose(cap.concurrency, plan.kv_capacity_tokens / float(plan.kv_tokens_needed(6500)))
