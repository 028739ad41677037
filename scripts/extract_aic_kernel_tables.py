"""Extract the vLLM kernel tables of more GPUs from aiconfigurator-core's wheel into calibration/measured/kernel.

aiconfigurator-core 0.12.0 (NVIDIA, Apache-2.0; PyPI) ships kernel microbenchmarks per system under
``aiconfigurator_core/systems/data/<system>/{gemm,attention,comm}/<framework>/<version>/*.parquet``.
../shared/data/measured/kernel holds a subset of them for H100, H200 and A100 (its PROVENANCE.md); this
script takes the same subset, with the same choices, for the other systems servopt's GPU catalog has:

- the vLLM tables of the newest vLLM version folder that has the table (attention, GEMM and vLLM's
  custom all-reduce), and the NCCL tables (nccl-tests) of every NCCL version folder in the full layout
  (the legacy folders without a ``device`` column are left out, as in ../shared);
- GEMMs: m a power of two up to 32768, n and k in {1024, 2048, 3584, 4096, 7168, 8192, 16384}; bf16,
  per-tensor fp8 and (Blackwell) NVFP4; the block-scaled fp8 kernels are left out, as in ../shared;
- attention: head_dim 128, no sliding window, the per-GPU head counts of Llama-3.x 8B / 70B and
  Qwen3-32B at TP 1, 2, 4 and 8; every batch size, length and KV-cache dtype;
- latencies in ms and GEMM TFLOP/s written with 6 significant digits; every row names its parquet file
  in ``source``.

One table ../shared lacks is added: vLLM's static fp8 quantization kernel (``quantize/vllm/<newest>/
scale_matrix_perf``: read an [m, k] bf16 matrix, write it in fp8), every shape, as servopt's own
``elementwise`` rows with the bytes it moves (3 per element). It is the streaming kernel that the fp8
GEMM benchmarks include and that the elementwise fit needs; without it a GPU's elementwise efficiency
would be transferred from another GPU.

``--check-shared`` extracts H100 the same way and compares it with ../shared's vLLM and NCCL rows
(the rows must be the same, latencies within the 6-digit rounding).

    pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic
    python scripts/extract_aic_kernel_tables.py --wheel /tmp/aic/aiconfigurator_core-0.12.0-*.whl [--check-shared]
"""

from __future__ import annotations

import argparse
import gzip
import io
import re
import sys
import zipfile
from pathlib import Path

import pandas as pd

from servopt.calibration.importers import _version_key
from servopt.costmodels.errors import InputError
from servopt.costmodels.outfiles import write_bytes

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "calibration" / "measured" / "kernel"
SHARED_KERNELS = ROOT.parent / "shared" / "data" / "measured" / "kernel"
PACKAGE = "aiconfigurator-core==0.12.0"
DATA_PREFIX = "aiconfigurator_core/systems/data/"
# aiconfigurator's system folders for the GPUs of servopt's catalog that ../shared lacks (the wheel also
# has gb200, gb300, b300_sxm and rtx_pro_6000_server, which the catalog does not list: --systems takes them).
SYSTEMS = ["b200_sxm", "l40s"]

