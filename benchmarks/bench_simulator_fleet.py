"""A fleet simulated through a few replicas fed their share of the arrivals, against every replica.

For fleets of 2, 8 and 32 replicas of Llama-3.1-8B on one H100 each (max_num_seqs 128), behind each
router, at two loads per replica (50% and 80% of one replica's capacity, the analytic estimate's
saturation rate: ``costmodels/capacity.py``),
under Poisson arrivals with the default job's lengths, prints the P99 TTFT, TPOT and end-to-end
latency of the whole-fleet simulation and of the share (same number of requests per simulated
replica, 1,500), their differences, the share's own seed-to-seed difference (seed 1 against seed 0:
the sampling noise the difference should be read against), and the CPU time of each at the
optimizer's 1,500 requests.

    python benchmarks/bench_simulator_fleet.py
"""

from __future__ import annotations

import time

from servopt.costmodels.architectures import get_model
from servopt.costmodels.capacity import replica_capacity
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import PerformanceProfile
from servopt.costmodels.serving import Traffic, compile_deployment, simulate_compiled
from servopt.costmodels.serving.simulator import SIMULATED_REPLICAS

MODEL, GPU = get_model("llama-3.1-8b"), get_gpu("h100")
PROFILE = PerformanceProfile.spec_default(GPU)
LENGTHS = {"input_tokens": {"kind": "lognormal", "mean": 1024, "sigma": 0.6, "max": 8192},
           "output_tokens": {"kind": "lognormal", "mean": 256, "sigma": 0.5, "max": 1024}}
PER_REPLICA_REQUESTS = 1500
SEARCH_REQUESTS = 1500


def traffic(rate: float) -> Traffic:
    return Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": rate}, **LENGTHS})


def cpu(call):
    start = time.process_time()
    result = call()
    return result, time.process_time() - start


def main() -> None:
    base = compile_deployment(MODEL, Deployment(gpu="h100", max_num_seqs=128, max_num_batched_tokens=8192,
                                                max_model_len=9216), GPU, PROFILE)
    cap = replica_capacity(base, traffic(1.0))
    print(f"one replica serves about {cap.requests_per_s:.2f} req/s (its estimated saturation rate); P99 differences are "
          "share minus whole fleet, relative")
    print(f"{'router':18s} {'N':>3s} {'load':>5s} | {'P99 TTFT whole/share':>22s} {'diff':>6s} {'(seed)':>8s} | "
          f"{'P99 TPOT':>17s} {'diff':>6s} {'(seed)':>8s} | {'P99 e2e':>15s} {'diff':>6s} {'(seed)':>8s} | "
          f"CPU s at {SEARCH_REQUESTS} req whole/share")
    worst = 0.0
    for router in ("round_robin", "least_outstanding"):
        for replicas in (2, 8, 32):
            if replicas <= SIMULATED_REPLICAS[router]:
                continue
            fleet = base.with_replicas(replicas)
            fleet = type(fleet)(**{**fleet.__dict__, "deployment": fleet.deployment.model_copy(update={"router": router})})
            for load in (0.5, 0.8):
                tr = traffic(load * cap.requests_per_s * replicas)
                whole = simulate_compiled(fleet, tr, num_requests=PER_REPLICA_REQUESTS * replicas, whole_fleet=True).summary
                kept = min(replicas, SIMULATED_REPLICAS[router])
                share = simulate_compiled(fleet, tr, num_requests=PER_REPLICA_REQUESTS * kept).summary
                reseeded = simulate_compiled(fleet, tr, num_requests=PER_REPLICA_REQUESTS * kept, seed=1).summary
                _, whole_s = cpu(lambda: simulate_compiled(fleet, tr, num_requests=SEARCH_REQUESTS, whole_fleet=True))
                _, share_s = cpu(lambda: simulate_compiled(fleet, tr, num_requests=SEARCH_REQUESTS))
                cells = []
                for metric in ("ttft", "tpot", "e2e"):
                    a, b = getattr(whole, f"{metric}_s").p99, getattr(share, f"{metric}_s").p99
                    noise = getattr(reseeded, f"{metric}_s").p99 / b - 1
                    worst = max(worst, abs(b / a - 1))
                    cells.append(f"{a * 1e3:8.1f}/{b * 1e3:8.1f} ms {b / a - 1:+6.1%} ({noise:+6.1%})")
                print(f"{router:18s} {replicas:3d} {load:5.0%} | " + " | ".join(cells) + f" | {whole_s:6.2f} / {share_s:5.2f}")
    print(f"largest P99 difference: {worst:.1%}")


if __name__ == "__main__":
    main()
