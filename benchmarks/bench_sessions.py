"""Multi-turn sessions: how much of their prompts the prefix cache serves, against the KV pool and
the fleet, in the simulation (per-engine free block queue, :mod:`servopt.costmodels.serving.prefix_cache`)
and in the analytic estimate (hits within the cache's retention time).

Llama-3.1-8B on H100: conversations of the ShareGPT preset's lengths start at 3 per second, 1-8 turns
(uniform), exponential think time of mean 20 s; the KV pool is vLLM's default (about 45 GiB) or set
smaller with ``kv_cache_memory_gib``; prefix caching on and off; one replica, and two replicas behind
round robin (vLLM's routers do not follow sessions, so a turn lands on the other replica half the
time). Prints the share of prompt tokens served from the cache (and the most the history allows), P99
TTFT and preemptions.

    python benchmarks/bench_sessions.py
"""

from __future__ import annotations

import time

from servopt.calibration.registry import load_profile
from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.serving import Traffic, estimate, simulate

REQUESTS = 6000
TRAFFIC = Traffic.model_validate({
    "arrival": {"kind": "sessions", "rate_per_s": 3, "turns": {"kind": "uniform", "low": 1, "high": 8},
                "think_time": {"kind": "exponential", "mean_s": 20}},
    "input_tokens": {"kind": "dataset", "name": "sharegpt"}, "output_tokens": {"kind": "dataset", "name": "sharegpt"}})
CASES = [
    ("default KV pool", {}),
    ("KV pool 20 GiB", {"kv_cache_memory_gib": 20.0}),
    ("KV pool 10 GiB", {"kv_cache_memory_gib": 10.0}),
    ("KV pool 6 GiB", {"kv_cache_memory_gib": 6.0}),
    ("prefix caching off", {"enable_prefix_caching": False}),
    ("2 replicas, round robin", {"replicas": 2, "router": "round_robin"}),
]


def main() -> None:
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    profile = load_profile(gpu, None)
    print(f"{'':26}{'cached share of prompt tokens':>32}{'P99 TTFT s':>22}{'preempted':>11}{'sim s':>7}")
    print(f"{'':26}{'simulated':>12}{'(history)':>10}{'estimate':>10}{'simulated':>11}{'estimate':>11}")
    for label, fields in CASES:
        d = Deployment(gpu="h100", max_model_len=16384, **fields)
        start = time.perf_counter()
        result = simulate(model, d, TRAFFIC, gpu, profile, num_requests=REQUESTS, seed=0)
        seconds = time.perf_counter() - start
        frame, s = result.requests, result.summary
        note = next(n for n in s.notes if "conversations" in n)
        history = note.split("the history is ")[1].split("%")[0] + "%" if "history is" in note else "-"
        e = estimate(model, d, TRAFFIC, gpu, profile).summary
        hit = next((n.split("engine: ")[1].split(" of")[0] for n in e.notes if "engine: " in n), "0%")
        print(f"{label:26}{frame['cached_tokens'].sum() / frame['input_tokens'].sum():>12.0%}{history:>10}{hit:>10}"
              f"{s.ttft_s.p99:>11.3f}{e.ttft_s.p99:>11.3f}{s.preemptions:>11}{seconds:>7.1f}"
              + ("  (saturated)" if s.saturated else ""))


if __name__ == "__main__":
    main()
