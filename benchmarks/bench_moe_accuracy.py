"""Predicted against measured MoE serving runs: tensor, data and expert parallelism.

Run: ``python benchmarks/bench_moe_accuracy.py [--public CSV] [--shared DIR]`` (about a minute on two
cores). Every run of ``calibration/measured/e2e/vllm_bench_public.csv`` (provenance in
``calibration/measured/PROVENANCE.md``) and of ``../shared/data/measured/e2e/vllm_bench_a100_dennislee22.csv``
whose model servopt knows is simulated as it was measured, with the profile
``calibration.registry.load_profile`` gives its GPU; nothing here is fitted to these runs. The script
prints every row and the median absolute % error of mean TTFT, mean TPOT, P99 TPOT and output
throughput per group (model, GPU, layout), and lists the MoE runs it cannot predict, with why.

How each source is simulated (stated once; none of it is tuned):

- Scicom llm-benchmaxxing (gpt-oss-120b on 8x H100 / H200 / B200, TP8 or TP4 x DP2): one burst of
  100 fixed-length random prompts at concurrency 100 (a closed loop of 100 clients, one request
  each), ``--ignore-eos``; vLLM defaults of the run (an unpinned install of 2026-01-28: 0.15 is
  assumed), ``--gpu-memory-utilization 0.9`` and ``--max-num-seqs 256`` as the tool's examples use.
  ``--data-parallel-size 2`` without ``--enable-expert-parallel``: the experts are tensor-parallel
  over all 8 GPUs and the two ranks step in lockstep. The H200 runs served a fine-tune of the same
  architecture. B200 has no calibrated profile (spec defaults).
- surajssd DeepSeek-V2.5 (16x A100-40GB, TP8 x PP2 over two nodes, vLLM 0.8.3 V0): each request's
  ShareGPT lengths from the run's JSON, Poisson arrivals at the run's rate (5 seeds, median
  prediction), chunked prefill off (so the token budget is the 8192-token context), prefix caching on
  (runs after the session's first find their prompts cached, as ``bench_e2e_accuracy.py`` explains),
  the inter-node link of ``bench_e2e_accuracy.py`` (25 GB/s InfiniBand per GPU, 2 GB/s TCP without).
  ``--enforce-eager`` is not modelled (no CUDA graphs: more launch overhead than predicted).
- dennislee22 (gpt-oss-120b, TP4 over four single-GPU pods on different nodes, A100 80GB, vLLM
  0.10.1.1): bursts of N prompts at once (a closed loop of N clients, one request each) at the
  measured mean lengths; the pods' link is not stated, so the TCP figure above (2 GB/s) is used.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from servopt.calibration.registry import load_profile
from servopt.costmodels.architectures import resolve_model
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.serving import Traffic, simulate

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "calibration" / "measured" / "e2e" / "vllm_bench_public.csv"
SHARED = ROOT.parent / "shared" / "data" / "measured" / "e2e"
MOE_MODELS = re.compile(r"gpt-oss|GLM|MiniMax|DeepSeek|Kimi|Qwen3-\d+B-A\d+B|Mixtral", re.IGNORECASE)
GPUS = (("B200", "b200"), ("H200", "h200"), ("H100", "h100"), ("A100-SXM4-40GB", "a100-40gb"), ("A100", "a100-80gb"))
IB_GBPS, TCP_GBPS = 25.0, 2.0
SCICOM_VLLM = "0.15.0"
SEEDS = 5
WARM_PREFIX = 0.999  # every full block of a prompt hits the prefix cache


def gpu_name(text: str) -> str | None:
    return next((name for fragment, name in GPUS if fragment in text), None)


def model_of(text: str) -> str:
    """The model id a row names (the first word; the Scicom fine-tune is gpt-oss-120b's architecture)."""
    first = text.split()[0]
    return "openai/gpt-oss-120b" if "gpt-oss-120b" in first else first


def pct_error(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured if measured and math.isfinite(predicted) else math.nan


def burst(n: int, input_tokens: int, output_tokens: int) -> Traffic:
    return Traffic.model_validate({"arrival": {"kind": "closed_loop", "concurrency": n, "requests_per_client": 1},
                                   "input_tokens": {"kind": "fixed", "value": input_tokens},
                                   "output_tokens": {"kind": "fixed", "value": output_tokens}})


def trace(folder: Path, name: str, rate: float, inputs: list[int], outputs: list[int], seed: int,
          warm: bool) -> Traffic:
    n = len(inputs)
    if math.isfinite(rate):
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, n)
        arrival = np.cumsum(gaps) - gaps[0]
    else:
        arrival = np.zeros(n)
    path = folder / f"{name}_{seed}.csv"
    pd.DataFrame({"arrival_s": arrival, "input_tokens": inputs, "output_tokens": outputs}).to_csv(path, index=False)
    return Traffic.model_validate({"arrival": {"kind": "trace", "path": str(path)},
                                   "shared_prefix_fraction": WARM_PREFIX if warm else 0.0})


def plan_row(row: dict, source: str, folder: Path, index: int) -> tuple[list[Traffic], Deployment] | str:
    """The traffics (one per arrival seed) and the deployment of a measured run, or why it cannot be simulated."""
    gpu = gpu_name(row["gpu"])
    if gpu is None:
        return f"GPU not in servopt's catalog: {row['gpu'][:40]}"
    variant = str(row["variant"])
    if source == "scicom":
        dp = 2 if "DP2" in variant else 1
        deployment = Deployment(gpu=gpu, tp=int(row["tp"]), data_parallel_size=dp, max_num_seqs=256,
                                gpu_memory_utilization=0.9, vllm_version=SCICOM_VLLM)
        return [burst(int(row["num_prompts"]), int(row["input_len"]), int(row["output_len"]))], deployment
    if source == "surajssd":
        match = re.search(r"vllm_bench_runs/(\S+\.json)", row["source_url_or_ref"])
        if match is None:
            return "per-request lengths not committed"
        run = json.loads((PUBLIC.parent / "vllm_bench_runs" / match.group(1)).read_text())
        rate = float(row["request_rate"])
        deployment = Deployment(gpu=gpu, tp=int(row["tp"]), pp=int(row["pp"]), max_model_len=8192,
                                max_num_batched_tokens=8192, max_num_seqs=256, enable_chunked_prefill=False,
                                gpu_memory_utilization=0.9, vllm_version="0.8.3",
                                internode_gbps=TCP_GBPS if "no IB" in variant else IB_GBPS)
        seeds = SEEDS if math.isfinite(rate) else 1
        return [trace(folder, f"row{index}", rate, run["input_lens"], run["output_lens"], seed, warm=rate != 1.0)
                for seed in range(seeds)], deployment
    # dennislee22: bursts of N prompts at their measured mean lengths, TP over pods on separate nodes.
    deployment = Deployment(gpu=gpu, tp=int(row["tp"]), max_model_len=16384, gpu_memory_utilization=0.9,
                            vllm_version="0.10.1.1", internode_gbps=TCP_GBPS)
    return [burst(int(row["num_prompts"]), round(float(row["input_len"])), round(float(row["output_len"])))], deployment


def predict(model: str, traffics: list[Traffic], deployment: Deployment, gpus_per_node: int | None) -> dict:
    gpu = get_gpu(deployment.gpu)
    if gpus_per_node:  # pods on separate nodes: every TP group spans nodes
        gpu = gpu.model_copy(update={"gpus_per_node": gpus_per_node})
    resolved = resolve_model(model)
    if deployment.quantization is None and resolved.quantization:
        deployment = deployment.model_copy(update={"quantization": resolved.quantization})
    profile = load_profile(gpu)
    summaries = [simulate(resolved.spec, deployment, t, gpu, profile, seed=seed).summary
                 for seed, t in enumerate(traffics)]

    def median(get) -> float:
        return float(np.median([get(s) for s in summaries]))

    return {"pred_mean_ttft_ms": median(lambda s: s.ttft_s.mean) * 1e3,
            "pred_mean_tpot_ms": median(lambda s: s.tpot_s.mean) * 1e3,
            "pred_p99_tpot_ms": median(lambda s: s.tpot_s.p99) * 1e3,
            "pred_output_throughput": median(lambda s: s.output_tokens_per_s),
            "calibrated": profile.calibrated}


def rows_to_predict(public: Path, shared: Path) -> list[tuple[str, dict]]:
    rows = []
    table = pd.read_csv(public)
    for row in table.to_dict("records"):
        if not MOE_MODELS.search(row["model"]):
            continue
        ref = row["source_url_or_ref"]
        source = "scicom" if "llm-benchmaxxing" in ref else "surajssd" if "surajssd" in ref else "other"
        rows.append((source, row))
    dennis = shared / "vllm_bench_a100_dennislee22.csv"
    if dennis.exists():
        for row in pd.read_csv(dennis).to_dict("records"):
            if MOE_MODELS.search(row["model"]):
                rows.append(("dennislee22", row))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--public", type=Path, default=PUBLIC)
    parser.add_argument("--shared", type=Path, default=SHARED, help="../shared/data/measured/e2e")
    args = parser.parse_args()
    start = time.perf_counter()
    results, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index, (source, row) in enumerate(rows_to_predict(args.public, args.shared)):
            model = model_of(row["model"])
            try:
                resolve_model(model)
            except InputError:
                skipped.append((row["model"].split(" (")[0], "model not in servopt's catalog"))
                continue
            planned = plan_row(row, source, Path(tmp), index) if source != "other" else "run set-up not modelled"
            if isinstance(planned, str):
                skipped.append((row["model"].split(" (")[0], planned))
                continue
            traffics, deployment = planned
            try:
                pred = predict(model, traffics, deployment, 1 if source == "dennislee22" else None)
            except InputError as err:
                skipped.append((row["model"].split(" (")[0], f"servopt rejects it: {err}"))
                continue
            results.append({
                "source": source, "model": model.split("/")[-1], "gpu": deployment.gpu,
                "layout": f"TP{deployment.tp}" + (f"xPP{deployment.pp}" if deployment.pp > 1 else "")
                          + (f"xDP{deployment.data_parallel_size}" if deployment.data_parallel_size > 1 else ""),
                "rate": float(row["request_rate"]), "prompts": int(row["num_prompts"]),
                "in": row["input_len"], "out": row["output_len"],
                "mean_ttft_ms": float(row["mean_ttft_ms"]), "mean_tpot_ms": float(row["mean_tpot_ms"]),
                "p99_tpot_ms": float(row["p99_tpot_ms"]), "output_throughput": float(row["output_throughput"]),
                **pred,
            })
    frame = pd.DataFrame(results)
    for metric in ("mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "output_throughput"):
        frame[f"{metric}_err"] = [pct_error(p, m) for p, m in zip(frame[f"pred_{metric}"], frame[metric])]
    pd.set_option("display.width", 220)
    columns = ["source", "model", "gpu", "layout", "rate", "prompts", "in", "out", "calibrated"]
    for metric in ("mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "output_throughput"):
        columns += [metric, f"pred_{metric}"]
    print(frame[columns].to_string(index=False, float_format=lambda v: f"{v:8.1f}"))
    print("\nmedian |error| % per group (rows):")
    groups = frame.groupby(["model", "gpu", "layout"])
    summary = groups.agg(rows=("source", "size"), **{
        f"{m}": (f"{m}_err", lambda e: float(e.abs().median())) for m in
        ("mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "output_throughput")})
    print(summary.round(1).to_string())
    overall = {m: float(frame[f"{m}_err"].abs().median()) for m in
               ("mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "output_throughput")}
    print("all rows: " + ", ".join(f"{m} {v:.1f}%" for m, v in overall.items()) + f" ({len(frame)} runs)")
    dp = frame[frame.layout.str.contains("DP")]
    if len(dp):
        print("data-parallel rows: " + ", ".join(f"{m} {float(dp[f'{m}_err'].abs().median()):.1f}%"
                                                 for m in overall) + f" ({len(dp)} runs)")
    if skipped:
        print(f"\nnot predicted ({len(skipped)} MoE runs):")
        for (model, why), count in pd.Series(skipped).value_counts().items():
            print(f"  {count:3d} x {model}: {why}")
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
