"""Accuracy of servopt's calibration against the shared measured data (the figures of issue 4).

Fits each GPU with a shipped calibrated profile on 70% of the kernel shapes (whole (n, k) GEMM shapes,
whole head layouts and whole MoE model shapes held out) of the shared kernel tables and the repository's
(calibration/measured/kernel: more GPUs' tables, fused-MoE tables, public collective timings) and prints the
median / p90 absolute % error on training and held-out shapes per op family; then runs ``servopt validate``
on the memory profiles and on the vLLM rows of the end-to-end table (which needs the serving simulator).

    python benchmarks/bench_calibration.py [--shared ../shared/data/measured]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

from servopt.calibration.fit import fit_profile
from servopt.calibration.registry import shipped_profile
from servopt.calibration.tables import kernel_table_files, read_kernel_tables
from servopt.costmodels.hardware import builtin_catalog, get_gpu

ROOT = Path(__file__).resolve().parents[1]
REPO_KERNELS = ROOT / "calibration" / "measured" / "kernel"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data" / "measured")
    args = parser.parse_args()
    table = read_kernel_tables(kernel_table_files(args.shared / "kernel", REPO_KERNELS))
    pd.set_option("display.width", 160)
    reports, gemm = [], []
    shipped = [gpu.name for gpu in builtin_catalog() if (p := shipped_profile(gpu.name)) is not None and p.calibrated]
    for name in shipped:
        outcome = fit_profile(table, get_gpu(name), "vllm", 0.3)
        reports.append(outcome.report.assign(gpu=name))
        rows = outcome.predictions
        gemm.append(rows[rows["family"].str.startswith("gemm")].assign(gpu=name))
    report = pd.concat(reports)
    print("Kernel fits (vLLM rows; held_out = shapes the fit never saw), absolute % error")
    print(report.pivot_table(index=["gpu", "family"], columns="split", values=["median_abs_pct", "p90_abs_pct"])
          .round(1).to_string())
    print()
    print("GEMM per GPU, every dtype together: median absolute % error on held-out shapes")
    held = pd.concat(gemm)
    held = held[held["split"] == "held_out"]
    print(held.groupby("gpu")["abs_pct_error"].agg(rows="size", median="median").round(2).to_string())
    print()
    sys.stdout.flush()
    subprocess.run([sys.executable, "-m", "servopt.optimizer", "validate",
                    "--memory", str(args.shared / "memory" / "vllm_memory_profiles_dev.csv"),
                    "--e2e", str(args.shared / "e2e" / "silicon_dense_h100.csv")], check=True)


if __name__ == "__main__":
    main()
