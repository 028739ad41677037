"""The analytic estimate against the discrete-event simulation on the hypervolume benchmark's spaces.

The study screens every candidate with ``estimate`` (queueing formulas) before it simulates, so how
far the estimate is from the simulation decides which candidates get simulated. For every point of
each space of ``bench_optimizer_hypervolume.py`` that the estimate does not call saturated, the
deployment the study would score (derived replica count included) is estimated and simulated at the
optimizer's 1,500 requests, and this prints, per space, the median, p10 and p90 of
``estimate / simulation - 1`` for P99 TTFT, P99 TPOT and P99 end-to-end latency (and its largest
value, over all points and over those the simulation finds within the SLOs: how far the estimate
overestimated a deployment that can be on the front, which bounds the screen's optimistic P99s,
:data:`servopt.optimizer._screen.ESTIMATE_OVERSHOOT`), the share of
points whose SLO verdict (P99 TTFT and TPOT against the targets) the two disagree on, and the CPU
time of each.

    python benchmarks/bench_estimate_accuracy.py [--spaces NAME ...] [--worst N]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bench_optimizer_hypervolume import SPACES, workload_data
from servopt.optimizer._evaluate import Evaluator
from servopt.optimizer._problem import build_problem
from servopt.optimizer.workload import parse_workload
from servopt.results._record import summary_p99

METRICS = ("ttft", "tpot", "e2e")


def compare_space(name: str, worst: int) -> dict[str, list[float]]:
    problem = build_problem(parse_workload(workload_data(name), name))
    evaluator = Evaluator(problem)
    slo = problem.workload.slo
    errors: dict[str, list[float]] = {m: [] for m in METRICS}
    feasible_errors: dict[str, list[float]] = {m: [] for m in METRICS}  # where the simulation meets the SLOs
    verdicts, rows, seen = [], [], set()
    estimate_s = simulate_s = 0.0
    for candidate in problem.space.enumerate():
        start = time.process_time()
        outcome = evaluator.evaluate(candidate, screen=None)
        record = outcome.record
        key = record.deployment.spec.model_dump_json()
        if not (record.simulation and record.estimate) or key in seen:  # drawn points repaired to one scored
            continue
        seen.add(key)
        simulate_s += time.process_time() - start
        compiled = problem.space.compile(problem.space.repair(candidate)).with_replicas(record.replicas)
        start = time.process_time()
        evaluator.engine.estimate(compiled)
        estimate_s += time.process_time() - start
        p99 = {k: {m: summary_p99(getattr(record, k), m) for m in METRICS} for k in ("estimate", "simulation")}
        meets = {k: all(p99[k][m] <= target for m, target in (("ttft", slo.p99_ttft_s), ("tpot", slo.p99_tpot_s))
                        if target is not None) for k in p99}
        for m in METRICS:
            if p99["simulation"][m] > 0 and np.isfinite(p99["estimate"][m]):
                errors[m].append(p99["estimate"][m] / p99["simulation"][m] - 1)
                if meets["simulation"]:
                    feasible_errors[m].append(errors[m][-1])
        verdicts.append(meets["estimate"] != meets["simulation"])
        rows.append((p99["estimate"]["ttft"] / p99["simulation"]["ttft"] - 1, record.deployment.spec.model_dump(mode="json"), p99))
    print(f"{name}: {len(verdicts)} distinct deployments estimated and simulated; CPU {estimate_s:.1f} s for the estimates, "
          f"{simulate_s:.0f} s for the simulations (with the estimate and its checks)")
    for m in METRICS:
        v = np.asarray(errors[m])
        print(f"  P99 {m.upper():4s} estimate / simulation - 1: median {np.median(v):+.1%}, p10 "
              f"{np.percentile(v, 10):+.1%}, p90 {np.percentile(v, 90):+.1%}, |error| p90 "
              f"{np.percentile(np.abs(v), 90):.1%}, max {v.max():+.1%}; max where the simulation meets the SLOs "
              f"{max(feasible_errors[m], default=np.nan):+.1%} ({len(feasible_errors[m])} points)")
    print(f"  SLO verdict (P99 TTFT and TPOT) differs on {np.mean(verdicts):.1%} of the points")
    ordered = sorted(rows, key=lambda r: r[0])
    for error, d, p99 in ordered[:worst] + ordered[len(ordered) - worst:]:
        print(f"    TTFT {error:+.0%}: {d['gpu']} tp{d['tp']} {d['quantization']} kv {d['kv_cache_dtype']} seqs "
              f"{d['max_num_seqs']} tokens {d['max_num_batched_tokens']} chunked {d['enable_chunked_prefill']} x"
              f"{d['replicas']}: estimate {p99['estimate']['ttft']:.3g} s, simulation {p99['simulation']['ttft']:.3g} s")
    return errors


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spaces", nargs="*", default=list(SPACES), choices=list(SPACES))
    parser.add_argument("--worst", type=int, default=0, help="also print the N points with the lowest and the N with the highest TTFT error")
    args = parser.parse_args()
    for name in args.spaces:
        compare_space(name, args.worst)


if __name__ == "__main__":
    main()
