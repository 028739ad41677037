"""Predicted against measured MoE serving runs: tensor, data and expert parallelism.

Run: ``python benchmarks/bench_moe_accuracy.py [--shared DIR]`` (a few minutes on two cores).

The MoE runs of the development corpus (``calibration/corpus.py``: every public ``vllm bench serve``
table of ../shared/data/measured/e2e and calibration/measured/e2e, and the MiniMax-M2.5 silicon rows
of aiperf closed loops; provenance in their PROVENANCE.md files) are simulated as they ran, by the same reader as every other run: the deployment the row
states (``--data-parallel-size`` as data-parallel ranks of one instance, lockstep for an MoE model;
``--enable-expert-parallel`` where given), the vLLM version's defaults, the client's send times and
lengths, and what the session's prefix cache held. Nothing here is fitted to these runs: kernel
efficiencies come from kernel data, and vLLM's host costs are fitted on dense runs only
(``calibration/serving_fit.py`` says why), so every figure is out of sample. The script prints each
run and the median absolute % error of mean TTFT, mean TPOT and P99 TPOT per (model, GPU, layout),
and lists the MoE runs it cannot simulate, with why.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from servopt.calibration.corpus import REPO_E2E, SHARED_E2E, MeasuredRun, load_corpus
from servopt.calibration.registry import load_profile
from servopt.calibration.serving_fit import error_table, predictions
from servopt.costmodels.architectures import resolve_model
from servopt.costmodels.errors import InputError

METRICS = ["mean_ttft_ms", "mean_tpot_ms", "p99_tpot_ms"]


def is_moe(run: MeasuredRun) -> bool:
    try:
        return resolve_model(run.model).spec.moe is not None
    except InputError:
        return False


def layout(run: MeasuredRun) -> str:
    d = run.deployment
    return (f"TP{d.tp}" + (f"xPP{d.pp}" if d.pp > 1 else "") + (f"xDP{d.data_parallel_size}" if d.data_parallel_size > 1 else "")
            + ("+EP" if d.enable_expert_parallel else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=SHARED_E2E, help="../shared/data/measured/e2e")
    args = parser.parse_args()
    start = time.perf_counter()
    runs = [r for r in load_corpus(args.shared, REPO_E2E) if is_moe(r)]
    done = [r for r in runs if not r.skip]
    frame = predictions(done, load_profile, {})
    frame["layout"] = [layout(r) for r in done]
    # vllm bench runs send prompts at a rate; silicon rows are closed loops of a client concurrency.
    frame["rate"] = [r.extra.get("rate", np.nan) for r in done]
    frame["prompts"] = [len(r.extra["inputs"]) if "inputs" in r.extra else np.nan for r in done]
    frame["clients"] = [float(r.extra.get("concurrency") or np.nan) for r in done]
    pd.set_option("display.width", 220)
    columns = ["model", "gpu", "dtype", "layout", "rate", "prompts", "clients", "calibrated"]
    for metric in METRICS:
        columns += [f"measured_{metric}", f"pred_{metric}"]
    print(f"== {len(runs)} MoE runs in the corpus, {len(done)} simulated ==")
    print(frame[columns].to_string(index=False, float_format=lambda v: f"{v:8.1f}"))
    print("\nmedian |error| % (signed: + means predicted slower) per (model, GPU, dtype, layout):")
    table = error_table(frame, ["model", "gpu", "dtype", "layout"], METRICS)
    print(table.to_string(index=False, float_format=lambda v: f"{v:7.1f}"))
    overall = error_table(frame.assign(all="all"), ["all"], METRICS)
    print("all simulated MoE runs: " + ", ".join(
        f"{m} {float(overall[f'{m}_abs'].iloc[0]):.1f}% (signed {float(overall[f'{m}_signed'].iloc[0]):+.1f}%)"
        for m in METRICS) + f" ({len(frame)} runs)")
    dp = frame[frame["layout"].str.contains("DP")]
    if len(dp):
        print("data-parallel runs: " + ", ".join(
            f"{m} {float(np.nanmedian(np.abs(dp[f'pred_{m}'] / dp[f'measured_{m}'] - 1)) * 100):.1f}%" for m in METRICS)
            + f" ({len(dp)} runs)")
    skipped = pd.Series([f"{r.model.split('/')[-1]}: {r.skip}" for r in runs if r.skip])
    if len(skipped):
        print(f"\nnot simulated ({len(skipped)} MoE runs):")
        for reason, count in skipped.value_counts().items():
            print(f"  {count:3d} x {reason}")
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
