"""Trial and front tables from a job's collected data (``Job.collect()``: typed trial records and
re-checks, :mod:`._record`), as pandas frames."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd

from ..costmodels.deployment import Deployment
from ..costmodels.objectives import COSTS
from ..costmodels.uncertainty import kind_under, shipped_error_bars, straddles
from ._record import TrialRecord, summary_classes, summary_p99

KNOB_COLUMNS = [
    "model", "gpu", "mode", "tp", "data_parallel_size", "enable_expert_parallel", "pp", "prefill_instances", "decode_instances", "prefill_tp", "decode_tp",
    "quantization", "kv_cache_dtype", "max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill",
    "scheduling_policy", "speculation", "num_speculative_tokens", "headroom",
]
METRICS = ("ttft", "tpot", "itl", "e2e")
# Per tenant class (traffic with classes): its own P99s, in columns named p99_<metric>_s[<class>].
CLASS_METRICS = ("ttft", "tpot", "e2e")
COST_COLUMNS = tuple(cost.column for cost in COSTS.values())
# KV utilization from which the cache, not max_num_seqs, caps the batch (vLLM preempts near 100%).
KV_LIMITED_UTILIZATION = 0.9
INT_COLUMNS = ("tp", "data_parallel_size", "pp", "prefill_instances", "decode_instances", "prefill_tp", "decode_tp", "max_num_seqs",
               "max_num_batched_tokens", "num_speculative_tokens", "serving_replicas")


def prediction_columns(summary: dict | None, prefix: str = "") -> dict[str, Any]:
    """Flat columns of one simulator summary (NaN when there is none)."""
    s = summary or {}
    out = {f"{prefix}p99_{m}_s": summary_p99(summary, m) for m in METRICS}
    out.update({f"{prefix}{class_column(m, tenant)}": summary_p99(summary, m, tenant)
                for tenant in summary_classes(summary) for m in CLASS_METRICS})
    out.update({
        f"{prefix}requests_per_s": s.get("requests_per_s", math.nan),
        f"{prefix}output_tokens_per_s": s.get("output_tokens_per_s", math.nan),
        f"{prefix}saturated": s.get("saturated") if summary else None,
        f"{prefix}kv_utilization": s.get("kv_utilization", math.nan),
        f"{prefix}mean_batch_size": s.get("mean_batch_size", math.nan),
        f"{prefix}compute_bound_share": s.get("compute_bound_share", math.nan),
        f"{prefix}queueing_share_p99_ttft": s.get("queueing_share_p99_ttft", math.nan),
    })
    return out


def interval_columns(record: TrialRecord, summary: dict | None, slo: dict[str, float]) -> dict[str, Any]:
    """Each P99's 80% interval from the held-out error of its kind (costmodels/uncertainty.py;
    NaN for a record written before servopt kept its kind), and whether any interval holds its
    SLO: a verdict the model's own error could flip."""
    out: dict[str, Any] = {f"p99_{m}_s_{end}": math.nan for m in METRICS for end in ("low", "high")}
    out["slo_straddled"] = ""
    if record.error_kind is None or not summary:
        return out
    kind = kind_under(record.error_kind, summary)
    bars = shipped_error_bars()
    for m in METRICS:
        p99 = summary_p99(summary, m)
        if m == "e2e":
            low, high = bars.e2e_interval("p99", summary_p99(summary, "ttft"), summary_p99(summary, "tpot"), p99, kind)
        else:
            low, high = bars.interval(f"p99_{m}", p99, kind)
        out[f"p99_{m}_s_low"], out[f"p99_{m}_s_high"] = low, high
    out["slo_straddled"] = " ".join(
        f"p99_{m}" for m, target in slo.items() if straddles((out[f"p99_{m}_s_low"], out[f"p99_{m}_s_high"]), target))
    return out


def class_column(metric: str, tenant: str) -> str:
    """The column of a tenant class's P99 of ``metric``."""
    return f"p99_{metric}_s[{tenant}]"


