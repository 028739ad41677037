"""Kernel tables: one tidy layout for every microbenchmark servopt measures, imports or fits.

A kernel table has one row per measured kernel configuration, with the columns of
``KERNEL_COLUMNS``: who measured it (``system``, ``device``, ``framework``, ``version``,
``kernel_source``), what (``op`` and ``dtype``), its shape (the columns that op uses, others empty),
and ``latency_ms``. The ops are

- ``gemm``: [m, k] x [k, n] (``m``, ``n``, ``k``);
- ``context_attention``: prefill of ``batch_size`` sequences of ``isl`` tokens (``num_heads``,
  ``num_key_value_heads``, ``head_dim``, ``kv_cache_dtype``);
- ``generation_attention``: one decode token for ``batch_size`` sequences with ``step`` cached tokens;
- ``all_reduce`` (and other collectives): ``message_bytes`` over ``num_gpus`` GPUs;
- ``memcpy`` and ``elementwise``: ``message_bytes`` moved through device memory;
- ``moe``: one MoE layer's routed experts on one GPU (a fused-MoE kernel): ``num_tokens`` tokens of
  ``hidden_size``, ``topk`` of ``num_experts`` experts of ``inter_size`` each, the experts split
  ``moe_tp_size`` ways (each GPU holds ``inter_size / moe_tp_size`` of every expert) or spread over
  ``moe_ep_size`` GPUs, routed as ``distribution`` says; ``dtype`` is the kernel's weight format
  (:data:`MOE_DTYPES`). Malformed MoE rows are refused with the row and the column named.

:func:`read_kernel_table` reads servopt's own tables and the layouts of aiconfigurator-core's
database (its CSV exports in ../shared/data/measured/kernel and its parquet files) and Vidur's
per-operator profiles, and adds a ``gpu`` column with servopt's GPU name.

Example:
    >>> import io
    >>> text = "system,device,framework,version,kernel_source,gemm_dtype,m,n,k,latency_ms,source\\n"
    >>> text += "h100_sxm,NVIDIA H100,VLLM,0.24.0,torch,bfloat16,1,4096,4096,0.0123,doc\\n"
    >>> table = read_kernel_table(io.StringIO(text), name="example")
    >>> table.loc[0, ["gpu", "op", "dtype", "framework"]].tolist(), float(table.loc[0, "latency_ms"])
    (['h100', 'gemm', 'bf16', 'vllm'], 0.0123)
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd

from ..costmodels.errors import InputError, one_line
from ..costmodels.hardware import builtin_catalog
from ..costmodels.outfiles import write_bytes, write_csv
from ..costmodels.userfiles import MAX_DATA_BYTES, Number, numeric_column, read_bytes, read_csv_table, shown

MOE_SHAPE_COLUMNS = ["num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size"]
SHAPE_COLUMNS = [
    "m", "n", "k", "batch_size", "isl", "step", "num_heads", "num_key_value_heads", "head_dim",
    "num_gpus", "message_bytes",
    *MOE_SHAPE_COLUMNS,
]
KERNEL_COLUMNS = [
    "system", "device", "framework", "version", "kernel_source", "op", "dtype", "kv_cache_dtype",
    *SHAPE_COLUMNS, "distribution", "latency_ms", "source",
]
OPS = ("gemm", "context_attention", "generation_attention", "all_reduce", "memcpy", "elementwise", "moe")

# Upstream dtype spellings -> servopt's math dtype names.
DTYPES = {
    "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16", "fp8": "fp8",
    "float8_e4m3fn": "fp8", "fp8_block": "fp8", "int8": "int8", "float32": "fp32", "fp32": "fp32", "nvfp4": "fp4",
}
# fp4 is NVFP4 (Blackwell's fp4 math): 4-bit values with one fp8 scale per 16.
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "int8": 1, "fp32": 4, "fp4": 0.5 + 1 / 16}
# Fused-MoE weight formats (aiconfigurator's moe_dtype spellings) -> servopt's MoE kernel names
# (PerformanceProfile.moe): fp8 is per-tensor W8A8, fp8_block 128x128 block-scaled W8A8, mxfp4 the
# gpt-oss checkpoint's weights with 16-bit activations, int4 W4A16 (Marlin), nvfp4 W4A4.
MOE_DTYPES = {
    "bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8_block",
    "w4a16_mxfp4": "mxfp4", "mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "mxfp4_mxfp8", "mxfp4_mxfp8": "mxfp4_mxfp8",
    "int4_wo": "int4", "int4": "int4", "nvfp4": "nvfp4",
}

# Device-name fragments -> catalog names, most specific first (torch reports e.g. "NVIDIA H100 80GB HBM3").
_DEVICE_PATTERNS = [
    ("H200", "h200"), ("H100 PCIe", "h100-pcie"), ("H100", "h100"), ("A100-SXM4-40GB", "a100-40gb"),
    ("A100-PCIE-40GB", "a100-40gb"), ("A100", "a100-80gb"), ("GB200", "gb200"), ("B200", "b200"), ("GB300", "gb300"),
    ("B300", "b300"), ("L40S", "l40s"),
    ("L4", "l4"), ("A10G", "a10g"), ("4090", "rtx4090"), ("MI300X", "mi300x"),
]


def gpu_name_for(system: str | None, device: str | None) -> str:
    """servopt's GPU name for a table's ``system`` (aiconfigurator/Vidur name) or ``device`` string.

    Example:
        >>> gpu_name_for("a100_sxm", None), gpu_name_for("h100_dgx", None), gpu_name_for(None, "NVIDIA H200")
        ('a100-80gb', 'h100', 'h200')
        >>> gpu_name_for("cpu", "Intel Xeon")
        'cpu'
    """
    catalog = builtin_catalog()
    for candidate in (system, str(system or "").replace("_dgx", "").replace("_pairwise_nvlink", "")):
        if candidate and candidate in catalog:
            return catalog.get(candidate).name
    for fragment, name in _DEVICE_PATTERNS:
        if device and fragment.lower() in str(device).lower():
            return name
    return str(system or device or "unknown").lower()


# Numeric columns of every layout read here, by name or by suffix (Vidur's per-operator columns).
_WHOLE, _COUNT, _TIME, _AMOUNT = Number(integer=True, minimum=0), Number(integer=True, minimum=1), \
    Number(positive=True), Number(minimum=0)
KERNEL_NUMBERS = {
    **{c: _COUNT for c in ("m", "n", "k", "batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim",
                           "num_gpus", "num_tokens", "tp", "n_head", "n_kv_head", "n_embd", "n_expanded_embd",
                           "num_workers", "devices_per_node", "beam_width")},
    **{c: _WHOLE for c in ("step", "window_size")},
    **{c: _AMOUNT for c in ("message_size", "message_bytes", "size_bytes", "tflops")},
    **{c: _TIME for c in ("latency_ms", "latency", "median_ms")},
}
_SUFFIX_NUMBERS = {"_median_ms": _AMOUNT, "_mean_ms": _AMOUNT, "_std_ms": _AMOUNT, "_N": _COUNT, "_K": _COUNT}

# Columns each layout needs beyond its signature (checked before use, so a missing one is named).
_VIDUR_MLP = ["gpu", "dtype", "num_tokens", "tp", "n_embd", "n_expanded_embd",
              *(f"{p}_{d}" for p in ("qkv", "o", "up", "down") for d in "NK"),
              *(f"{op}_median_ms" for op in ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj",
                                             "input_layernorm", "post_attention_layernorm", "mlp_act"))]
_VIDUR_COLLECTIVES = ["system", "collective", "num_workers", "devices_per_node", "size_bytes", "median_ms"]


def _kernel_number(column: str) -> Number | None:
    if column in KERNEL_NUMBERS:
        return KERNEL_NUMBERS[column]
    return next((number for suffix, number in _SUFFIX_NUMBERS.items() if column.endswith(suffix)), None)


def _require_columns(raw: pd.DataFrame, columns: list[str], name: str, layout: str) -> None:
    missing = [c for c in columns if c not in raw]
    if missing:
        raise InputError(f"{name}: a {layout} table needs the column(s) {', '.join(missing)}")


# The shape columns each op is timed by: a row of that op without them cannot be fitted or predicted.
OP_SHAPES = {
    "gemm": ["dtype", "m", "n", "k"],
    "context_attention": ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"],
    "generation_attention": ["batch_size", "step", "num_heads", "num_key_value_heads", "head_dim"],
    "all_reduce": ["num_gpus", "message_bytes"],
    "memcpy": ["message_bytes"],
    "elementwise": ["message_bytes"],
}


def _check_filled(out: pd.DataFrame, name: str, flat: bool) -> None:
    """Refuse rows that lack their latency or their op's shape (the fit would silently drop them)."""
    for op, columns in OP_SHAPES.items():
        rows = out[out["op"] == op]
        for column in ["latency_ms", *columns]:
            empty = rows.index[rows[column].isna()]
            if len(empty):
                where = f"line {empty[0] + 2}" if flat else f"row {empty[0] + 1} of its per-op rows"
                raise InputError(f"{name}: a {op} row ({where}) has no {column}; fill it in or drop the row")