GEMM_M = [2**i for i in range(16)]
GEMM_NK = [1024, 2048, 3584, 4096, 7168, 8192, 16384]
GEMM_DTYPES = ["bfloat16", "fp8", "nvfp4"]
# (attention heads, KV heads) per GPU: Llama-3.x 8B (32/8), Llama-3.x 70B and Qwen3-32B (64/8) at TP 1/2/4/8.
HEAD_LAYOUTS = sorted({(heads // tp, max(kv // tp, 1)) for heads, kv in ((32, 8), (64, 8)) for tp in (1, 2, 4, 8)})
HEAD_DIM = 128

TABLES = {  # output file -> (op folder, parquet stem, columns as in ../shared)
    "gemm": ("gemm", "gemm_perf", ["system", "device", "framework", "version", "kernel_source", "gemm_dtype",
                                   "m", "n", "k", "latency_ms", "tflops", "source"]),
    "context_attention": ("attention", "context_attention_perf", None),
    "generation_attention": ("attention", "generation_attention_perf", None),
    "comm": ("comm", None, ["system", "device", "framework", "dir_version", "version", "op_name", "kernel_source",
                            "dtype", "num_gpus", "message_size", "message_bytes", "latency_ms", "source"]),
    "elementwise": ("quantize", "scale_matrix_perf", ["system", "device", "framework", "version", "kernel_source", "op",
                                                      "dtype", "m", "k", "message_bytes", "latency_ms", "source"]),
}
ATTENTION_COLUMNS = ["system", "device", "framework", "version", "kernel_source", "attn_dtype", "kv_cache_dtype",
                     "batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim", "window_size",
                     "latency_ms", "source"]
COMM_STEMS = {"vllm": "custom_allreduce_perf", "nccl": "nccl_perf"}
# Bytes per element of the collective tables' dtypes (message_size counts elements).
COMM_DTYPE_BYTES = {"half": 2, "bfloat16": 2, "float16": 2, "int8": 1, "float32": 4}
# The sort order of the written rows (stable files: a rerun rewrites the same bytes).
SORT_KEYS = ["system", "framework", "dir_version", "version", "kernel_source", "op", "op_name", "gemm_dtype", "attn_dtype",
             "kv_cache_dtype", "dtype", "num_gpus", "num_heads", "num_key_value_heads", "n", "k", "m", "batch_size",
             "isl", "step", "message_size"]


class Wheel:
    """The parquet files of aiconfigurator-core's system data, read from the wheel (or an unpacked copy)."""

    def __init__(self, path: Path):
        self.path = path
        if path.is_dir():
            base = path if (path / DATA_PREFIX).is_dir() else path.parent
            self._names = sorted(str(p.relative_to(base)) for p in (base / DATA_PREFIX).rglob("*.parquet"))
            self._read = lambda name: (base / name).read_bytes()
        else:
            try:
                archive = zipfile.ZipFile(path)
            except (OSError, zipfile.BadZipFile) as err:
                raise InputError(f"--wheel '{path}' is not a readable wheel: {err}") from None
            self._names = sorted(n for n in archive.namelist() if n.startswith(DATA_PREFIX) and n.endswith(".parquet"))
            self._read = archive.read
        if not self._names:
            raise InputError(f"--wheel '{path}': no {DATA_PREFIX}*.parquet files in it")

    def versions(self, system: str, op: str, framework: str, stem: str) -> list[str]:
        """Version folders of ``system/op/framework`` that hold ``stem``.parquet, oldest first."""
        folder = re.escape(f"{DATA_PREFIX}{system}/{op}/{framework}/")
        pattern = re.compile(folder + r"([^/]+)/" + re.escape(f"{stem}.parquet"))
        found = [m.group(1) for m in map(pattern.fullmatch, self._names) if m]
        return sorted(found, key=_version_key)

    def read(self, system: str, op: str, framework: str, version: str, stem: str) -> pd.DataFrame:
        name = f"{DATA_PREFIX}{system}/{op}/{framework}/{version}/{stem}.parquet"
        try:
            import pyarrow  # noqa: F401  (pandas reads parquet through it)
        except ImportError:
            raise InputError("reading the wheel's parquet files needs pyarrow: pip install 'servopt[parquet]'") from None
        frame = pd.read_parquet(io.BytesIO(self._read(name)))
        return frame.assign(system=system, source=f"pypi:{PACKAGE}:{name}")


def gemm_rows(raw: pd.DataFrame) -> pd.DataFrame:
    """The GEMM subset: power-of-two m, LLM-projection n and k, bf16 / per-tensor fp8 / NVFP4."""
    rows = raw[raw["m"].isin(GEMM_M) & raw["n"].isin(GEMM_NK) & raw["k"].isin(GEMM_NK) & raw["gemm_dtype"].isin(GEMM_DTYPES)]
    rows = rows.rename(columns={"latency": "latency_ms"})
    return rows.assign(tflops=2.0 * rows["m"] * rows["n"] * rows["k"] / (rows["latency_ms"] * 1e-3) / 1e12)


def attention_rows(raw: pd.DataFrame) -> pd.DataFrame:
    """The attention subset: head_dim 128, full attention, the dense models' per-GPU head layouts."""
    layouts = pd.MultiIndex.from_frame(raw[["num_heads", "num_key_value_heads"]]).isin(HEAD_LAYOUTS)
    rows = raw[layouts & (raw["head_dim"] == HEAD_DIM) & (raw["window_size"] == 0)]
    return rows.rename(columns={"latency": "latency_ms"})


def quantize_rows(raw: pd.DataFrame) -> pd.DataFrame:
    """The static fp8 quantization kernel as servopt's elementwise rows: bf16 in, fp8 out (3 bytes per element)."""
    rows = raw.rename(columns={"latency": "latency_ms"})
    return rows.assign(op="elementwise", dtype="bfloat16", message_bytes=3 * rows["m"] * rows["k"])


def comm_rows(raw: pd.DataFrame, framework: str, folder_version: str) -> pd.DataFrame:
    """Collective rows with their message size in bytes; NCCL's own benchmark is named nccl-tests."""
    dtype = next(c for c in ("nccl_dtype", "allreduce_dtype") if c in raw)
    rows = raw.rename(columns={dtype: "dtype", "latency": "latency_ms"})
    rows["message_bytes"] = rows["message_size"] * rows["dtype"].map(COMM_DTYPE_BYTES)
    return rows.assign(framework="nccl-tests" if framework == "nccl" else framework.lower(), dir_version=folder_version)


def extract_system(wheel: Wheel, system: str) -> dict[str, pd.DataFrame]:
    """The four tables (gemm, context/generation attention, comm) of one system, in ../shared's layout."""
    out: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for name, (op, stem, _) in TABLES.items():
        if op == "comm":
            continue
        versions = wheel.versions(system, op, "vllm", stem)
        if versions:
            raw = wheel.read(system, op, "vllm", versions[-1], stem)
            select = {"gemm": gemm_rows, "attention": attention_rows, "quantize": quantize_rows}[op]
            out[name].append(select(raw))
    for framework, stem in COMM_STEMS.items():
        versions = wheel.versions(system, "comm", framework, stem)
        # vLLM's all-reduce of its newest version; NCCL's every benchmarked version (nccl-tests
        # timings of one library, as in ../shared), except the legacy tables without a device column.
        for version in versions if framework == "nccl" else versions[-1:]:
            raw = wheel.read(system, "comm", framework, version, stem)
            if "device" in raw:
                out["comm"].append(comm_rows(raw, framework, version))
    return {name: pd.concat(parts, ignore_index=True) for name, parts in out.items() if parts}


def tidy(frames: list[pd.DataFrame], name: str) -> pd.DataFrame:
    """Stack, keep ../shared's columns in its order and sort the rows."""
    columns = TABLES[name][2] or ATTENTION_COLUMNS
    table = pd.concat(frames, ignore_index=True)[columns]
    keys = [k for k in SORT_KEYS if k in table]
    return table.sort_values(keys, kind="stable").reset_index(drop=True)


def extract(wheel: Wheel, systems: list[str]) -> dict[str, pd.DataFrame]:
    per_system = [extract_system(wheel, s) for s in systems]
    return {name: tidy([t[name] for t in per_system if name in t], name)
            for name in TABLES if any(name in t for t in per_system)}


def csv_text(table: pd.DataFrame) -> str:
    return table.to_csv(index=False, float_format="%.6g")


def write_tables(tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
    """``aic_vllm_<table>_perf.csv.gz`` per table; gzip without a timestamp, so reruns give the same bytes."""
    paths = []
    for name, table in tables.items():
        data = gzip.compress(csv_text(table).encode(), compresslevel=9, mtime=0)
        paths.append(write_bytes(out / f"aic_vllm_{name}_perf.csv.gz", data))
    return paths


def compare_with_shared(tables: dict[str, pd.DataFrame], shared: Path, system: str = "h100_sxm") -> pd.DataFrame:
    """Per table: rows extracted, rows in ../shared (vLLM and NCCL of ``system``), rows matched, largest
    relative latency difference among matched rows."""
    report = []
    for name, table in tables.items():
        if not (shared / f"aic_{name}_perf.csv").is_file():
            continue
        theirs = pd.read_csv(shared / f"aic_{name}_perf.csv")
        theirs = theirs[(theirs["system"] == system) & theirs["framework"].str.lower().isin(["vllm", "nccl-tests"])]
        ours = pd.read_csv(io.StringIO(csv_text(table[table["system"] == system])))
        keys = [c for c in ours.columns if c not in ("latency_ms", "tflops")]
        # Duplicate measurements of one shape (a few NCCL tables repeat sizes) pair up in order.
        ours, theirs = (f.assign(_n=f.groupby(keys).cumcount()) for f in (ours, theirs))
        both = ours.merge(theirs, on=[*keys, "_n"], suffixes=("", "_shared"))
        diff = (both["latency_ms"] / both["latency_ms_shared"] - 1).abs().max() if len(both) else float("nan")
        report.append({"table": name, "extracted": len(ours), "shared": len(theirs), "matched": len(both),
                       "max_rel_latency_diff": diff})
    return pd.DataFrame(report)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", type=Path, required=True,
                        help=f"the {PACKAGE} wheel (pip download --no-deps {PACKAGE}) or a folder it was unpacked in")
    parser.add_argument("--systems", nargs="+", default=SYSTEMS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check-shared", action="store_true",
                        help="also extract h100_sxm and compare it with ../shared/data/measured/kernel")
    args = parser.parse_args()
    try:
        wheel = Wheel(args.wheel)
        tables = extract(wheel, args.systems)
        for path in write_tables(tables, args.out):
            print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        for name, table in tables.items():
            counts = table["system"].value_counts().sort_index()
            print(f"  {name}: {len(table)} rows, " + ", ".join(f"{system} {n}" for system, n in counts.items()))
        if args.check_shared:
            report = compare_with_shared(extract(wheel, ["h100_sxm"]), SHARED_KERNELS)
            print("h100_sxm extracted the same way, against ../shared (vLLM and NCCL rows):")
            print(report.to_string(index=False))
            if not (report["extracted"] == report["shared"]).all() or not (report["matched"] == report["shared"]).all():
                print("MISMATCH: the extraction does not reproduce ../shared's subset", file=sys.stderr)
                return 1
    except InputError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
