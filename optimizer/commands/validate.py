"""``servopt validate``: predict every row of measured tables and report the error per slice."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd

from ...calibration.registry import read_profile
from ...costmodels.errors import InputError
from ...costmodels.hardware import GPUSpec
from ...costmodels.outfiles import check_output_file, write_csv
from . import COMMANDS
from .common import given


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help=COMMANDS["validate"][1],
        description="Predict every row of the measured tables given and print the median and p90 absolute "
        "percentage error per slice (GPU, framework, model or op, precision). Rows that cannot be predicted "
        "are counted and listed with the reason.",
    )
    parser.add_argument("--e2e", action="append", default=[], metavar="CSV",
                        help="measured serving runs: aiconfigurator's silicon layout (ISL/OSL, concurrency, TP, mean TTFT/TPOT) "
                        "or vllm bench serve results (model, gpu, vllm_version, tp, mean/median/p99 TTFT, TPOT, ITL)")
    parser.add_argument("--memory", action="append", default=[], metavar="CSV", help="vLLM start-up memory logs (KV tokens)")
    parser.add_argument("--kernels", action="append", default=[], metavar="CSV", help="kernel latency table")
    parser.add_argument("--profile", type=given, default=None, metavar="JSON",
                        help="use this profile for every GPU instead of the shipped ones")
    parser.add_argument("--out", type=given, default=None, metavar="CSV", help="write one row per input row: measured, predicted, reason")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--explain", action="store_true",
                        help="split every e2e row's predicted mean TTFT and TPOT into client, queueing, kernels, "
                             "collectives and host")
    parser.set_defaults(handler=run)


def _profile_for(path: str | None):
    if path is None:
        return None
    profile = read_profile(path)

    def fixed(gpu: GPUSpec):
        if not gpu.answers_to(profile.gpu):
            raise InputError(f"--profile is for GPU '{profile.gpu}' but the table has rows for '{gpu.name}'")
        return profile

    return fixed


def run(args: argparse.Namespace) -> int:
    # The validators fit kernel families with scipy: loaded only for this command (start-up of the others).
    from ...calibration.validate import VALIDATORS, summarize

    jobs = [(kind, path) for kind, paths in (("e2e", args.e2e), ("memory", args.memory), ("kernel", args.kernels)) for path in paths]
    if not jobs:
        raise InputError("give at least one table: --e2e CSV, --memory CSV or --kernels CSV")
    if args.out:
        check_output_file(args.out, "--out")  # before the simulations, not after them
    profile_for = _profile_for(args.profile)
    predictions, scores = [], []
    for kind, path in jobs:
        validator = VALIDATORS[kind](profile_for, **({"explain": True} if kind == "e2e" and args.explain else {}))
        predicted = validator.predict(validator.read(path)).assign(table=kind, file=str(path))
        predictions.append(predicted)
        scores.append(validator.score(predicted))
    predicted = pd.concat(predictions, ignore_index=True)
    scores = pd.concat(scores, ignore_index=True)
    summary = summarize(scores)
    overall = summarize(scores.assign(gpu="all", framework="all", slice="all", calibrated=scores["calibrated"].all()))
    skipped = predicted[predicted["reason"] != ""]
    if args.out:
        write_csv(args.out, predicted)
    if args.json:
        print(json.dumps({
            "summary": summary.to_dict("records"),
            "overall": overall.to_dict("records"),
            "rows": len(predicted), "predicted": len(predicted) - len(skipped),
            "not_predicted": skipped[["table", "file", "id", "reason"]].to_dict("records"),
            **({"explained": explained(predicted).to_dict("records")} if args.explain else {}),
        }, indent=2, default=str))
        return 0
    print(render(pd.concat([summary, overall], ignore_index=True), predicted, skipped, args.out))
    if args.explain:
        print(render_explained(explained(predicted)))
    return 0


def explained(predicted: pd.DataFrame) -> pd.DataFrame:
    """The e2e rows' measured and predicted means with the parts of each prediction (ms)."""
    from ...calibration.explain import PARTS

    parts = [f"{m}_{p}_ms" for m in ("ttft", "tpot") for p in PARTS]
    rows = predicted[(predicted["table"] == "e2e") & predicted.get("ttft_kernels_ms", pd.Series(dtype=float)).notna()]
    columns = ["id", "measured_mean_ttft_ms", "pred_mean_ttft_ms", "measured_mean_tpot_ms", "pred_mean_tpot_ms"]
    return rows.reindex(columns=columns + parts).reset_index(drop=True)


def render_explained(frame: pd.DataFrame) -> str:
    from ...calibration.explain import PARTS

    lines = ["", "predicted means by part (ms): " + ", ".join(PARTS)]
    for r in frame.to_dict("records"):
        for metric in ("ttft", "tpot"):
            split = "  ".join(f"{p} {r[f'{metric}_{p}_ms']:8.2f}" for p in PARTS)
            lines.append(f"  {str(r['id'])[-44:]:<44} {metric.upper()} measured {r[f'measured_mean_{metric}_ms']:8.1f} "
                         f"predicted {r[f'pred_mean_{metric}_ms']:8.1f} = {split}")
    return "\n".join(lines)


def render(summary: pd.DataFrame, predicted: pd.DataFrame, skipped: pd.DataFrame, out: str | None) -> str:
    lines = []
    for (table, metric), part in summary.groupby(["table", "metric"], sort=False):
        lines.append(f"{table}: {metric} (absolute % error)")
        lines.append(f"  {'gpu':<10} {'framework':<10} {'slice':<38} {'rows':>5} {'median':>7} {'p90':>7}")
        for r in part.itertuples():
            flag = "" if r.calibrated else "  [UNCALIBRATED profile]"
            lines.append(f"  {r.gpu:<10} {r.framework:<10} {str(r.slice)[:38]:<38} {r.rows:>5} {r.median_abs_pct:>6.1f}% {r.p90_abs_pct:>6.1f}%{flag}")
        lines.append("")
    lines.append(f"{len(predicted)} rows, {len(predicted) - len(skipped)} predicted, {len(skipped)} not predicted")
    if len(skipped):
        for (table, reason), part in skipped.groupby(["table", "reason"], sort=False):
            ids = ", ".join(str(i) for i in part["id"].head(5))
            more = f", ... ({len(part)} rows)" if len(part) > 5 else f" ({len(part)} rows)"
            lines.append(f"  {table}: {reason}: {ids}{more}")
    if out:
        lines.append(f"predictions written to {out}")
    return "\n".join(lines)