def _check_moe_rows(frame: pd.DataFrame, name: str) -> None:
    """Refuse a malformed MoE row with one line naming its CSV line and column."""
    moe = frame[frame["op"].astype("string").str.lower() == "moe"]
    if moe.empty:
        return
    for col in [*MOE_SHAPE_COLUMNS, "latency_ms", "dtype"]:
        if col not in moe:
            raise InputError(f"{name}: MoE rows need a '{col}' column")

    def refuse(bad: pd.Series, message: str) -> None:
        if bad.any():
            index = bad.index[np.argmax(bad.to_numpy())]
            raise InputError(f"{name}: line {index + 2}: {message.format(value=moe.at[index, col])}")

    values = {}
    for col in [*MOE_SHAPE_COLUMNS, "latency_ms"]:
        values[col] = pd.to_numeric(moe[col], errors="coerce")
        refuse(~(np.isfinite(values[col]) & (values[col] > 0)), f"column '{col}' must be a positive number, got {{value!r}}")
        if col != "latency_ms":
            refuse(values[col] != np.floor(values[col]), f"column '{col}' must be a whole number, got {{value!r}}")
    col = "dtype"
    known = ", ".join(sorted(set(MOE_DTYPES.values())))
    refuse(~moe[col].astype("string").str.strip().str.lower().isin(list(MOE_DTYPES)),
           f"column 'dtype' must be one of {known}, got {{value!r}}")
    col = "topk"
    refuse(values["topk"] > values["num_experts"], "column 'topk' cannot exceed num_experts, got {value!r}")
    col = "moe_ep_size"
    refuse(values["num_experts"] % values["moe_ep_size"] != 0, "column 'moe_ep_size' must divide num_experts, got {value!r}")


