"""Fit the step formula's trained-physics coefficients to the development corpus and write them into
the shipped profiles (calibration/profiles/<gpu>.json), leaving their kernel fits as they are.

The coefficients (costmodels/profile.py: SERVING_COEFFICIENTS) are fitted by calibration/serving_fit.py
to the mean TPOT and mean TTFT of every simulated run of the corpus (calibration/corpus.py: the public
measured vLLM runs of ../shared/data/measured/e2e and calibration/measured/e2e). The same values go into
every profile, but for the kernel scales (serving_fit.PER_GPU), fitted per shipped GPU fit from the runs on that
GPU and on the GPUs whose profiles are transferred from it (benchmarks/bench_e2e_accuracy.py prints their error on
(model, GPU, dtype) groups, models, GPUs and dtypes left out of the fit).

    python scripts/fit_serving_coefficients.py [--rounds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from servopt.calibration.corpus import load_corpus
from servopt.calibration.registry import load_profile, shipped_gpus, write_profile
from servopt.calibration.serving_fit import (GAUSS_NEWTON_ROUNDS, coefficient_table, fit_serving, fitted_runs,
                                             params_for, shipped_params)
from servopt.costmodels.hardware import get_gpu

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "calibration" / "profiles"
SOURCE = ("serving coefficients (SERVING_COEFFICIENTS) fitted by scripts/fit_serving_coefficients.py to the "
          "development corpus of public measured serving runs (calibration/corpus.py)")


def describe(params: dict) -> str:
    """The coefficients, one a line, with their unit and meaning."""
    lines = []
    for row in coefficient_table(params).itertuples():
        shown = ("not identified (the default stands in)" if row.value is None or row.value != row.value
                 else f"{row.value:.4g}" if row.unit == "x" else f"{row.value * 1e6:.4g} us")
        lines.append(f"  {row.coefficient:28} {shown:>14}  {row.meaning}")
    return "\n".join(lines)


def fit_and_write(out: Path, rounds: int = GAUSS_NEWTON_ROUNDS) -> dict:
    """Fit on the corpus from the shipped coefficients and write every shipped profile in ``out``
    (the shared coefficients, and each GPU fit's own scales)."""
    runs = fitted_runs(load_corpus())
    params = fit_serving(runs, load_profile, start=shipped_params(), rounds=rounds)
    for name in shipped_gpus():
        profile = load_profile(get_gpu(name))
        write_profile(profile.model_copy(update={**params_for(params, name), "serving_source": SOURCE}),
                      out / f"{name}.json")
    return params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--rounds", type=int, default=GAUSS_NEWTON_ROUNDS)
    args = parser.parse_args()
    params = fit_and_write(args.out, args.rounds)
    print(f"serving coefficients fitted to {len(fitted_runs(load_corpus()))} measured runs:\n{describe(params)}")


if __name__ == "__main__":
    main()
