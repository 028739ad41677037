"""Fit the shipped performance profiles (calibration/profiles/<gpu>.json) from the shared kernel tables.

Kernels: the public microbenchmarks in ../shared/data/measured/kernel (aiconfigurator-core 0.12.0,
Apache-2.0; Vidur, MIT), the same database's tables of more GPUs (B200, L40S) in calibration/measured/kernel
(extracted by scripts/extract_aic_kernel_tables.py) and the public collective timings there (vLLM's
symmetric-memory all-reduce among them; each row names its source); each GPU is fitted on its vLLM rows (other frameworks' rows only where vLLM
has none; NCCL's own benchmarks count for every framework), holding out 30% of the shapes so the
profile's ``fit_report`` shows held-out errors. A family a GPU's tables lack comes from a fitted GPU
of the same generation (H200 from H100).

Fused-MoE kernels: calibration/measured/kernel/aic_vllm_moe_perf.csv (aiconfigurator-core 0.12.0's
vLLM MoE tables, derived by scripts/build_moe_kernel_table.py; provenance in
calibration/measured/PROVENANCE.md), for H100, H200, B200 and A100.

The serving coefficients (the step formula's trained-physics terms: kernel scales as served, GPU costs
outside the kernel tables, the engines' CPU time, the front end's latency) are not kernels:
``scripts/fit_serving_coefficients.py`` fits them to the development corpus once these kernel fits
are written (it reads the shipped profiles). Their error on groups left out of the fit is what
``benchmarks/bench_e2e_accuracy.py`` prints.

    python scripts/fit_shipped_profiles.py [--kernels DIR] [--out DIR] [--holdout-fraction 0.3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from servopt.calibration.fit import fit_profile
from servopt.calibration.registry import load_profile, write_profile
from servopt.calibration.tables import kernel_table_files, read_kernel_tables
from servopt.costmodels.hardware import get_gpu
from servopt.costmodels.profile import SERVING_COEFFICIENTS, PerformanceProfile

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_KERNELS = ROOT.parent / "shared" / "data" / "measured" / "kernel"
# Kernel timings gathered from public sources into the repository (calibration/measured/PROVENANCE.md).
REPO_KERNELS = ROOT / "calibration" / "measured" / "kernel"
DEFAULT_OUT = ROOT / "calibration" / "profiles"
GPUS = ["h100", "h200", "a100-80gb", "b200", "l40s"]
# A kernel family a GPU's tables lack (H200: no elementwise rows) comes from this fitted GPU of the
# same generation, its efficiencies applied to the GPU's own peaks (PerformanceProfile.spec_default).
TRANSFER_BASE = {"h200": "h100"}
ATTRIBUTION = (
    "kernel latencies from aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0; PyPI aiconfigurator-core, "
    "systems/data/<system>/{gemm,attention,comm,quantize}) and Vidur (Microsoft, MIT; data/profiling) as collected in "
    "shared/data/measured/kernel and, for more GPUs, extracted by scripts/extract_aic_kernel_tables.py into "
    "calibration/measured/kernel/aic_vllm_*.csv.gz; aiconfigurator-core 0.12.0's vLLM fused-MoE tables "
    "(systems/data/<system>/moe/vllm) in calibration/measured/kernel/aic_vllm_moe_perf.csv; public all-reduce timings "
    "(vLLM PRs, sources per row in "
    "calibration/measured/kernel/allreduce_public.csv); fitted by scripts/fit_shipped_profiles.py"
)
# Profile fields the kernel fit does not set: the serving coefficients already shipped are kept.
SERVING_FIELDS = (*SERVING_COEFFICIENTS, "serving_source")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", type=Path, default=DEFAULT_KERNELS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--holdout-fraction", type=float, default=0.3)
    args = parser.parse_args()
    table = read_kernel_tables(kernel_table_files(args.kernels, REPO_KERNELS))
    pd.set_option("display.width", 160)
    profiles = {}
    for name in GPUS:
        gpu = get_gpu(name)
        reference = TRANSFER_BASE.get(name)
        base = PerformanceProfile.spec_default(gpu, profiles[reference], get_gpu(reference)) if reference else None
        outcome = fit_profile(table, gpu, "vllm", args.holdout_fraction, base=base,
                              source=f"{gpu.display_name}: {ATTRIBUTION}")
        profiles[name] = outcome.profile
        print(f"{name}: kernels")
        print(outcome.report.round(2).to_string(index=False))
    for name, profile in profiles.items():
        path = args.out / f"{name}.json"
        shipped = load_profile(get_gpu(name))
        kept = {field: getattr(shipped, field) for field in SERVING_FIELDS}
        write_profile(profile.model_copy(update=kept), path)
        print(f"{name}: wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path} "
              "(serving coefficients kept; refit them with scripts/fit_serving_coefficients.py)")


if __name__ == "__main__":
    main()