def _dtype_name(op: object, dtype: object) -> object:
    if not isinstance(dtype, str):
        return dtype
    return MOE_DTYPES.get(dtype, dtype) if op == "moe" else DTYPES.get(dtype, dtype)


def _tidy(frame: pd.DataFrame, name: str = "table", flat: bool = True) -> pd.DataFrame:
    if "op" in frame:
        _check_moe_rows(frame.reset_index(drop=True), name)
    out = frame.reindex(columns=KERNEL_COLUMNS)
    for col in SHAPE_COLUMNS + ["latency_ms"]:
        out[col] = pd.to_numeric(out[col], errors="coerce")
    for col in ("framework", "dtype", "kv_cache_dtype", "op"):
        out[col] = out[col].astype("string").str.lower()
    out["dtype"] = [_dtype_name(op, d) for op, d in zip(out["op"], out["dtype"])]
    out["kv_cache_dtype"] = out["kv_cache_dtype"].map(lambda d: DTYPES.get(d, d) if isinstance(d, str) else d)
    out["gpu"] = [gpu_name_for(s, d) for s, d in zip(out["system"], out["device"])]
    _check_filled(out, name, flat)
    return out.reset_index(drop=True)


def _from_aiconfigurator(raw: pd.DataFrame, op_hint: str | None, name: str) -> pd.DataFrame:
    """aiconfigurator-core's layouts: gemm_dtype / attn_dtype / collective columns; latency in ms."""
    df = raw.rename(columns={"latency": "latency_ms"}).copy()
    if "moe_dtype" in df:
        df["op"], df["dtype"] = "moe", df["moe_dtype"]
    elif "gemm_dtype" in df:
        _require_columns(df, ["m", "n", "k"], name, "GEMM")
        df["op"], df["dtype"] = "gemm", df["gemm_dtype"]
    elif "attn_dtype" in df:
        _require_columns(df, ["batch_size", "isl", "num_heads", "num_key_value_heads", "head_dim"], name, "attention")
        df["dtype"] = df["attn_dtype"]
        if op_hint in ("context_attention", "generation_attention"):
            df["op"] = op_hint
        else:
            _require_columns(df, ["step"], name, "attention")
            # Context rows carry step 0; decode rows count the cached tokens in step.
            df["op"] = np.where(pd.to_numeric(df["step"]) > 0, "generation_attention", "context_attention")
    else:
        dtype_col = next((c for c in ("dtype", "nccl_dtype", "allreduce_dtype", "comm_dtype") if c in df), None)
        if dtype_col is None or "message_size" not in df or "num_gpus" not in df:
            raise InputError(f"{name}: a collective table needs message_size, num_gpus and a dtype column "
                             "(nccl_dtype/allreduce_dtype)")
        df["dtype"] = df[dtype_col]
        df["op"] = df.get("op_name", "all_reduce")
        if "message_bytes" not in df:
            per_value = df["dtype"].map(lambda d: DTYPE_BYTES.get(DTYPES.get(str(d).lower(), ""), np.nan))
            df["message_bytes"] = pd.to_numeric(df["message_size"]) * per_value
        if "backend" in df:
            df["kernel_source"] = df.get("kernel_source", pd.Series(np.nan, index=df.index)).fillna(df["backend"])
    return df


