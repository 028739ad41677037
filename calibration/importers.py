"""Import other tools' measurements: aiconfigurator-core's kernel database and ``vllm bench serve`` results.

:func:`import_aiconfigurator` reads one system and framework of aiconfigurator-core's database
(``aiconfigurator_core/systems/data/<system>/<op>/<framework>/<version>/*.parquet``, or the same
layout as CSV) into a tidy kernel table. :func:`read_vllm_bench` reads a ``vllm bench serve`` (or
``benchmark_serving.py``) result JSON into the traffic it measured, and :func:`fit_step_overhead`
fits the per-step framework overhead of a profile so that the serving simulator reproduces the
measured median TPOT of one or more such runs.

Example:
    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "bench.json"
    >>> _ = path.write_text(json.dumps({"model_id": "m", "request_rate": 4.0, "max_concurrency": None,
    ...     "input_lens": [100, 200], "output_lens": [50, 50], "median_tpot_ms": 20.0, "median_ttft_ms": 40.0}))
    >>> run = read_vllm_bench(path)
    >>> run.traffic.arrival.kind, run.traffic.arrival.rate_per_s, run.median_tpot_ms
    ('poisson', 4.0, 20.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import numpy as np
import pandas as pd
from pydantic import AllowInfNan, ConfigDict, Field, model_validator
from scipy.optimize import minimize_scalar

from ..costmodels.architectures import ModelSpec
from ..costmodels.deployment import Deployment
from ..costmodels.errors import MAX_TOKENS, InputError, Spec, validate_spec
from ..costmodels.hardware import GPUSpec
from ..costmodels.profile import PerformanceProfile
from ..costmodels.serving.traffic import MAX_BENCHMARK_REQUESTS, MAX_CONCURRENCY, MAX_RATE_PER_S, Traffic
from ..costmodels.userfiles import read_json_object, shown
from .tables import normalize_kernel_frame, read_raw_table

# aiconfigurator op folder -> the tables in it that servopt fits (file stem -> op hint).
AIC_TABLES = {
    "gemm": {"gemm_perf": "gemm"},
    "attention": {"context_attention_perf": "context_attention", "generation_attention_perf": "generation_attention"},
    "comm": {"custom_allreduce_perf": "all_reduce", "nccl_perf": None},
}


def _version_key(version: str) -> tuple:
    return tuple(int(p) if p.isdigit() else -1 for p in version.replace("rc", ".").replace("post", ".").split("."))


def _systems_dir(path: Path) -> Path:
    for candidate in (path, path / "systems" / "data", path / "aiconfigurator_core" / "systems" / "data"):
        if candidate.is_dir() and any((system / "gemm").is_dir() for system in candidate.iterdir()):
            return candidate
    raise InputError(f"--aiconfigurator '{path}': no systems/data/<system>/gemm folder below it "
                     "(give the aiconfigurator_core package folder or its systems/data)")


def import_aiconfigurator(path: str | Path, system: str, framework: str = "vllm", version: str | None = None) -> pd.DataFrame:
    """The GEMM, attention and all-reduce tables of one system and framework as one tidy table.

    The newest version folder is used unless ``version`` is given; NCCL tables come from
    ``comm/nccl/<newest>``.
    """
    data = _systems_dir(Path(path))
    root = data / system
    if not root.is_dir():
        known = ", ".join(sorted(p.name for p in data.iterdir() if p.is_dir()))
        raise InputError(f"--system '{system}' is not in {data}; systems there: {known}")
    frames = []
    for op_dir, tables in AIC_TABLES.items():
        for fw in ([framework, "nccl"] if op_dir == "comm" else [framework]):
            base = root / op_dir / fw
            if not base.is_dir():
                continue
            versions = sorted((p.name for p in base.iterdir() if p.is_dir()), key=_version_key)
            chosen = version if (version and fw == framework) else (versions[-1] if versions else None)
            if chosen is None or not (base / chosen).is_dir():
                raise InputError(f"{base}: no version folder '{version}'; versions there: {', '.join(versions)}")
            for stem, op_hint in tables.items():
                for file in sorted((base / chosen).glob(f"{stem}.*")):
                    if file.suffix not in (".parquet", ".csv"):
                        continue
                    raw = read_raw_table(file).assign(system=system, source=f"aiconfigurator-core:systems/data/{file.relative_to(data)}")
                    if "framework" not in raw:
                        raw["framework"] = fw
                    if "version" not in raw:
                        raw["version"] = chosen
                    frames.append(normalize_kernel_frame(raw, str(file), op_hint))
    if not frames:
        raise InputError(f"no gemm/attention/comm tables for framework '{framework}' under {root}")
    table = pd.concat(frames, ignore_index=True)
    # aiconfigurator names frameworks in its own spelling inside the files; keep the folder's.
    table.loc[table["framework"].isin([framework.upper(), framework.capitalize(), framework.lower()]), "framework"] = framework
    return table


@dataclass(frozen=True)
class BenchRun:
    """One ``vllm bench serve`` result: the traffic it sent and the latencies it measured."""

    path: str
    model_id: str
    traffic: Traffic
    num_requests: int
    median_tpot_ms: float
    median_ttft_ms: float | None


BenchLength = Annotated[int, Field(ge=0, le=MAX_TOKENS)]


class _BenchResult(Spec):
    """The fields of a ``vllm bench serve --save-result`` JSON that servopt reads (others are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model_id: str | None = None
    request_rate: Annotated[float, AllowInfNan(True)] | Literal["inf"] | None = None
    burstiness: float | None = Field(default=None, gt=0, le=1e6)
    max_concurrency: int | None = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    input_lens: list[BenchLength] = Field(min_length=1, max_length=MAX_BENCHMARK_REQUESTS)
    output_lens: list[BenchLength] = Field(min_length=1, max_length=MAX_BENCHMARK_REQUESTS)
    median_tpot_ms: float = Field(gt=0, le=1e7)
    median_ttft_ms: float | None = Field(default=None, ge=0, le=1e9)

    @model_validator(mode="after")
    def _check(self) -> _BenchResult:
        if len(self.input_lens) != len(self.output_lens):
            raise ValueError(f"input_lens ({len(self.input_lens)}) and output_lens ({len(self.output_lens)}) must "
                             "list the same requests")
        rate = self.request_rate
        if isinstance(rate, float) and (math.isnan(rate) or rate <= 0 or math.isfinite(rate) and rate > MAX_RATE_PER_S):
            raise ValueError(f"request_rate must be a positive number up to {MAX_RATE_PER_S:g} or 'inf', not {rate}")
        return self

    def histogram(self, field: str, source: str) -> dict:
        """Lengths of the completed requests (vllm bench records 0 for failed ones) as a histogram."""
        lengths = np.asarray([v for v in getattr(self, field) if v > 0], dtype=int)
        if len(lengths) == 0:
            raise InputError(f"{source}: '{field}' has no positive lengths (no request completed)")
        unique, counts = np.unique(lengths, return_counts=True)
        return {"kind": "histogram", "values": unique.tolist(), "weights": counts.astype(float).tolist()}


def read_vllm_bench(path: str | Path) -> BenchRun:
    """Read a ``vllm bench serve --save-result`` JSON (per-request lengths needed: input_lens, output_lens).

    ``request_rate`` with ``burstiness`` k != 1 sent gamma inter-arrival times of shape k (vLLM's
    ``--burstiness``), whose coefficient of variation is 1/sqrt(k).
    """
    source = f"vllm bench result '{shown(path)}'"
    data = read_json_object(path, "vllm bench result", "save it with vllm bench serve --save-result --save-detailed")
    missing = [field for field in ("input_lens", "output_lens", "median_tpot_ms") if field not in data]
    if missing:
        raise InputError(f"{source} lacks '{missing[0]}' (save it with --save-result --save-detailed)")
    result = validate_spec(_BenchResult, data, source)
    rate = result.request_rate if isinstance(result.request_rate, float) and math.isfinite(result.request_rate) else None
    if result.max_concurrency:
        arrival = {"kind": "closed_loop", "concurrency": result.max_concurrency}
    elif rate and result.burstiness not in (None, 1.0):
        arrival = {"kind": "gamma", "rate_per_s": rate, "cv": 1 / math.sqrt(result.burstiness)}
    elif rate:
        arrival = {"kind": "poisson", "rate_per_s": rate}
    else:
        # request_rate inf without a concurrency cap: every request is sent at once.
        arrival = {"kind": "closed_loop", "concurrency": len(result.input_lens)}
    traffic = validate_spec(Traffic, {
        "arrival": arrival,
        "input_tokens": result.histogram("input_lens", source),
        "output_tokens": result.histogram("output_lens", source),
    }, source)
    return BenchRun(str(path), result.model_id or "", traffic, len(result.input_lens),
                    result.median_tpot_ms, result.median_ttft_ms)


def simulate_median_tpot_ms(run: BenchRun, model: ModelSpec, deployment: Deployment, gpu: GPUSpec,
                            profile: PerformanceProfile) -> float:
    """The simulator's median TPOT for the traffic of ``run``."""
    try:
        from ..costmodels.serving import simulate
    except ImportError:
        raise InputError("fitting to a vllm bench result needs the serving simulator "
                         "(servopt.costmodels.serving.simulate), which this build lacks") from None
    result = simulate(model, deployment, run.traffic, gpu, profile, num_requests=run.num_requests, seed=0)
    return float(result.summary.to_dict()["tpot_s"]["p50"] * 1e3)


def fit_step_overhead(runs: list[tuple[BenchRun, ModelSpec, Deployment, GPUSpec]], profile: PerformanceProfile,
                      max_overhead_s: float = 0.02) -> tuple[PerformanceProfile, pd.DataFrame]:
    """Fit ``step_overhead_s`` (the per-sequence part kept in proportion) to the runs' median TPOT.

    Minimizes the sum of squared log errors over the runs with a bounded scalar search; returns the
    updated profile and one row per run with measured and predicted median TPOT.
    """
    if not runs:
        raise InputError("give at least one --vllm-bench result")
    ratio = profile.step_overhead_per_seq_s / profile.step_overhead_s if profile.step_overhead_s else 0.0

    def with_overhead(overhead_s: float) -> PerformanceProfile:
        return profile.model_copy(update={"step_overhead_s": overhead_s, "step_overhead_per_seq_s": ratio * overhead_s})

    def loss(overhead_s: float) -> float:
        candidate = with_overhead(overhead_s)
        return sum(np.log(simulate_median_tpot_ms(r, m, d, g, candidate) / r.median_tpot_ms) ** 2 for r, m, d, g in runs)

    best = minimize_scalar(loss, bounds=(0.0, max_overhead_s), method="bounded", options={"xatol": 2e-5})
    fitted = with_overhead(float(best.x))
    report = pd.DataFrame([{"run": r.path, "measured_median_tpot_ms": r.median_tpot_ms,
                            "pred_median_tpot_ms": simulate_median_tpot_ms(r, m, d, g, fitted)} for r, m, d, g in runs])
    report["abs_pct_error"] = (report["pred_median_tpot_ms"] / report["measured_median_tpot_ms"] - 1).abs() * 100
    return fitted, report
