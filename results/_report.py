"""report.md and the self-contained report.html of an optimize job, plus the CSV/JSON tables."""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import pandas as pd

from ..costmodels.outfiles import write_text
from ._plot import pareto_svg
from ._tables import pareto_frame, trials_frame

FRONT_COLUMNS = [
    ("trial", "#"), ("gpu", "GPU"), ("num_gpus", "GPUs"), ("replicas", "replicas"), ("quantization", "quant"),
    ("kv_cache_dtype", "KV"), ("tp", "TP"), ("data_parallel_size", "DP"),
    ("enable_expert_parallel", "EP"), ("max_num_seqs", "batch"), ("max_num_batched_tokens", "chunk"),
    ("enable_chunked_prefill", "chunked"), ("pd_split", "PD split"), ("speculation", "speculation"),
    ("cost_usd_per_hour", "$/hour"), ("cost_usd_per_mtoken", "$/Mtoken"), ("p99_ttft_s", "P99 TTFT s"),
    ("p99_tpot_s", "P99 TPOT s"), ("p99_e2e_s", "P99 e2e s"), ("output_tokens_per_s", "tok/s"),
    ("accuracy_drop_pct", "acc. drop %"), ("memory_headroom_gib", "KV pool GiB/GPU"),
]
SLO_NAMES = {"p99_ttft_s": "ttft", "p99_tpot_s": "tpot", "p99_e2e_s": "e2e"}


def _fmt(value: Any) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        return f"{value:.3g}"
    return str(value)


def _cell(row: dict[str, Any], col: str) -> str:
    """A front-table cell; the GPU of a point whose profile is not calibrated is marked."""
    text = _fmt(row[col])
    if col == "gpu" and not row.get("profile_calibrated", True):
        text += " (UNCALIBRATED)"
    return text


def explain_empty(data: dict[str, Any], trials: pd.DataFrame) -> list[str]:
    """Why no configuration made the front, naming the workload keys that bound the search."""
    lines = []
    if not len(trials):
        return ["No trial finished; raise budget.trials or budget.time_s."]
    slo = data["workload"]["slo"]
    violations = Counter()
    for trial in data["trials"]:
        violations.update(trial["record"]["violations"].keys())
    lines.append(f"None of the {len(trials)} trials met every constraint. Constraints broken, by trials:")
    for name, count in violations.most_common():
        lines.append(f"- {name}: {count} trials")
    evaluated = trials[trials["fidelity"] != "precheck"]
    for key, target in slo.items():
        if target is None:
            continue
        metric = SLO_NAMES[key]
        col = f"p99_{metric}_s"
        if len(evaluated) and evaluated[col].notna().any():
            best = evaluated.loc[evaluated[col].idxmin()]
            lines.append(
                f"- slo.{key} = {target:g} s: the lowest P99 {metric.upper()} predicted was {best[col]:.3g} s "
                f"(trial {best['trial']}: {best['gpu']}, {best['num_gpus']} GPUs, {best['quantization']})"
                + ("; this SLO cannot be met by the candidates searched" if best[col] > target else "")
            )
    if not len(evaluated):
        lines.append("- no configuration passed the checks before simulation (memory, TP, accuracy, GPU limit)")
    lines.append("Loosen the SLO keys named above, widen gpus/space, or raise accuracy.max_drop_pct or limits.max_gpus.")
    return lines


