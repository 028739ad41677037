"""``servopt gpus`` and ``servopt models``: list the catalogs."""

from __future__ import annotations

import argparse
import json
import math

import pandas as pd

from ...calibration.registry import shipped_profile
from ...costmodels.architectures import preset_models
from ...costmodels.errors import one_line
from ...costmodels.hardware import load_catalog
from . import COMMANDS
from .common import given


def register(subparsers: argparse._SubParsersAction) -> None:
    gpus = subparsers.add_parser("gpus", help=COMMANDS["gpus"][1])
    gpus.add_argument("--hardware", type=given, default=None, metavar="YAML", help="YAML file of GPU overrides/additions")
    gpus.add_argument("--json", action="store_true")
    gpus.set_defaults(handler=run_gpus)
    models = subparsers.add_parser("models", help=COMMANDS["models"][1])
    models.add_argument("--json", action="store_true")
    models.set_defaults(handler=run_models)


def gpu_table(hardware: str | None = None) -> pd.DataFrame:
    rows = []
    for gpu in load_catalog(hardware):
        rows.append({
            "name": gpu.name,
            "gpu": gpu.display_name,
            "bf16_tflops": gpu.peak_tflops.get("bf16"),
            "fp8_tflops": gpu.peak_tflops.get("fp8"),
            "int8_tops": gpu.peak_tflops.get("int8"),
            "memory_gib": gpu.memory_gib,
            "bandwidth_tbps": gpu.memory_bandwidth_tbps,
            "link_gbps": gpu.interconnect_gbps,
            "gpus_per_node": gpu.gpus_per_node,
            "usd_per_hour": gpu.price_per_gpu_hour,
            "profile": "calibrated" if shipped_profile(gpu.name) else "uncalibrated",
            "price_source": f"{gpu.price_source} ({gpu.price_date})",
        })
    return pd.DataFrame(rows)


def run_gpus(args: argparse.Namespace) -> int:
    table = gpu_table(args.hardware)
    if args.json:
        print(json_records(table))
    else:
        shown = one_line_cells(table)  # a hardware file's names and sources are the user's text
        print(shown.drop(columns=["price_source"]).to_string(index=False))
        print("\nPrices: on-demand per GPU-hour; sources:")
        for row in shown.itertuples():
            print(f"  {row.name}: {row.price_source}")
    return 0


def run_models(args: argparse.Namespace) -> int:
    table = pd.DataFrame([spec.summary() for spec in preset_models().values()])
    if args.json:
        print(json_records(table))
    else:
        print(one_line_cells(table).to_string(index=False))
    return 0


def json_records(table: pd.DataFrame) -> str:
    """The table's rows as a JSON list, a missing number (NaN) as null: JSON has no NaN."""
    rows = [{key: None if isinstance(value, float) and not math.isfinite(value) else value for key, value in row.items()}
            for row in table.to_dict(orient="records")]
    return json.dumps(rows, indent=2, allow_nan=False)


def one_line_cells(table: pd.DataFrame) -> pd.DataFrame:
    """The table with every text cell on one line, its control characters escaped."""
    return table.map(lambda value: one_line(value) if isinstance(value, str) else value)
