"""``servopt calibrate``: measure kernels (run), fit a profile (fit), import other tools' data (import)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ...calibration.microbench import make_backend, run_microbenchmarks
from ...calibration.registry import load_profile, write_profile
from ...calibration.tables import read_kernel_tables, write_table
from ...costmodels.architectures import resolve_model
from ...costmodels.outfiles import check_output_file, write_text
from ...costmodels.errors import InputError
from ...costmodels.hardware import load_catalog
from . import COMMANDS
from .common import add_hardware_args, given, load_deployment, number_in


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "calibrate", help=COMMANDS["calibrate"][1],
        description="Calibrate servopt's cost model: `run` times GEMM, attention, copy and all-reduce kernels, "
        "`fit` turns kernel tables into a profile JSON, `import` converts aiconfigurator's database or fits the "
        "per-step overhead to a `vllm bench serve` result.",
    )
    sub = parser.add_subparsers(dest="calibrate_command", metavar="ACTION")

    run = sub.add_parser("run", help="time kernels on this machine's GPU (or CPU) into a kernel table")
    run.add_argument("--quick", action="store_true", help="a short sweep (about a minute on one GPU)")
    run.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cuda (torch) or cpu (torch or numpy)")
    run.add_argument("--out", type=given, default="servopt-kernels.csv", metavar="FILE", help="table to write (.csv or .parquet)")
    run.add_argument("--models", nargs="*", default=[], metavar="MODEL", help="time these models' GEMM shapes")
    run.set_defaults(handler=_run)

    fit = sub.add_parser("fit", help="fit a profile JSON to kernel tables")
    fit.add_argument("tables", nargs="+", metavar="TABLE", help="kernel tables (servopt, aiconfigurator or Vidur layout)")
    fit.add_argument("--gpu", default=None, help="GPU to fit (default: the one GPU the tables measure)")
    fit.add_argument("--framework", default="vllm", help="use this framework's rows where a table has several (default vllm)")
    fit.add_argument("--holdout-fraction", type=number_in(0, 1, low_open=False), default=0.3, help="share of shapes held out for the report (default 0.3)")
    fit.add_argument("--out", type=given, default=None, metavar="PROFILE.json", help="where to write the profile (default: <gpu>.profile.json)")
    fit.add_argument("--json", action="store_true", help="print the fit report as JSON")
    add_hardware_args(fit)
    fit.set_defaults(handler=_fit)

    imp = sub.add_parser("import", help="import aiconfigurator's database, or fit step overhead to vllm bench results")
    source = imp.add_mutually_exclusive_group(required=True)
    source.add_argument("--aiconfigurator", metavar="PATH", help="aiconfigurator_core package folder (or its systems/data)")
    source.add_argument("--vllm-bench", nargs="+", metavar="RESULT.json", help="vllm bench serve result JSON file(s)")
    imp.add_argument("--system", help="aiconfigurator system, e.g. h200_sxm")
    imp.add_argument("--framework", default="vllm", help="aiconfigurator framework folder (default vllm)")
    imp.add_argument("--version", default=None, help="framework version folder (default: the newest)")
    imp.add_argument("--deployment", metavar="YAML", help="the deployment the vllm bench results measured (gpu, tp, ...)")
    imp.add_argument("--model", default=None, help="model served (default: the result's model_id)")
    imp.add_argument("--out", type=given, default=None, metavar="FILE", help="kernel table (aiconfigurator) or profile JSON (vllm bench)")
    add_hardware_args(imp)
    imp.set_defaults(handler=_import)
    # No action is a bad invocation: one line, as every servopt error (not the usage block).
    parser.set_defaults(handler=lambda args: parser.error(f"choose an action: {', '.join(sub.choices)}"))


def _run(args: argparse.Namespace) -> int:
    for path in (args.out, f"{args.out}.meta.json"):  # before the sweep, not after it
        check_output_file(path, "--out")
    models = [resolve_model(m).spec for m in args.models]
    backend = make_backend(args.device)
    print(f"calibrate run on {backend.device_name} ({backend.name}){' --quick' if args.quick else ''}", file=sys.stderr)
    table, meta = run_microbenchmarks(backend, args.quick, models, progress=lambda line: print(f"  {line}", file=sys.stderr))
    out = write_table(table, args.out)
    meta_path = out.with_name(out.name + ".meta.json")
    write_text(meta_path, json.dumps(meta, indent=2) + "\n")
    print(f"{len(table)} kernel timings on {meta['device']} ({'GPU' if meta['is_gpu'] else 'CPU: pipeline test only'}) "
          f"in {meta['duration_s']:.0f} s -> {out} (metadata {meta_path.name})")
    return 0


def _fit(args: argparse.Namespace) -> int:
    from ...calibration.fit import fit_profile  # scipy loads only for the commands that fit

    catalog = load_catalog(args.hardware)
    table = read_kernel_tables(args.tables)
    devices = sorted(table["gpu"].dropna().unique())
    name = args.gpu or (devices[0] if len(devices) == 1 else None)
    if name is None:
        raise InputError(f"the tables measure several GPUs ({', '.join(devices)}): choose one with --gpu")
    if name not in catalog:
        raise InputError(f"the tables measure '{name}', which is not a GPU in the catalog: pass --gpu NAME "
                         "(a CPU table is then fitted against that GPU's datasheet, as a pipeline test)")
    gpu = catalog.get(name)
    base = load_profile(gpu, args.profile)
    stand_in = gpu.name not in devices and len(devices) == 1
    if stand_in:
        # A table measured on another device (the CPU path): fitted against this datasheet as bf16
        # math (the CPU runs fp32), never marked calibrated.
        table = table.assign(gpu=gpu.name, dtype=table["dtype"].replace("fp32", "bf16"))
    outcome = fit_profile(table, gpu, args.framework, args.holdout_fraction, base,
                          source=f"servopt calibrate fit {' '.join(Path(t).name for t in args.tables)}")
    profile = outcome.profile
    if stand_in:
        profile = profile.model_copy(update={
            "calibrated": False, "notes": f"measured on '{devices[0]}', not on {gpu.name}: a pipeline test, not a calibration",
        })
    out = write_profile(profile, args.out or f"{gpu.name}.profile.json")
    if args.json:
        print(json.dumps({"profile": str(out), "gpu": gpu.name, "calibrated": profile.calibrated,
                          "report": outcome.report.to_dict("records")}, indent=2))
        return 0
    print(f"profile for {gpu.name} ({args.framework}) -> {out}" + ("" if profile.calibrated else "  [UNCALIBRATED: " + profile.notes + "]"))
    print("absolute % error of the fitted latencies (held_out: shapes the fit never saw)")
    print(outcome.report.rename(columns={"median_abs_pct": "median_%", "p90_abs_pct": "p90_%"}).round(2).to_string(index=False))
    if profile.notes and profile.calibrated:
        print(profile.notes)
    return 0


def _import(args: argparse.Namespace) -> int:
    # scipy loads only for the commands that fit.
    from ...calibration.importers import fit_step_overhead, import_aiconfigurator, read_vllm_bench

    if args.aiconfigurator:
        if not args.system:
            raise InputError("--aiconfigurator needs --system (e.g. h200_sxm)")
        table = import_aiconfigurator(args.aiconfigurator, args.system, args.framework, args.version)
        out = write_table(table, args.out or f"aiconfigurator-{args.system}-{args.framework}.csv")
        counts = table.groupby(["op", "dtype"], dropna=False).size().to_string()
        print(f"{len(table)} kernel rows of {args.system}/{args.framework} -> {out}\n{counts}")
        return 0
    if not args.deployment:
        raise InputError("--vllm-bench needs --deployment YAML (gpu, tp, ... of the server that was measured)")
    deployment = load_deployment(args.deployment)
    gpu = load_catalog(args.hardware).get(deployment.gpu)
    runs = [read_vllm_bench(path) for path in args.vllm_bench]
    model_name = args.model or runs[0].model_id
    if not model_name:
        raise InputError("the result names no model_id: pass --model")
    model = resolve_model(model_name).spec
    profile, report = fit_step_overhead([(r, model, deployment, gpu) for r in runs], load_profile(gpu, args.profile))
    out = write_profile(profile, args.out or f"{gpu.name}.profile.json")
    print(f"step overhead fitted to {len(runs)} run(s): {profile.step_overhead_s * 1e3:.3f} ms per step "
          f"(+{profile.step_overhead_per_seq_s * 1e6:.1f} us per sequence) -> {out}")
    print(report.round(2).to_string(index=False))
    return 0
