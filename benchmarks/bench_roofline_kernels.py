"""Roofline kernel times against measured kernels, per GPU and dtype (the figure of issue 2).

Predicts every GEMM, prefill-attention and decode-attention row of the shared kernel tables
(aiconfigurator-core 0.12.0, vLLM rows) with three profiles and prints the median and p90
absolute % error per GPU and slice (op/dtype/KV dtype):

- ``textbook``: datasheet peaks with textbook efficiencies (no measurement at all);
- ``transfer``: what an uncalibrated GPU gets, a same-generation fit moved onto its datasheet
  (for the H200 that fit is the H100's, so its figures are a held-out GPU);
- ``shipped``: the profile fitted on that GPU (its held-out-shape errors are printed by
  benchmarks/bench_calibration.py).

    python benchmarks/bench_roofline_kernels.py [--shared ../shared/data/measured]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from servopt.calibration.registry import load_profile, spec_default_profile
from servopt.calibration.validate import KernelValidator
from servopt.costmodels.profile import PerformanceProfile

ROOT = Path(__file__).resolve().parents[1]
PROFILES = {
    "textbook": PerformanceProfile.spec_default,
    "transfer": spec_default_profile,
    "shipped": load_profile,
}
TABLES = ("aic_gemm_perf.csv", "aic_context_attention_perf.csv", "aic_generation_attention_perf.csv")


def error_table(shared: Path) -> pd.DataFrame:
    frames = []
    for label, profile_for in PROFILES.items():
        validator = KernelValidator(profile_for)
        for name in TABLES:
            rows = validator.read(shared / "kernel" / name)
            rows = rows[rows["framework"].str.lower() == "vllm"]
            scores = validator.score(validator.predict(rows))
            frames.append(scores.assign(profile=label))
    scores = pd.concat(frames)
    return (scores.groupby(["gpu", "slice", "profile"])["abs_pct_error"]
            .agg(rows="size", median="median", p90=lambda e: e.quantile(0.9))
            .unstack("profile").round(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared", type=Path, default=ROOT.parent / "shared" / "data" / "measured")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    print("Absolute % error of predicted kernel latency (vLLM rows of the shared kernel tables)")
    print(error_table(args.shared).to_string())


if __name__ == "__main__":
    main()
