"""Predict every row of a measured table and score the predictions.

One validator per table kind, behind :class:`Validator`: :class:`KernelValidator` (kernel tables:
latency of each GEMM, attention or all-reduce configuration), :class:`MemoryValidator` (vLLM
start-up memory logs: KV-cache tokens) and :class:`E2EValidator` (serving runs: aiconfigurator's closed-loop
rows and ``vllm bench serve`` results, through the serving simulator). Each returns one row per input row
with the measured and predicted values and, for a row it cannot predict, the reason; nothing is
dropped. :func:`summarize` gives the median and p90 absolute % error per slice.

Example:
    >>> import pandas as pd
    >>> rows = pd.DataFrame({"op": ["gemm", "all_gather"], "dtype": "bf16", "framework": "vllm", "system": "h100_sxm",
    ...                      "m": 1, "n": 4096, "k": 4096, "latency_ms": 0.013})
    >>> out = KernelValidator().predict(rows)
    >>> out["reason"].tolist()
    ['', "op 'all_gather' is not modelled"]
    >>> bool(0.005 < out.loc[0, "pred_latency_ms"] < 0.05)
    True
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from pydantic import ValidationError

from ..costmodels.architectures import resolve_model
from ..costmodels.errors import InputError
from ..costmodels.hardware import GPUSpec, get_gpu
from ..costmodels.hardware import GIB
from ..costmodels.deployment import Deployment
from ..costmodels.errors import one_line
from ..costmodels.memory import kv_capacity
from ..costmodels.serving.compiled import compile_deployment
from ..costmodels.serving.traffic import MAX_RATE_PER_S
from ..costmodels.engines.vllm import BLOCK_SIZE, parse_vllm_version
from ..costmodels.profile import PerformanceProfile
from ..costmodels.userfiles import Number, numeric_column, read_csv_table, shown
from .fit import AllReduceFit, AttentionFit, ElementwiseFit, FamilyFit, GemmFit, abs_pct_error
from .registry import load_profile
from .corpus import METRICS, STATS, predict_run, table_runs
from .tables import KERNEL_COLUMNS, normalize_kernel_frame, read_kernel_table

ProfileFor = Callable[[GPUSpec], PerformanceProfile]

_AMOUNT = Number(minimum=0)


def _read_csv(path: str | Path, kind: str, numbers: dict[str, Number] | None = None) -> pd.DataFrame:
    """A measured table, its ``numbers`` columns read strictly (a bad cell is named by line and column)."""
    return read_csv_table(path, f"{kind} table", columns=numbers)


def _require(frame: pd.DataFrame, columns: list[str], kind: str, name: str) -> None:
    missing = [c for c in columns if c not in frame]
    if missing:
        raise InputError(f"{kind} table '{name}' lacks the column(s) {', '.join(missing)}")


class Validator(ABC):
    """Predict the rows of one kind of measured table."""

    kind: str
    metrics: list[str]  # measured column -> pred_<name>, scored as abs % error
    slice_columns: list[str]

    def __init__(self, profile_for: ProfileFor | None = None):
        self.profile_for = profile_for or load_profile
        self._profiles: dict[str, PerformanceProfile] = {}

    def profile(self, gpu: GPUSpec) -> PerformanceProfile:
        if gpu.name not in self._profiles:
            self._profiles[gpu.name] = self.profile_for(gpu)
        return self._profiles[gpu.name]

    def read(self, path: str | Path) -> pd.DataFrame:
        return _read_csv(path, self.kind)

    @abstractmethod
    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        """One row per input row: id, slice columns, measured_*, pred_*, calibrated, reason."""

    def score(self, predictions: pd.DataFrame) -> pd.DataFrame:
        """Long table of absolute % errors: one row per (input row, metric) that was predicted."""
        parts = []
        for metric in self.metrics:
            ok = predictions[f"pred_{metric}"].notna() & predictions[f"measured_{metric}"].notna()
            part = predictions.loc[ok, ["id", "gpu", "framework", "calibrated"]].assign(
                slice=slice_label(predictions.loc[ok], self.slice_columns), table=self.kind, metric=metric,
                abs_pct_error=abs_pct_error(predictions.loc[ok, f"pred_{metric}"], predictions.loc[ok, f"measured_{metric}"]),
            )
            parts.append(part)
        return pd.concat(parts, ignore_index=True)


class KernelValidator(Validator):
    """Kernel tables (servopt's, aiconfigurator's or Vidur's layout): latency per configuration."""

    kind = "kernel"
    metrics = ["latency_ms"]
    slice_columns = ["gpu", "framework", "op", "dtype", "kv_cache_dtype"]

    def read(self, path: str | Path) -> pd.DataFrame:
        return read_kernel_table(path)

    def _fitter(self, op: str, dtype: str, num_gpus: float) -> FamilyFit | None:
        if op == "gemm":
            return GemmFit(dtype)
        if op in ("context_attention", "generation_attention"):
            return AttentionFit("prefill" if op == "context_attention" else "decode")
        if op == "all_reduce":
            return AllReduceFit()
        if op in ("elementwise", "memcpy"):
            return ElementwiseFit()
        return None

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        table = table if "gpu" in table else normalize_kernel_frame(table)
        table = table.reindex(columns=list(dict.fromkeys([*KERNEL_COLUMNS, *table.columns]))).reset_index(drop=True)
        out = pd.DataFrame({"id": table.index, "gpu": table["gpu"], "framework": table["framework"], "op": table["op"],
                            "dtype": table["dtype"], "kv_cache_dtype": table["kv_cache_dtype"], "measured_latency_ms": table["latency_ms"],
                            "pred_latency_ms": np.nan, "calibrated": False, "reason": ""})
        for (gpu_name, op, dtype, gpus), rows in table.groupby(["gpu", "op", "dtype", table["num_gpus"].fillna(0)], dropna=False):
            fitter = self._fitter(op, dtype, gpus)
            if fitter is None:
                out.loc[rows.index, "reason"] = f"op '{op}' is not modelled"
                continue
            try:
                gpu = get_gpu(gpu_name)
            except InputError:
                out.loc[rows.index, "reason"] = f"unknown GPU '{gpu_name}'"
                continue
            profile = self.profile(gpu)
            if op == "gemm" and not gpu.has_dtype(dtype):
                out.loc[rows.index, "reason"] = f"{gpu.name} has no native {dtype} math"
                continue
            out.loc[rows.index, "pred_latency_ms"] = fitter.predict_ms(profile, gpu, rows)
            out.loc[rows.index, "calibrated"] = profile.calibrated
        return out


def _number(value) -> float | None:
    """A numeric cell as :meth:`MemoryValidator.read` parsed it; None when the cell is empty."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return None
    return float(value)


def _whole(value) -> int | None:
    """A table cell as a whole number (None when empty)."""
    number = _number(value)
    return None if number is None else int(number)


def _release(text) -> str | None:
    """The vLLM release a table cell names ('0.19.0 (per results dir name)' is 0.19.0), None when it names none."""
    if text is None or (isinstance(text, float) and np.isnan(text)) or not str(text).strip():
        return None
    try:
        return ".".join(map(str, parse_vllm_version(str(text))))
    except InputError:
        return None


def _gpu_from_cell(value) -> GPUSpec | None:
    """A GPU named the way public logs name it ('A100 80GB (per filename)', 'H100 (80GB assumed)',
    'AMD MI300X (ROCm; ...)'); None when it is unknown or not stated."""
    if not isinstance(value, str) or value.strip().startswith("("):
        return None
    text = re.sub(r"\(.*?\)", "", value).strip().lower()
    text = re.sub(r"^(nvidia|amd|geforce)\s+", "", text)
    for candidate in (text, text.replace(" ", "-"), text.replace(" ", ""), text.split()[0] if text else ""):
        try:
            return get_gpu(candidate)
        except InputError:
            continue
    return None


class MemoryValidator(Validator):
    """vLLM start-up memory logs: the KV-cache tokens vLLM reported, predicted two ways.

    ``kv_cache_tokens`` is the whole prediction (:func:`plan_memory`: the GPU's memory budget less
    weights, activations and non-torch memory, cut into paged blocks); it needs the GPU, the
    memory utilization and the parallelism. ``kv_cache_tokens_from_memory`` starts from the KV pool
    the log states ("Available KV cache memory", per GPU) and checks the rest of the chain (bytes
    per token for the checkpoint's KV dtype, TP sharding, sliding-window groups, block rounding).
    Tables may give ``kv_cache_blocks`` (V0 logs print blocks) and ``block_size`` instead of the
    tokens, and ``max_num_batched_tokens`` / ``max_num_seqs`` (default: vLLM's for that GPU).
    """

    kind = "memory"
    metrics = ["kv_cache_tokens", "kv_cache_tokens_from_memory"]
    slice_columns = ["gpu", "framework", "model", "precision"]
    required = ["model"]
    # Hand-collected logs note a value's origin in parentheses ('0.9 (default; not set)').
    numbers = {**{c: Number(integer=True, minimum=1, annotated=True)
                  for c in ("tp", "pp", "dp", "max_model_len", "block_size", "max_num_batched_tokens", "max_num_seqs")},
               **{c: Number(minimum=0, annotated=True) for c in ("kv_cache_tokens", "kv_cache_blocks", "kv_cache_memory_gib")},
               "gpu_memory_utilization": Number(positive=True, maximum=1, annotated=True)}

    def read(self, path: str | Path) -> pd.DataFrame:
        frame = _read_csv(path, self.kind, self.numbers)
        _require(frame, self.required, self.kind, str(path))
        if "kv_cache_tokens" not in frame and "kv_cache_blocks" not in frame:
            raise InputError(f"memory table '{path}' needs a kv_cache_tokens or kv_cache_blocks column")
        return frame

    @staticmethod
    def measured_tokens(row: dict) -> float | None:
        tokens = _number(row.get("kv_cache_tokens"))
        if tokens is None and _number(row.get("kv_cache_blocks")) is not None:
            tokens = _number(row["kv_cache_blocks"]) * (_number(row.get("block_size")) or BLOCK_SIZE)
        return tokens

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        records = []
        for i, row in enumerate(table.to_dict("records")):
            ref = row.get("log_file") or row.get("source_url_or_ref") or i
            quant = row.get("quantization")
            record = {"id": ref, "gpu": str(row.get("gpu")), "framework": "vllm", "model": str(row["model"]),
                      "precision": quant if isinstance(quant, str) and quant.strip() not in ("", "none") else "bf16",
                      "measured_kv_cache_tokens": self.measured_tokens(row), "pred_kv_cache_tokens": np.nan,
                      "measured_kv_cache_tokens_from_memory": self.measured_tokens(row),
                      "pred_kv_cache_tokens_from_memory": np.nan, "calibrated": True, "reason": ""}
            record["reason"] = self._predict_row(row, record)
            records.append(record)
        return pd.DataFrame(records)

    def _predict_row(self, row: dict, record: dict) -> str:
        """Fill the predictions of one row; returns why a prediction is missing ('' when none is)."""
        if str(row.get("status", "ok")) != "ok":
            return f"run status '{row.get('status')}' (no KV figure logged)"
        if record["measured_kv_cache_tokens"] is None:
            return "the log gives no KV-cache token or block count to compare with"
        try:
            spec = resolve_model(str(row["model"])).spec
        except InputError as err:
            return f"model not resolvable: {err}"
        tp, pp = int(_number(row.get("tp")) or 0), int(_number(row.get("pp")) or 1)
        if not tp:
            return "tensor parallelism not stated"
        kv_text = str(row.get("kv_cache_dtype") or "auto")
        kv_dtype = "fp8" if kv_text.startswith("fp8") else "auto"
        block = int(_number(row.get("block_size")) or BLOCK_SIZE)
        reasons = []
        memory_gib = _number(row.get("kv_cache_memory_gib"))
        if memory_gib is not None:
            record["pred_kv_cache_tokens_from_memory"] = kv_capacity(spec, memory_gib * GIB, kv_dtype, tp, pp, block)[1]
        else:
            reasons.append("no KV memory stated")
        gpu = _gpu_from_cell(row.get("gpu"))
        utilization = _number(row.get("gpu_memory_utilization"))
        if gpu is None or utilization is None:
            reasons.append("GPU or gpu_memory_utilization not stated: whole-budget prediction skipped")
            return "; ".join(reasons)
        record["gpu"] = gpu.name
        # The deployment the log describes, compiled as every prediction is: limits the log leaves
        # out are vLLM's defaults for that GPU and that vLLM release.
        try:
            deployment = Deployment(
                gpu=gpu.name, tp=tp, pp=pp, data_parallel_size=int(_number(row.get("dp")) or 1), kv_cache_dtype=kv_dtype,
                gpu_memory_utilization=float(utilization), block_size=block, vllm_version=_release(row.get("vllm_version")),
                max_model_len=int(_number(row.get("max_model_len")) or spec.max_context),
                max_num_batched_tokens=_whole(row.get("max_num_batched_tokens")), max_num_seqs=_whole(row.get("max_num_seqs")))
            compiled = compile_deployment(spec, deployment, gpu, PerformanceProfile.spec_default(gpu))
        except (InputError, ValidationError) as err:
            return f"not a deployment servopt can compile: {one_line(str(err))}"
        if compiled.error:
            return compiled.error
        record["pred_kv_cache_tokens"] = compiled.roles[0].plan.kv_capacity_tokens
        return ""


class E2EValidator(Validator):
    """Measured serving runs, each simulated as it was run (:mod:`.corpus`): aiconfigurator's
    closed-loop silicon rows (mean TTFT and TPOT) and ``vllm bench serve`` results (mean, median and
    P99 of TTFT, TPOT and ITL, whichever the table has)."""

    kind = "e2e"
    metrics = [f"{stat}_{metric}_ms" for metric in METRICS for stat in STATS]
    slice_columns = ["gpu", "framework", "model", "precision"]

    # aiconfigurator's silicon layout: its counts and latencies are read strictly (empty, 0 or 1 all
    # say a parallelism is not used); vllm bench tables keep free-text cells (the corpus reads them).
    silicon_numbers = {**{c: Number(integer=True, minimum=0) for c in (
        "isl", "osl", "batch_size", "tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size",
        "silicon_concurrency")}, "silicon_ttft_ms": _AMOUNT, "silicon_tpot_ms": _AMOUNT}

    # vllm bench tables: their numbers are checked (a count of 400 digits is refused by line and column),
    # their cells left as written for the corpus; request_rate may say inf (vllm bench's --request-rate inf).
    bench_numbers = {**{c: Number(integer=True, minimum=0) for c in (
        "num_gpus", "tp", "pp", "input_len", "output_len", "num_prompts", "max_concurrency", "completed")},
        **{c: _AMOUNT for c in ("range_ratio", "duration_s", "request_throughput", "output_throughput",
                                *(f"{stat}_{metric}_ms" for metric in METRICS for stat in STATS))},
        "request_rate": Number(minimum=0, maximum=MAX_RATE_PER_S)}

    def read(self, path: str | Path) -> pd.DataFrame:
        frame = _read_csv(path, self.kind)
        where = f"{self.kind} table '{shown(path)}'"
        if "silicon_ttft_ms" in frame:
            for column, number in self.silicon_numbers.items():
                if column in frame:
                    frame[column] = numeric_column(frame[column], number, where, column)
        else:
            for column, number in self.bench_numbers.items():
                if column in frame:
                    cells = frame[column]
                    if column == "request_rate":
                        cells = cells.mask(cells.astype("string").str.strip().str.lower().isin(["inf", "infinity"]))
                    numeric_column(cells, number, where, column)
        runs = table_runs(Path(path), frame)
        return pd.DataFrame({"run": runs})

    def __init__(self, profile_for: ProfileFor | None = None, explain: bool = False):
        super().__init__(profile_for)
        self.explain = explain

    def predict(self, table: pd.DataFrame) -> pd.DataFrame:
        from .explain import explain_run

        records = []
        for run in table["run"]:
            record = {"id": run.extra.get("row_id", run.run_id), "gpu": run.gpu, "framework": "vllm", "model": run.model,
                      "precision": run.dtype, "calibrated": False, "reason": run.skip}
            if run.skip.startswith("framework '"):
                record["framework"] = run.skip.split("'")[1]
            for metric in self.metrics:
                record[f"measured_{metric}"] = run.measured.get(metric, np.nan)
                record[f"pred_{metric}"] = np.nan
            if not run.skip:
                try:
                    profile = self.profile(get_gpu(run.deployment.gpu))
                    predicted = predict_run(run, profile)
                    record.update({f"pred_{m}": v for m, v in predicted.items() if m in self.metrics})
                    record["calibrated"] = profile.calibrated
                    if self.explain:
                        record.update(explain_run(run, profile))
                except InputError as err:
                    record["reason"] = str(err)
            records.append(record)
        return pd.DataFrame(records)


VALIDATORS: dict[str, type[Validator]] = {"kernel": KernelValidator, "memory": MemoryValidator, "e2e": E2EValidator}


def summarize(scores: pd.DataFrame) -> pd.DataFrame:
    """Median and p90 absolute % error per table, metric and slice."""
    by = ["table", "metric", "gpu", "framework", "slice", "calibrated"]
    return (scores.groupby(by, dropna=False)["abs_pct_error"]
            .agg(rows="size", median_abs_pct="median", p90_abs_pct=lambda e: float(np.percentile(e, 90)))
            .reset_index())


def slice_label(scores: pd.DataFrame, columns: list[str]) -> pd.Series:
    """The slice columns beyond GPU and framework joined into one label (model/precision or op/dtype)."""
    rest = [c for c in columns if c not in ("gpu", "framework")]
    values = scores[rest].astype("string").fillna("-").to_numpy()
    return pd.Series(["/".join(row) for row in values], index=scores.index, dtype="object")
