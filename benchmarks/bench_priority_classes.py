"""Two tenant classes at high load on one H100: what vLLM's priority scheduling buys the interactive
class, and what the batch class pays, in the simulation, the analytic estimate, predict and optimize.

Workload (Llama-3.1-8B, bf16, one H100, calibrated profile): Poisson arrivals, half of them ``chat``
(priority 0; prompts lognormal mean 512, outputs mean 128; SLO P99 TTFT 0.5 s), half ``batch``
(priority 1; prompts mean 2048, outputs mean 256). Two loads:

- A: ``max_num_seqs`` 64 at 17 req/s: the sequence slots are the bottleneck (about 90% busy), the KV
  cache is not, so the waiting queue is where priority acts (no preemption);
- B: vLLM's default limits at 21 req/s: the KV cache runs full now and then, and vLLM preempts the
  lowest-priority running request.

Each is simulated at 8,000 requests with three seeds (the spread shows how noisy P99s near saturation
are); then ``servopt predict --json`` prints the per-class block and a small ``servopt optimize`` job
(policy searched, replicas pinned to 1) shows per-class P99s on its front.

    python benchmarks/bench_priority_classes.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas
import yaml

from servopt.calibration.registry import load_profile
from servopt.costmodels.architectures import get_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.serving import Traffic, estimate, simulate
from servopt.results import FrontPoint

CLASSES = [
    {"name": "chat", "share": 0.5, "priority": 0,
     "input_tokens": {"kind": "lognormal", "mean": 512, "sigma": 0.6, "max": 8192},
     "output_tokens": {"kind": "lognormal", "mean": 128, "sigma": 0.6, "max": 2048}, "slo": {"p99_ttft_s": 0.5}},
    {"name": "batch", "share": 0.5, "priority": 1,
     "input_tokens": {"kind": "lognormal", "mean": 2048, "sigma": 0.5, "max": 8192},
     "output_tokens": {"kind": "lognormal", "mean": 256, "sigma": 0.5, "max": 2048}},
]
LOADS = {"A: max_num_seqs 64, 17 req/s": (17.0, 64), "B: vLLM defaults, 21 req/s": (21.0, None)}
SEEDS = (0, 1, 2)
REQUESTS = 8000


def traffic(rate: float) -> Traffic:
    return Traffic.model_validate({"arrival": {"kind": "poisson", "rate_per_s": rate}, "classes": CLASSES})


def deployment(policy: str, max_num_seqs: int | None) -> Deployment:
    return Deployment(gpu="h100", max_model_len=16384, scheduling_policy=policy, max_num_seqs=max_num_seqs)


def simulated(rate: float, seqs: int | None) -> dict:
    """Per policy and class: P99 TTFT, TPOT, e2e and preemptions of each seed."""
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    profile = load_profile(gpu, None)
    out = {}
    for policy in ("fcfs", "priority"):
        for seed in SEEDS:
            s = simulate(model, deployment(policy, seqs), traffic(rate), gpu, profile, num_requests=REQUESTS,
                         seed=seed).summary
            for c in s.classes:
                row = out.setdefault((policy, c.name), {"ttft": [], "tpot": [], "e2e": [], "preempted": [],
                                                        "saturated": []})
                row["ttft"].append(c.ttft_s.p99)
                row["tpot"].append(c.tpot_s.p99)
                row["e2e"].append(c.e2e_s.p99)
                row["preempted"].append(c.preemptions)
                row["saturated"].append(s.saturated)
    return out


def estimated(rate: float, seqs: int | None) -> dict:
    model, gpu = get_model("llama-3.1-8b"), get_gpu("h100")
    profile = load_profile(gpu, None)
    out = {}
    for policy in ("fcfs", "priority"):
        s = estimate(model, deployment(policy, seqs), traffic(rate), gpu, profile).summary
        for c in s.classes:
            out[policy, c.name] = c.ttft_s.p99
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.3f} [{min(values):.3f}-{max(values):.3f}]"


def run_cli(args: list[str]) -> str:
    done = subprocess.run([sys.executable, "-m", "servopt.optimizer", *args], capture_output=True, text=True,
                          check=True)
    return done.stdout


def main() -> None:
    for label, (rate, seqs) in LOADS.items():
        start = time.perf_counter()
        sim, est = simulated(rate, seqs), estimated(rate, seqs)
        print(f"\n{label}: simulated P99s (median [min-max] of seeds {SEEDS}, {REQUESTS} requests each; "
              f"{time.perf_counter() - start:.0f} s)")
        print(f"{'policy':9}{'class':7}{'P99 TTFT s':>24}{'P99 TPOT s':>24}{'P99 e2e s':>24}{'preempted':>11}"
              f"{'estimate P99 TTFT s':>21}")
        for (policy, name), row in sim.items():
            sat = " (saturated in a seed)" if any(row["saturated"]) else ""
            print(f"{policy:9}{name:7}{spread(row['ttft']):>24}{spread(row['tpot']):>24}{spread(row['e2e']):>24}"
                  f"{statistics.median(row['preempted']):>11.0f}{est[policy, name]:>21.3f}{sat}")
        for name in ("chat", "batch"):
            before = statistics.median(sim["fcfs", name]["ttft"])
            after = statistics.median(sim["priority", name]["ttft"])
            print(f"  {name}: P99 TTFT {before:.3f} s under fcfs -> {after:.3f} s under priority ({after / before:.2f}x)")

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        rate, seqs = LOADS["A: max_num_seqs 64, 17 req/s"]
        workload = {"model": "llama-3.1-8b",
                    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": rate}, "classes": CLASSES},
                    "gpus": ["h100"],
                    "space": {"tp": 1, "mode": "aggregated", "quantization": "bf16", "kv_cache_dtype": "auto",
                              "speculation": "off", "replicas": 1, "max_num_seqs": [48, 64, 96],
                              "max_num_batched_tokens": 8192, "enable_chunked_prefill": True},
                    "budget": {"trials": 12}, "fidelity": {"search_requests": 3000, "final_requests": 8000}}
        (root / "w.yaml").write_text(yaml.safe_dump(workload))
        (root / "d.yaml").write_text(yaml.safe_dump({"gpu": "h100", "max_model_len": 16384, "max_num_seqs": seqs,
                                                     "scheduling_policy": "priority"}))
        result = json.loads(run_cli(["predict", str(root / "w.yaml"), "--deployment", str(root / "d.yaml"),
                                     "--requests", str(REQUESTS), "--json"]))
        print(f"\nservopt predict --json (priority, load A, seed 0): classes "
              + ", ".join(f"{n}: P99 TTFT {c['ttft_s']['p99']:.3f} s, TPOT {c['tpot_s']['p99']:.4f} s, goodput "
                          f"{c['goodput_requests_per_s']:.2f} req/s" for n, c in result["classes"].items()))
        run_cli(["optimize", str(root / "w.yaml"), "--out", str(root / "job")])
        trials = pandas.read_csv(root / "job" / "trials.csv")
        print("servopt optimize (load A; policy and max_num_seqs searched, one replica; chat's SLO enforced): trials")
        for (policy, seqs), group in trials.groupby(["scheduling_policy", "max_num_seqs"]):
            row = group.iloc[0]  # points drawn twice are scored once
            print(f"  {policy:8} max_num_seqs {seqs:3}: {len(group)} trial(s), {row['fidelity']}, "
                  f"{'feasible' if row['feasible'] else 'infeasible'}; chat P99 TTFT {row['p99_ttft_s[chat]']:.3f} s, "
                  f"batch {row['p99_ttft_s[batch]']:.3f} s" + (f"; {row['reason']}" if not row["feasible"] else ""))
        front = json.loads((root / "job" / "front.json").read_text())
        print("  front (re-checked):")
        for point in front["points"]:
            d, m = FrontPoint.model_validate(point).deployment.spec, point["class_metrics"]
            print(f"  trial {point['trial']}: {d.scheduling_policy:8} max_num_seqs {d.max_num_seqs:3}  "
                  f"chat P99 TTFT {m.get('p99_ttft_s[chat]', float('nan')):.3f} s  "
                  f"batch P99 TTFT {m.get('p99_ttft_s[batch]', float('nan')):.3f} s  "
                  f"${point['metrics']['cost_usd_per_hour']:.2f}/h")


if __name__ == "__main__":
    main()