def _from_vidur_mlp(raw: pd.DataFrame) -> pd.DataFrame:
    """Vidur's per-operator profiles (one wide row per token count): GEMM and elementwise rows."""
    rows = []
    common = {"system": raw["gpu"], "device": raw["gpu"], "framework": "vidur", "version": "",
              "dtype": raw["dtype"], "source": raw.get("source", "")}
    tokens = raw["num_tokens"].astype(float)
    for proj, prefix in (("attn_pre_proj", "qkv"), ("attn_post_proj", "o"), ("mlp_up_proj", "up"), ("mlp_down_proj", "down")):
        rows.append(pd.DataFrame({**common, "op": "gemm", "kernel_source": proj, "m": tokens,
                                  "n": raw[f"{prefix}_N"], "k": raw[f"{prefix}_K"], "latency_ms": raw[f"{proj}_median_ms"]}))
    hidden = raw["n_embd"].astype(float)
    inter = raw["n_expanded_embd"].astype(float) / raw["tp"].astype(float)
    value_bytes = 2.0
    # Bytes each elementwise kernel moves: RMSNorm reads x and writes y; the gated activation reads
    # gate and up and writes their product; the residual add (PyTorch's own kernel) reads both
    # operands and writes the sum. Below the L2 size the add can beat the HBM peak on these bytes.
    moved = {"input_layernorm": 2 * hidden, "post_attention_layernorm": 2 * hidden, "mlp_act": 3 * inter,
             "add": 3 * hidden}
    for name, values in moved.items():
        rows.append(pd.DataFrame({**common, "op": "elementwise", "kernel_source": name,
                                  "message_bytes": tokens * values * value_bytes, "latency_ms": raw[f"{name}_median_ms"]}))
    # An empty cell of a wide row is an operator Vidur did not profile at that shape: no measurement.
    table = pd.concat(rows, ignore_index=True)
    return table[table["latency_ms"].notna()].reset_index(drop=True)


def _from_vidur_collectives(raw: pd.DataFrame) -> pd.DataFrame:
    """Vidur's torch.distributed profiles: single-node rows only (all GPUs on one NVLink domain)."""
    one_node = raw[raw["devices_per_node"] == raw["num_workers"]]
    return pd.DataFrame({
        "system": one_node["system"], "device": one_node["system"], "framework": "vidur", "version": "",
        "kernel_source": "torch.distributed", "op": one_node["collective"], "dtype": "fp16",
        "num_gpus": one_node["num_workers"], "message_bytes": one_node["size_bytes"],
        "latency_ms": one_node["median_ms"], "source": one_node.get("source", ""),
    })


def _device_alternatives(device: str) -> list[str]:
    """The catalog GPUs a public row names: one, or each of "H100 or H200 (SM 9.0)" (one architecture,
    one kernel). A row that only guesses its GPU ("unknown (likely B200)") names none."""
    text = str(device)
    if text.lower().startswith("unknown"):
        return []
    names = [gpu_name_for(None, part) for part in text.split("(")[0].split(" or ")]
    catalog = builtin_catalog()
    known = [n for n in names if n in catalog]
    if len(known) != len(names) or len({catalog.get(n).architecture for n in known}) != 1:
        return []
    return known


def _from_public_collectives(raw: pd.DataFrame) -> pd.DataFrame:
    """Collective timings gathered from public sources (``calibration/measured/kernel/allreduce_public.csv``:
    one row per source, GPU, GPU count, implementation and message size, with the source's own
    implementation name in ``implementation``); a row naming two GPUs of one architecture counts for each.
    Rows whose source gives no exact message size (a label such as '47.84 MiB'; ``message_bytes`` left
    empty there) stay in the file as published and are not read."""
    rows = []
    for row in raw[raw["message_bytes"].notna()].to_dict("records"):
        source = str(row.get("source", ""))
        framework = next((f for f in ("vllm", "sglang", "tensorrt", "megatron") if f in source.lower()), "public")
        for gpu in _device_alternatives(row.get("gpu", "")):
            rows.append({"system": gpu, "device": gpu, "framework": framework, "version": "",
                         "kernel_source": row.get("implementation"), "op": row.get("collective"),
                         "dtype": row.get("dtype"), "num_gpus": row.get("num_gpus"),
                         "message_bytes": row.get("message_bytes"), "latency_ms": row.get("latency_ms"),
                         "source": source})
    return pd.DataFrame(rows, columns=["system", "device", "framework", "version", "kernel_source", "op", "dtype",
                                       "num_gpus", "message_bytes", "latency_ms", "source"])


