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
    ...     "completed": 2, "duration": 1.2, "total_input_tokens": 300, "total_output_tokens": 100,
    ...     "input_lens": [100, 200], "output_lens": [50, 50], "ttfts": [0.04, 0.04], "itls": [[0.02] * 49] * 2,
    ...     "median_tpot_ms": 20.0, "median_ttft_ms": 40.0}))
    >>> run = read_vllm_bench(path)
    >>> run.traffic.arrival.kind, run.traffic.arrival.rate_per_s, run.median_tpot_ms
    ('poisson', 4.0, 20.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import minimize_scalar

from ..costmodels.architectures import ModelSpec
from ..costmodels.deployment import Deployment
from ..costmodels.errors import InputError, validate_spec
from ..costmodels.hardware import GPUSpec
from ..costmodels.profile import PerformanceProfile
from ..costmodels.serving.traffic import Traffic
from ..costmodels.userfiles import shown
from .tables import normalize_kernel_frame, read_raw_table
from .vllm_bench import length_histogram, read_bench_result

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


def read_vllm_bench(path: str | Path) -> BenchRun:
    """A ``vllm bench serve --save-result --save-detailed`` JSON (:func:`~.vllm_bench.read_bench_result`)
    as the steady traffic it measured: its per-request lengths as histograms, its rate or concurrency."""
    result = read_bench_result(path)
    if not result.detailed:
        raise InputError(f"vllm bench result '{path}' lacks 'input_lens' and 'output_lens' (save it with "
                         "--save-result --save-detailed)")
    if "median_tpot_ms" not in result.stats_ms:
        raise InputError(f"vllm bench result '{path}' lacks 'median_tpot_ms' (the benchmark's TPOT statistics)")
    rate = result.request_rate if math.isfinite(result.request_rate) else None
    if result.max_concurrency:
        arrival = {"kind": "closed_loop", "concurrency": result.max_concurrency}
    elif rate and result.burstiness != 1.0:
        # vLLM's --burstiness k draws gamma gaps of shape k: coefficient of variation 1/sqrt(k).
        arrival = {"kind": "gamma", "rate_per_s": rate, "cv": 1 / math.sqrt(result.burstiness)}
    elif rate:
        arrival = {"kind": "poisson", "rate_per_s": rate}
    else:
        # request_rate inf without a concurrency cap: every request is sent at once.
        arrival = {"kind": "closed_loop", "concurrency": result.num_requests}
    traffic = validate_spec(Traffic, {"arrival": arrival, "input_tokens": length_histogram(result.input_lens),
                                      "output_tokens": length_histogram(result.output_lens)},
                            f"vllm bench result '{shown(path)}'")
    return BenchRun(str(path), result.model_id, traffic, result.num_requests, result.stats_ms["median_tpot_ms"],
                    result.stats_ms.get("median_ttft_ms"))


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
