"""Write servopt's error table (costmodels/data/error_bars.json) from held-out predictions.

Serving metrics: the leave-one-group-out predictions of the development corpus (every run predicted
with the serving coefficients fitted without its (model, GPU, dtype) group; calibration/serving_fit.py),
either computed here or read from a file that ``benchmarks/bench_e2e_accuracy.py --save-cv FILE`` wrote.
KV-cache capacity: servopt's memory model against vLLM's start-up logs (calibration/measured/memory, and
../shared/data/measured/memory where present). calibration/error_bars.py builds the table and
costmodels/uncertainty.py reads it.

    python scripts/fit_error_bars.py [--cv FILE] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from servopt.calibration.corpus import load_corpus
from servopt.calibration.error_bars import build_error_bars, held_out_errors, memory_errors
from servopt.calibration.registry import load_profile
from servopt.calibration.serving_fit import Linearization, cross_validate, shipped_params
from servopt.calibration.validate import MemoryValidator
from servopt.costmodels.outfiles import write_text

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "costmodels" / "data" / "error_bars.json"
MEMORY_TABLES = [ROOT / "calibration" / "measured" / "memory" / name
                 for name in ("vllm_kv_logs_public.csv", "vllm_kv_logs_more.csv")]
SHARED_MEMORY = ROOT.parent / "shared" / "data" / "measured" / "memory" / "vllm_memory_profiles_dev.csv"
SOURCE = ("held-out errors: the development corpus's leave-one-(model, GPU, dtype)-group-out predictions "
          "(calibration/serving_fit.py) and the memory model against vLLM start-up logs (calibration/measured/memory); "
          "written by scripts/fit_error_bars.py")


def group_cv() -> pd.DataFrame:
    """Every corpus run predicted with coefficients fitted without its group."""
    linearization = Linearization(load_corpus(), load_profile, shipped_params())
    return cross_validate(linearization, "group")


def kv_errors() -> pd.DataFrame:
    validator = MemoryValidator()
    tables = [path for path in (*MEMORY_TABLES, SHARED_MEMORY) if path.exists()]
    return pd.concat([memory_errors(validator.predict(validator.read(path))) for path in tables], ignore_index=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cv", type=Path, help="a pickled frame of bench_e2e_accuracy.py --save-cv")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    frame = pd.read_pickle(args.cv) if args.cv else group_cv()
    errors = pd.concat([held_out_errors(frame), kv_errors()], ignore_index=True)
    bars = build_error_bars(errors, SOURCE)
    write_text(args.out, json.dumps(bars.model_dump(mode="json"), indent=1) + "\n")
    counts = errors.groupby("metric").size()
    print(f"wrote {args.out}: " + ", ".join(f"{metric} {count} values" for metric, count in counts.items()))


if __name__ == "__main__":
    main()