def normalize_kernel_frame(raw: pd.DataFrame, name: str = "table", op_hint: str | None = None) -> pd.DataFrame:
    """Bring a raw frame in any supported layout into the tidy kernel layout."""
    if raw.empty:
        raise InputError(f"{name}: the table has no rows")
    if "op" in raw and "latency_ms" in raw:
        return _tidy(raw.rename(columns={"moe_dtype": "dtype"}) if "dtype" not in raw else raw, name)
    if "attn_pre_proj_median_ms" in raw:
        _require_columns(raw, _VIDUR_MLP, name, "Vidur per-operator")
        return _tidy(_from_vidur_mlp(raw), name, flat=False)
    if "collective" in raw and "median_ms" in raw:
        _require_columns(raw, _VIDUR_COLLECTIVES, name, "Vidur collectives")
        return _tidy(_from_vidur_collectives(raw), name)
    if {"collective", "implementation", "message_bytes", "latency_ms"} <= set(raw.columns):
        return _tidy(_from_public_collectives(raw), name)
    if "latency" in raw or "latency_ms" in raw:
        return _tidy(_from_aiconfigurator(raw, op_hint, name), name)
    raise InputError(
        f"{name}: not a kernel table: expected an 'op' and 'latency_ms' column (servopt), aiconfigurator's "
        "gemm_dtype/attn_dtype/message_size columns, or Vidur's *_median_ms columns"
    )


def read_raw_table(path: str | Path | io.StringIO, name: str | None = None) -> pd.DataFrame:
    """One table as stored (CSV or parquet), its known numeric columns checked cell by cell."""
    name = name or str(path)
    if str(path).endswith(".parquet"):
        raw = _read_parquet(path)
    else:
        raw = read_csv_table(path, "kernel table", name)
    where = f"kernel table '{shown(name)}'"
    for column in raw.columns:
        number = _kernel_number(str(column))
        if number is not None:
            raw[column] = numeric_column(raw[column], number, where, str(column))
    return raw


def read_kernel_table(path: str | Path | io.StringIO, name: str | None = None) -> pd.DataFrame:
    """Read one kernel table (CSV or parquet) into the tidy layout with a ``gpu`` column."""
    name = name or str(path)
    return normalize_kernel_frame(read_raw_table(path, name), name)


def kernel_table_files(*folders: str | Path) -> list[Path]:
    """The kernel tables in ``folders`` (CSV, gzip-compressed CSV, parquet), sorted within each folder."""
    patterns = ("*.csv", "*.csv.gz", "*.parquet")
    return [path for folder in folders for path in sorted(p for pattern in patterns for p in Path(folder).glob(pattern))]


def read_kernel_tables(paths: list[str | Path]) -> pd.DataFrame:
    """Read and stack several kernel tables."""
    if not paths:
        raise InputError("give at least one kernel table")
    return pd.concat([read_kernel_table(p) for p in paths], ignore_index=True)


def _require_pyarrow(path: str | Path) -> None:
    try:
        import pyarrow  # noqa: F401  (pandas needs it for parquet; optional extra "parquet")
    except ImportError:
        raise InputError(f"'{path}' is parquet, which needs pyarrow: pip install 'servopt[parquet]'") from None


def _read_parquet(path: str | Path) -> pd.DataFrame:
    _require_pyarrow(path)
    data = read_bytes(path, "parquet file", MAX_DATA_BYTES)  # a regular file of bounded size, as every input
    try:
        return pd.read_parquet(io.BytesIO(data))
    except (OSError, ValueError) as err:
        raise InputError(f"parquet file '{shown(path)}' cannot be read: {one_line(str(err))[:160]}") from None


def write_table(table: pd.DataFrame, path: str | Path) -> Path:
    """Write a table as CSV, or parquet when the name ends in .parquet."""
    path = Path(path)
    if path.suffix == ".parquet":
        _require_pyarrow(path)
        buffer = io.BytesIO()
        table.to_parquet(buffer, index=False)
        return write_bytes(path, buffer.getvalue())
    return write_csv(path, table)
