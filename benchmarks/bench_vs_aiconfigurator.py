"""The same job in servopt and in aiconfigurator 0.12.0, CPU time measured in one run.

Llama-3.1-70B on at most 8 x H200, ISL 4000 / OSL 500, TTFT 1 s, TPOT 50 ms, vLLM. servopt runs
``servopt optimize`` on that workload (Poisson arrivals at 4 req/s, servopt's default search space,
budget and re-check); aiconfigurator runs ``aiconfigurator cli default`` (its aggregated and
disaggregated search on 8 GPUs, vLLM backend) on the same model configuration (written from servopt's
catalog copy of the model's config.json, as aiconfigurator cannot reach the Hub here). CPU time is the
user + system time of each child process (``resource.getrusage``).

aiconfigurator is looked up in ``$AICONFIGURATOR``, then ``.aic-venv/bin/aiconfigurator`` of this
checkout, then ``PATH``; without it, only servopt's figure is printed. Install it apart from servopt:

    python3 -m venv .aic-venv && .aic-venv/bin/pip install aiconfigurator==0.12.0
    python benchmarks/bench_vs_aiconfigurator.py [--trials 150] [--hypervolume]

With ``--hypervolume`` servopt also runs the job with 4x the trials, and the hypervolume of the
first run's front (re-checked cost and P99 e2e, reference 1.1 x the nadir of both fronts) is
printed as a share of the 4x run's (issue 19: >= 98%, at <= 0.5x aiconfigurator's CPU time).
The model is resolved offline (HF_HUB_OFFLINE=1: servopt's catalog copy), as aiconfigurator's is.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from bench_optimizer_setup import ROOT, cli
from bench_optimizer_hypervolume import hypervolume_2d

WORKLOAD = {
    "model": "meta-llama/Llama-3.1-70B-Instruct",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 4},
                "input_tokens": {"kind": "fixed", "value": 4000}, "output_tokens": {"kind": "fixed", "value": 500}},
    "slo": {"p99_ttft_s": 1.0, "p99_tpot_s": 0.05},
    "gpus": ["h200"],
    "limits": {"max_gpus": 8},
}


def cpu_s(argv: list[str], cwd: str) -> tuple[float, int, str]:
    """User + system CPU seconds of a child process (and its children), its exit code and its
    output's last line."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, done.returncode, (done.stdout.strip().splitlines() or [""])[-1]


def find_aiconfigurator() -> str | None:
    for candidate in (os.environ.get("AICONFIGURATOR"), str(ROOT / ".aic-venv" / "bin" / "aiconfigurator"),
                      shutil.which("aiconfigurator")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def model_folder(directory: Path) -> Path:
    """A local model folder with the config.json servopt's catalog keeps for Llama-3.1-70B."""
    config = json.loads((ROOT / "costmodels" / "data" / "models" / "meta-llama--Llama-3.1-70B.json").read_text())
    config.pop("_servopt")
    config.update(architectures=["LlamaForCausalLM"], rms_norm_eps=config.get("rms_norm_eps", 1e-5),
                  hidden_act=config.get("hidden_act", "silu"))
    folder = directory / "Llama-3.1-70B"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def optimize(tmp: str, trials: int) -> tuple[float, np.ndarray]:
    """servopt's CPU seconds for the job with ``trials``, and its front's (cost, P99 e2e) points."""
    path = Path(tmp) / f"llama70b-h200-{trials}.yaml"
    path.write_text(yaml.safe_dump({**WORKLOAD, "budget": {"trials": trials}}))
    out = Path(tmp) / f"servopt-{trials}"
    seconds, code, _ = cpu_s(cli(["optimize", str(path), "--out", str(out), "--no-progress", "--json"]), tmp)
    front = pd.read_csv(out / "pareto.csv") if code in (0, 2) and (out / "pareto.csv").exists() else pd.DataFrame()
    points = front[["cost_usd_per_hour", "p99_e2e_s"]].to_numpy(dtype=float) if len(front) else np.zeros((0, 2))
    print(f"servopt optimize, {trials} trials: {seconds:.1f} CPU s (exit {code}, front of {len(points)})")
    return seconds, points


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=150)
    parser.add_argument("--hypervolume", action="store_true", help="also run 4x the trials and compare the fronts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours, front = optimize(tmp, args.trials)
        if args.hypervolume:
            _, larger = optimize(tmp, 4 * args.trials)
            both = np.vstack([front, larger])
            if len(both) and len(larger):
                reference = 1.1 * both.max(axis=0)
                share = hypervolume_2d(front, reference) / hypervolume_2d(larger, reference)
                print(f"front hypervolume {share:.1%} of the {4 * args.trials}-trial run's (goal >= 98%)")
        aic = find_aiconfigurator()
        if aic is None:
            print("aiconfigurator not installed (see the module docstring): no comparison")
            return
        theirs, code, _ = cpu_s([aic, "cli", "default", "--model-path", str(model_folder(Path(tmp))), "--total-gpus", "8",
                                 "--system", "h200_sxm", "--backend", "vllm", "--isl", "4000", "--osl", "500",
                                 "--ttft", "1000", "--tpot", "50", "--save-dir", f"{tmp}/aic"], tmp)
        print(f"aiconfigurator cli default: {theirs:.1f} CPU s (exit {code})")
        print(f"servopt / aiconfigurator CPU time: {ours / theirs:.2f}x; goal <= 0.5x: "
              f"{'PASS' if ours <= 0.5 * theirs else 'FAIL'}")


if __name__ == "__main__":
    main()
