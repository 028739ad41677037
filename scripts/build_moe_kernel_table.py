"""Build calibration/measured/kernel/aic_vllm_moe_perf.csv from aiconfigurator-core's fused-MoE kernel tables.

Source: PyPI ``aiconfigurator-core==0.12.0`` (NVIDIA, Apache-2.0), the files
``aiconfigurator_core/systems/data/<system>/moe/vllm/<version>/moe_perf.parquet`` for the H100 SXM,
H200 SXM, A100-SXM4-80GB and B200 systems. Only those kernel tables are opened: the package's
end-to-end (silicon) rows are kept back for checking and are neither read nor copied.

What a row measured (aiconfigurator's ``collector/vllm/collect_moe.py``): one MoE layer's routed
experts on one GPU, timed with CUDA graphs on vLLM's own kernels. ``num_tokens`` tokens of
``hidden_size`` go through ``num_experts`` experts of ``inter_size`` (the whole model's intermediate
size; each GPU holds ``inter_size / moe_tp_size`` of it, and ``num_experts / moe_ep_size`` experts),
``topk`` per token. The mxfp4 rows time vLLM's ``FusedMoE`` module on router logits (routing, top-k,
permute, both GEMMs, activation, unpermute); the others time ``fused_experts`` on precomputed top-k
ids (the same, without the top-k). ``latency_ms`` is the mean over replays.

Subset kept (the full tables are about 0.3 M rows): per (system, dtype) the newest vLLM version
that measured it (the version each row logged; rows of a development build are skipped); the ``balanced``
token-to-expert distribution (a uniform router, what servopt's routing model assumes) where the
table has it, else ``power_law_1.01`` (A100: its only near-uniform one; at 8-64 tokens it runs up
to ~20% faster than balanced on H200, elsewhere within ~10%); ``moe_tp_size`` up to 8 and
``moe_ep_size`` up to 16 (vLLM runs TP x EP only as one or the other). Columns are renamed to the
kernel-table layout (``calibration/tables.py``: op ``moe``, ``latency_ms``) and every row names its
source file.

    pip download --no-deps aiconfigurator-core==0.12.0 -d /tmp/aic
    python scripts/build_moe_kernel_table.py --aiconfigurator /tmp/aic/aiconfigurator_core-0.12.0-*.whl
"""

from __future__ import annotations

import argparse
import io
import re
import zipfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "calibration" / "measured" / "kernel" / "aic_vllm_moe_perf.csv"
PACKAGE = "aiconfigurator-core==0.12.0"
SYSTEMS = ("h100_sxm", "h200_sxm", "a100_sxm", "b200_sxm")
TABLE = re.compile(r"(?:^|/)systems/data/(?P<system>[a-z0-9_]+)/moe/vllm/(?P<version>[^/]+)/moe_perf\.parquet$")
SEMVER = re.compile(r"^\d+\.\d+\.\d+$")
DISTRIBUTIONS = ("balanced", "power_law_1.01")
MAX_TP, MAX_EP = 8, 16
COLUMNS = ["system", "device", "framework", "version", "kernel_source", "op", "moe_dtype", "num_tokens", "hidden_size",
           "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution", "latency_ms", "source"]


def _tables(path: Path) -> dict[str, bytes]:
    """The vLLM MoE parquet files of the four systems, by path inside the package (a wheel or a folder)."""
    found: dict[str, bytes] = {}
    if path.is_dir():
        for file in path.rglob("moe_perf.parquet"):
            name = file.relative_to(path).as_posix()
            match = TABLE.search(name)
            if match and match["system"] in SYSTEMS:
                found[name] = file.read_bytes()
        return found
    with zipfile.ZipFile(path) as wheel:
        for name in wheel.namelist():
            match = TABLE.search(name)
            if match and match["system"] in SYSTEMS:
                found[name] = wheel.read(name)
    return found


def build(path: Path) -> pd.DataFrame:
    frames = []
    for name, data in sorted(_tables(path).items()):
        match = TABLE.search(name)
        raw = pd.read_parquet(io.BytesIO(data))
        raw = raw[raw["version"].astype(str).str.match(SEMVER)]
        distribution = next(d for d in DISTRIBUTIONS if (raw["distribution"] == d).any())
        raw = raw[(raw["distribution"] == distribution) & (raw["moe_tp_size"] <= MAX_TP) & (raw["moe_ep_size"] <= MAX_EP)]
        raw = raw.assign(system=match["system"], op="moe", latency_ms=raw["latency"],
                         source=f"{PACKAGE}:{name[name.index('systems/'):]}")
        frames.append(raw.reindex(columns=COLUMNS))
    if not frames:
        raise SystemExit(f"no systems/data/<system>/moe/vllm/*/moe_perf.parquet of {', '.join(SYSTEMS)} under {path}")
    table = pd.concat(frames, ignore_index=True)
    # Newest version per (system, dtype): the kernels vLLM runs now, one measurement of each shape.
    version_key = table["version"].map(lambda v: tuple(int(p) for p in v.split(".")))
    newest = version_key.groupby([table["system"], table["moe_dtype"]]).transform("max")
    table = table[version_key == newest]
    keys = ["system", "moe_dtype", "kernel_source", "hidden_size", "inter_size", "num_experts", "topk", "moe_tp_size",
            "moe_ep_size", "num_tokens"]
    return table.sort_values(keys).reset_index(drop=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiconfigurator", type=Path, required=True,
                        help="the aiconfigurator-core 0.12.0 wheel, or a folder it was unpacked into")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args()
    table = build(args.aiconfigurator)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out, index=False, float_format="%.6g")
    print(f"wrote {len(table)} rows to {args.out}")
    print(table.groupby(["system", "version", "moe_dtype", "kernel_source"]).size().to_string())


if __name__ == "__main__":
    main()
