"""``servopt gpus`` and ``servopt models``: list the catalogs."""

from __future__ import annotations

import argparse
import json

import pandas as pd

from ...calibration.registry import shipped_profile
from ...costmodels.architectures import preset_models
from ...costmodels.hardware import load_catalog
from . import COMMANDS


def register(subparsers: argparse._SubParsersAction) -> None:
    gpus = subparsers.add_parser("gpus", help=COMMANDS["gpus"][1])
    gpus.add_argument("--hardware", default=None, metavar="YAML", help="YAML file of GPU overrides/additions")
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
        print(json.dumps(table.to_dict(orient="records"), indent=2))
    else:
        print(table.drop(columns=["price_source"]).to_string(index=False))
        print("\nPrices: on-demand per GPU-hour; sources:")
        for row in table.itertuples():
            print(f"  {row.name}: {row.price_source}")
    return 0


def run_models(args: argparse.Namespace) -> int:
    table = pd.DataFrame([spec.summary() for spec in preset_models().values()])
    if args.json:
        print(json.dumps(table.to_dict(orient="records"), indent=2))
    else:
        print(table.to_string(index=False))
    return 0