def reports_n_minus_1(workload: dict[str, Any]) -> bool:
    """Whether a job predicted each point with one replica down (``redundancy`` > 0 or ``slo.n_minus_1``)."""
    return bool(workload.get("redundancy") or (workload.get("slo") or {}).get("n_minus_1"))


def n_minus_1_columns(summary: dict | None) -> dict[str, Any]:
    """P99s with one replica down (NaN when not predicted, e.g. a single replica) and whether it saturates."""
    out: dict[str, Any] = {f"n_minus_1_p99_{m}_s": summary_p99(summary, m) for m in METRICS}
    out["n_minus_1_saturated"] = summary.get("saturated") if summary else None
    return out


def cost_columns(costs: dict[str, float | None]) -> dict[str, float]:
    """$/hour, $ per million output tokens and per million tokens (input + output); NaN when unknown."""
    return {key: math.nan if costs.get(key) is None else costs[key] for key in COST_COLUMNS}


def capacity_columns(capacity: dict[str, Any] | None) -> dict[str, float]:
    """What one replica sustains as the engine model predicts it (its saturation rate), the
    fractional replicas the offered traffic needs at that rate, and the replicas that carry it
    (spares aside); NaN when the trial stopped before the capacity formula."""
    capacity = capacity or {}
    return {"replica_requests_per_s": (capacity.get("per_replica") or {}).get("requests_per_s", math.nan),
            "replicas_needed": capacity.get("replicas_needed", math.nan),
            "serving_replicas": capacity.get("serving_replicas", math.nan)}


def speculation_text(knobs: dict[str, Any]) -> str:
    label = knobs.get("speculation", "off")
    return "off" if label == "off" else f"{label} g={knobs.get('num_speculative_tokens')}"


def pd_split_text(deployment: Deployment) -> str:
    dis = deployment.disaggregation
    if not dis:
        return "aggregated"
    return f"{dis.prefill_instances}P(tp{dis.prefill_tp}):{dis.decode_instances}D(tp{dis.decode_tp})"


def spec_json(deployment: Deployment) -> str:
    """The deployment spec as the tables' ``deployment`` column holds it."""
    return json.dumps(deployment.model_dump(mode="json"), sort_keys=True)


def trials_frame(data: dict[str, Any]) -> pd.DataFrame:
    """One row per finished trial: knobs, deployment, predictions at the fidelity reached, and why
    it is (in)feasible."""
    rows = []
    with_n_minus_1 = reports_n_minus_1(data["workload"])
    for trial in data["trials"]:
        r, values = trial.record, trial.values
        knobs = r.knobs
        row = {
            "trial": trial.number,
            "feasible": r.feasible,
            "fidelity": r.fidelity,
            "reason": r.reason,
            **{k: knobs.get(k) for k in KNOB_COLUMNS},
            "model": r.model,
            "serve_id": r.serve_id,
            "replicas": r.replicas,
            "num_gpus": r.num_gpus,
            "gpus_rented": r.gpus_rented,
            **cost_columns(r.costs()),
            **prediction_columns(r.summary),
            **(n_minus_1_columns(r.n_minus_1) if with_n_minus_1 else {}),
            "accuracy_drop_pct": r.accuracy_drop_pct,
            "memory_headroom_gib": math.nan if r.memory_headroom_gib is None else r.memory_headroom_gib,
            **capacity_columns(r.capacity),
            "repaired": "; ".join(f"{k} {a}->{b}" for k, (a, b) in r.repaired.items()),
            # Pruned trials (nothing predicted) have no objective values.
            "objective_cost": values[0] if values else math.nan,
            "objective_latency_s": values[1] if values else math.nan,
            "profile_calibrated": r.profile_calibrated,
            "eval_s": r.eval_s,
            "deployment": spec_json(r.deployment.spec),
        }
        rows.append(row)
    frame = pd.DataFrame(rows)
    for col in INT_COLUMNS:  # knobs absent on some trials (conditional) stay integers, not floats
        if col in frame:
            frame[col] = frame[col].astype("Int64")
    return frame.sort_values("trial").reset_index(drop=True) if len(frame) else frame


