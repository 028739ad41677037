"""Fit the shipped performance profiles (calibration/profiles/<gpu>.json) from the shared kernel tables.

Inputs are the public microbenchmarks in ../shared/data/measured/kernel (aiconfigurator-core 0.12.0,
Apache-2.0; Vidur, MIT); each GPU is fitted on its vLLM rows (other frameworks' rows only where vLLM
has none), holding out 30% of the shapes so the profile's ``fit_report`` shows held-out errors.
The per-step framework overhead is not a kernel: it keeps the value of the profile already shipped
(fitted end to end by ``servopt calibrate import --vllm-bench``), else the default.

    python scripts/fit_shipped_profiles.py [--kernels DIR] [--out DIR] [--holdout-fraction 0.3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from servopt.calibration.fit import fit_profile
from servopt.calibration.registry import read_profile, write_profile
from servopt.calibration.tables import read_kernel_tables
from servopt.costmodels.hardware import get_gpu

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_KERNELS = ROOT.parent / "shared" / "data" / "measured" / "kernel"
DEFAULT_OUT = ROOT / "calibration" / "profiles"
GPUS = ["h100", "h200", "a100-80gb"]
ATTRIBUTION = (
    "kernel latencies from aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0; PyPI aiconfigurator-core, "
    "systems/data/<system>/{gemm,attention,comm}) and Vidur (Microsoft, MIT; data/profiling) as collected in "
    "shared/data/measured/kernel; fitted by scripts/fit_shipped_profiles.py"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=Path, default=DEFAULT_KERNELS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--holdout-fraction", type=float, default=0.3)
    args = parser.parse_args()
    table = read_kernel_tables(sorted(args.kernels.glob("*.csv")))
    pd.set_option("display.width", 160)
    for name in GPUS:
        gpu = get_gpu(name)
        path = args.out / f"{name}.json"
        previous = read_profile(path) if path.exists() else None
        outcome = fit_profile(table, gpu, "vllm", args.holdout_fraction, source=f"{gpu.display_name}: {ATTRIBUTION}")
        profile = outcome.profile
        if previous is not None:
            profile = profile.model_copy(update={
                "step_overhead_s": previous.step_overhead_s, "step_overhead_per_seq_s": previous.step_overhead_per_seq_s,
            })
        write_profile(profile, path)
        print(f"{name}: wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        print(outcome.report.round(2).to_string(index=False))


if __name__ == "__main__":
    main()