def _summary_lines(data: dict[str, Any], trials: pd.DataFrame) -> list[str]:
    w = data["workload"]
    arrival = w["traffic"]["arrival"]
    rate = arrival.get("rate_per_s")
    load = f"{rate:g} requests/s ({arrival['kind']})" if rate else f"{arrival.get('concurrency')} closed-loop clients"
    slo = ", ".join(f"{k} = {v:g} s" for k, v in w["slo"].items() if v is not None) or "none"
    counts = trials["fidelity"].value_counts().to_dict() if len(trials) else {}
    feasible = int(trials["feasible"].sum()) if len(trials) else 0
    return [
        f"- Model: {w['model']}" + (f" (alternatives: {', '.join(a['model'] for a in w['alternatives'])})" if w["alternatives"] else ""),
        f"- Traffic: {load}",
        f"- SLOs: {slo}; objective: cost {w['objective']['cost']} vs P99 {w['objective']['latency']}",
        f"- Accuracy budget: {w['accuracy']['max_drop_pct']:g}% drop; redundancy {w['redundancy']:.0%}; limits: {w['limits']['max_gpus']} GPUs",
        f"- Trials: {len(trials)} ({counts.get('simulate', 0)} simulated at {w['fidelity']['search_requests']} requests, "
        f"{counts.get('estimate', 0)} screened by the estimate, {counts.get('precheck', 0)} rejected before estimating); "
        f"{feasible} feasible; sampler {w['sampler']}, seed {w['seed']}",
        f"- Study '{data['job']['study']}' in {data['job']['storage']}",
    ]


def _profile_lines(data: dict[str, Any]) -> list[str]:
    lines = []
    for gpu, info in data["gpus"].items():
        flag = "calibrated" if info["calibrated"] else "**UNCALIBRATED**: predictions on this GPU rest on datasheet defaults"
        lines.append(f"- {gpu} (${info['price_per_gpu_hour']:.2f}/GPU-hour): {info['profile']} ({flag})")
    return lines


def _reason_lines(trials: pd.DataFrame, top: int = 8) -> list[str]:
    if not len(trials):
        return []
    infeasible = trials[~trials["feasible"]]
    reasons = Counter(r.split(":")[0] if r.startswith(("saturated", "re-check")) else r for r in infeasible["reason"] if r)
    return [f"- {count} x {reason}" for reason, count in reasons.most_common(top)]


def _why_cell(row: Any) -> str:
    same = row.get("equivalent_trials", "")
    return row["why"] + (f"; same predictions as trial(s) {same}" if isinstance(same, str) and same else "")


def render_markdown(data: dict[str, Any], trials: pd.DataFrame, front: pd.DataFrame) -> str:
    requests = data["workload"]["fidelity"]["final_requests"]
    lines = [f"# servopt optimize: {data['job']['study']}", "", *_summary_lines(data, trials), ""]
    lines += [f"## Pareto front (re-checked with {requests} simulated requests)", ""]
    if len(front):
        lines.append("| " + " | ".join(label for _, label in FRONT_COLUMNS) + " | why |")
        lines.append("|" + "---|" * (len(FRONT_COLUMNS) + 1))
        for row in front.to_dict(orient="records"):
            cells = [_cell(row, col) for col, _ in FRONT_COLUMNS] + [_why_cell(row)]
            lines.append("| " + " | ".join(cells) + " |")
        if not front["profile_calibrated"].astype(bool).all():
            lines += ["", "Rows marked UNCALIBRATED are predicted on a GPU without a calibration profile (datasheet "
                          "defaults): measure before relying on them."]
        lines += ["", f"Export one: `servopt export {data['job']['out_dir']} --pick cheapest` (or `fastest`, or a # above)."]
    else:
        lines += ["**The front is empty.**", "", *explain_empty(data, trials)]
    lines += ["", "## Calibration profiles", "", *_profile_lines(data)]
    reasons = _reason_lines(trials)
    if reasons:
        lines += ["", "## Most common reasons trials were infeasible", "", *reasons]
    lines += ["", "## Search space", ""] + [f"- {k}: {v}" for k, v in data["space"].items()]
    return "\n".join(lines) + "\n"