def why(record: TrialRecord, summary: dict[str, Any] | None) -> str:
    """One line on what limits a configuration: the bound, queueing, and the KV cache."""
    if not summary:
        return record.reason or "not simulated"
    parts = []
    share = summary.get("compute_bound_share")
    if share is not None:
        parts.append(f"compute-bound ({share:.0%} of steps)" if share >= 0.5
                     else f"memory-bound ({1 - share:.0%} of steps)")
    queueing = summary.get("queueing_share_p99_ttft")
    if queueing is not None:
        parts.append(f"queueing {queueing:.0%} of P99 TTFT")
    kv = summary.get("kv_utilization")
    batch = summary.get("mean_batch_size")
    if kv is not None and kv >= KV_LIMITED_UTILIZATION:
        parts.append(f"KV-limited (KV cache {kv:.0%} full)")
    elif batch is not None:
        cap = record.knobs.get("max_num_seqs")
        limit = " (max_num_seqs-limited)" if cap and batch >= 0.9 * cap else ""
        parts.append(f"mean batch {batch:.0f}{limit}" + (f", KV {kv:.0%} full" if kv is not None else ""))
    return "; ".join(parts)


def pareto_frame(data: dict[str, Any]) -> pd.DataFrame:
    """The final front: re-checked predictions of each point, cheapest first."""
    by_number = {t.number: t.record for t in data["trials"]}
    # JSON round trips turn the trial-number keys into strings.
    equivalents = {int(k): v for k, v in data.get("front_equivalents", {}).items()}
    with_n_minus_1 = reports_n_minus_1(data["workload"])
    slo = {key.removeprefix("p99_").removesuffix("_s"): float(value)
           for key, value in (data["workload"].get("slo") or {}).items()
           if key.startswith("p99_") and key.endswith("_s") and isinstance(value, int | float)}
    rows = []
    for number in data["front"]:
        r = by_number[number]
        check = data["rechecks"][number]
        summary = check.simulation
        d = r.deployment.spec
        rows.append({
            "trial": number,
            "model": r.serve_id,
            "gpu": d.gpu,
            "num_gpus": r.num_gpus,
            "gpus_rented": check.gpus_rented,
            "replicas": r.replicas,
            "quantization": d.quantization,
            "kv_cache_dtype": d.kv_cache_dtype,
            "tp": d.tp if not d.disaggregation else None,
            "data_parallel_size": d.data_parallel_size if not d.disaggregation else None,
            "enable_expert_parallel": d.enable_expert_parallel,
            "pp": d.pp,
            "max_num_seqs": d.max_num_seqs,
            "max_num_batched_tokens": d.max_num_batched_tokens,
            "enable_chunked_prefill": d.enable_chunked_prefill,
            "scheduling_policy": d.scheduling_policy,
            "pd_split": pd_split_text(d),
            "speculation": speculation_text(r.knobs),
            **cost_columns(check.costs()),
            **prediction_columns(summary),
            **interval_columns(r, summary, slo),
            **(n_minus_1_columns(check.n_minus_1) if with_n_minus_1 else {}),
            "accuracy_drop_pct": r.accuracy_drop_pct,
            "memory_headroom_gib": math.nan if r.memory_headroom_gib is None else r.memory_headroom_gib,
            "why": why(r, summary),
            "simulated_requests": check.requests,
            "equivalent_trials": " ".join(str(n) for n in equivalents.get(number, [])),
            "profile_calibrated": r.profile_calibrated,
            "weights_format": (r.deployment.weights.format if r.deployment.weights else None) or "",
            "config_source": (r.deployment.weights.config_source if r.deployment.weights else None) or "",
            "deployment": spec_json(d),
        })
    frame = pd.DataFrame(rows)
    if len(frame):
        frame["tp"] = frame["tp"].astype("Int64")
        frame["data_parallel_size"] = frame["data_parallel_size"].astype("Int64")
        frame = frame.sort_values(["cost_usd_per_hour", "p99_e2e_s"]).reset_index(drop=True)
    return frame
