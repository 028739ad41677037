"""Accuracy of the fused-MoE kernel family on shapes and formats its fit never saw.

Run: ``python benchmarks/bench_moe_kernels.py`` (5-10 minutes on two cores).

Data: ``calibration/measured/kernel/aic_vllm_moe_perf.csv`` (aiconfigurator-core 0.12.0's vLLM MoE
tables: H100, H200, B200, A100; provenance in calibration/measured/PROVENANCE.md). Three checks,
each printing median and p90 absolute % error of one MoE layer's latency:

1. held-out shapes: each (GPU, weight format) fitted on 70% of the model shapes (hidden,
   intermediate, experts, top-k; every token count and TP/EP split of a shape held out together),
   scored on the other 30% (what ``scripts/fit_shipped_profiles.py`` writes into ``fit_report``);
2. leave one model shape out: for every shape of the gpt-oss (mxfp4) and 16-bit tables, fitted on all
   the other shapes of that GPU and format, scored on it;
3. leave one format out: a format's rows predicted by the entry that stands in for it when a GPU's
   tables lack it (``MOE_FALLBACK``: fp8 by block fp8, mxfp4 by int4 Marlin, ...), with the
   format's own bytes per weight and tensor-core math.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import pandas as pd

from servopt.calibration.fit import MOE_WEIGHT_BYTES, MoeFit, abs_pct_error, fit_profile, moe_row_shapes
from servopt.calibration.tables import read_kernel_table
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import MOE_FALLBACK, PerformanceProfile

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "calibration" / "measured" / "kernel" / "aic_vllm_moe_perf.csv"
GPUS = ("h100", "h200", "b200", "a100-80gb")
SHAPE = ["hidden_size", "inter_size", "num_experts", "topk"]
LEAVE_ONE_OUT_FORMATS = ("mxfp4", "bf16")


def errors(frame: pd.DataFrame) -> str:
    e = frame["abs_pct_error"]
    return f"{len(e):5d} rows  median {np.median(e):5.1f}%  p90 {np.percentile(e, 90):5.1f}%"


def predict(profile: PerformanceProfile, gpu, kernel: str, rows: pd.DataFrame) -> np.ndarray:
    shape = moe_row_shapes(rows)
    return profile.moe_time_s(gpu, kernel, shape["pairs"], shape["touched"], shape["hidden"], shape["inter"],
                              MOE_WEIGHT_BYTES.get(kernel, 2.0)) * 1e3


def leave_one_shape_out(table: pd.DataFrame, gpu, kernel: str) -> pd.DataFrame:
    fitter = MoeFit(kernel)
    rows = fitter.select(table[table["gpu"] == gpu.name])
    shapes = rows[SHAPE].drop_duplicates().itertuples(index=False)
    out = []
    base = PerformanceProfile.spec_default(gpu)
    for shape in shapes:
        held = (rows[SHAPE] == pd.Series(shape._asdict())).all(axis=1).to_numpy()
        profile = fitter.fit(base, gpu, rows[~held])
        part = rows[held]
        out.append(part.assign(abs_pct_error=abs_pct_error(predict(profile, gpu, kernel, part), part["latency_ms"]),
                               shape="/".join(str(int(v)) for v in shape)))
    return pd.concat(out) if out else rows.assign(abs_pct_error=np.nan, shape="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE)
    args = parser.parse_args()
    start = time.perf_counter()
    table = read_kernel_table(args.table)
    pd.set_option("display.width", 200)
    profiles = {}
    print("1. held-out model shapes (30% of each GPU's shapes per format)")
    for name in GPUS:
        gpu = get_gpu(name)
        outcome = fit_profile(table, gpu, "vllm", 0.3)
        profiles[name] = outcome.profile
        for (family, split), part in outcome.predictions.groupby(["family", "split"]):
            if split == "held_out":
                print(f"  {name:10s} {family:16s} {errors(part)}   kernel {outcome.profile.moe[family[4:]].kernel}")
    print("\n2. leave one model shape out (hidden/intermediate/experts/top-k; fitted on the other shapes)")
    for name in GPUS:
        gpu = get_gpu(name)
        for kernel in LEAVE_ONE_OUT_FORMATS:
            result = leave_one_shape_out(table, gpu, kernel)
            if result["abs_pct_error"].notna().any():
                worst = result.groupby("shape")["abs_pct_error"].median().sort_values()
                print(f"  {name:10s} moe_{kernel:12s} {errors(result)}   worst shape {worst.index[-1]} "
                      f"({worst.iloc[-1]:.0f}% median), {len(worst)} shapes")
    print("\n3. leave one format out (a format predicted by the entry standing in for it)")
    for name in GPUS:
        gpu, profile = get_gpu(name), profiles[name]
        for kernel in sorted(profile.moe):
            stand_in = next((k for k in MOE_FALLBACK.get(kernel, ()) if k in profile.moe), None)
            if stand_in is None:
                continue
            rows = MoeFit(kernel).select(table[table["gpu"] == name])
            without = profile.model_copy(update={"moe": {k: v for k, v in profile.moe.items() if k != kernel}})
            scored = rows.assign(abs_pct_error=abs_pct_error(predict(without, gpu, kernel, rows), rows["latency_ms"]))
            print(f"  {name:10s} moe_{kernel:12s} by {stand_in:10s} {errors(scored)}")
    print(f"\n{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