def render_html(data: dict[str, Any], trials: pd.DataFrame, front: pd.DataFrame) -> str:
    w = data["workload"]
    svg = pareto_svg(trials, front, w["objective"], w["slo"])
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>servopt: {esc(data['job']['study'])}</title>",
        "<style>body{font-family:sans-serif;margin:2em;max-width:1500px}table{border-collapse:collapse;font-size:12px}"
        "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td.l,th.l{text-align:left}"
        ".warn{color:#b30000;font-weight:bold}</style></head><body>",
        f"<h1>servopt optimize: {esc(data['job']['study'])}</h1><ul>",
        *[f"<li>{esc(line[2:])}</li>" for line in _summary_lines(data, trials)],
        "</ul>", svg,
        f"<h2>Pareto front (re-checked with {w['fidelity']['final_requests']} simulated requests)</h2>",
    ]
    if len(front):
        parts.append("<table><tr>" + "".join(f"<th>{esc(label)}</th>" for _, label in FRONT_COLUMNS) + "<th class='l'>why</th></tr>")
        for row in front.to_dict(orient="records"):
            parts.append("<tr>" + "".join(f"<td>{esc(_cell(row, col))}</td>" for col, _ in FRONT_COLUMNS)
                         + f"<td class='l'>{esc(_why_cell(row))}</td></tr>")
        parts.append("</table>")
        parts.append(f"<p>Export one: <code>servopt export {esc(data['job']['out_dir'])} --pick cheapest</code></p>")
    else:
        lines = explain_empty(data, trials)
        parts.append("<p class='warn'>The front is empty.</p><ul>" + "".join(f"<li>{esc(x.lstrip('- '))}</li>" for x in lines) + "</ul>")
    parts.append("<h2>Calibration profiles</h2><ul>")
    for gpu, info in data["gpus"].items():
        flag = "calibrated" if info["calibrated"] else "<span class='warn'>UNCALIBRATED</span>: datasheet defaults"
        parts.append(f"<li>{esc(gpu)} (${info['price_per_gpu_hour']:.2f}/GPU-hour): {esc(info['profile'])} ({flag})</li>")
    parts.append("</ul>")
    reasons = _reason_lines(trials)
    if reasons:
        parts.append("<h2>Most common reasons trials were infeasible</h2><ul>"
                     + "".join(f"<li>{esc(r[2:])}</li>" for r in reasons) + "</ul>")
    parts.append("<h2>Search space</h2><ul>" + "".join(f"<li>{esc(k)}: {esc(v)}</li>" for k, v in data["space"].items()) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def front_points(data: dict[str, Any], front: pd.DataFrame) -> list[dict[str, Any]]:
    """What ``servopt export`` needs per front point (written as front.json)."""
    by_number = {t["number"]: t["record"] for t in data["trials"]}
    points = []
    for row in front.to_dict(orient="records"):
        record = by_number[row["trial"]]
        points.append({
            "trial": row["trial"],
            "serve_id": record["serve_id"],
            "weights": record.get("weights"),
            "profile_calibrated": bool(row["profile_calibrated"]),
            "model": record["model"],
            "deployment": record["deployment"],
            "knobs": record["knobs"],
            "gpus_per_node": data["gpus"][record["deployment"]["gpu"]]["gpus_per_node"],
            "metrics": {k: row[k] for k in ("cost_usd_per_hour", "cost_usd_per_mtoken", "p99_ttft_s", "p99_tpot_s",
                                             "p99_e2e_s", "output_tokens_per_s", "accuracy_drop_pct")},
        })
    return points


def write_results(out_dir: str | Path, data: dict[str, Any]) -> dict[str, Path]:
    """Write trials.csv, pareto.csv, front.json, report.md and report.html; return their paths."""
    out = Path(out_dir)
    trials = trials_frame(data)
    front = pareto_frame(data)
    front_doc = {"study": data["job"]["study"], "workload": data["workload"], "gpus": data["gpus"],
                 "max_model_len": data.get("max_model_len", {}), "points": front_points(data, front)}
    texts = {
        "trials.csv": trials.to_csv(index=False),
        "pareto.csv": front.to_csv(index=False),
        "front.json": json.dumps(front_doc, indent=2, default=_json_default) + "\n",
        "report.md": render_markdown(data, trials, front),
        "report.html": render_html(data, trials, front),
    }
    # Atomic, and a link planted in the folder is replaced rather than written through.
    return {name: write_text(out / name, text) for name, text in texts.items()}


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars from pandas rows
        return value.item()
    raise TypeError(f"cannot serialize {type(value).__name__}")
