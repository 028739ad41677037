"""report.md and the self-contained report.html of an optimize job, plus the CSV/JSON tables.

report.html works offline: plotly.js is inlined (no CDN), and the page lays its plots out in as
many columns as the window holds, so nothing is cut off at 1,280 px or narrower.
"""

from __future__ import annotations

import html
import json
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.io as pio
from plotly.offline import get_plotlyjs

from ..costmodels.outfiles import write_text
from ._plot import COST_LABELS, front_marks, pareto_figures
from ._tables import CLASS_METRICS, COST_COLUMNS, class_column, pareto_frame, trials_frame

N_MINUS_1_LABEL = "one replica down: P99 TTFT / TPOT / e2e s"
# The front table of both reports: (header, cell of a pareto_frame row).
FRONT_COLUMNS: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
    ("#", lambda r: str(r["trial"])),
    ("model", lambda r: r["model"]),
    ("GPU", lambda r: _cell(r, "gpu")),
    ("GPUs used / rented", lambda r: f"{r['num_gpus']} / {r['gpus_rented']}"),
    ("replicas x (TP or P:D)", lambda r: f"{r['replicas']} x " + (
        r["pd_split"] if r["pd_split"] != "aggregated" else f"TP{r['tp']}" + (f" PP{r['pp']}" if r["pp"] > 1 else "")
        + (f" DP{r['data_parallel_size']}" if _present(r.get("data_parallel_size")) and r["data_parallel_size"] > 1
           else ""))
     + (" EP" if _present(r.get("enable_expert_parallel")) and r["enable_expert_parallel"] else "")),
    ("quant (weights / KV)", lambda r: f"{r['quantization']} / {r['kv_cache_dtype']}"),
    ("batch / chunk", lambda r: f"{r['max_num_seqs']} / {r['max_num_batched_tokens']}"
     + ("" if r["enable_chunked_prefill"] else " (unchunked)")
     + (" priority" if r.get("scheduling_policy") == "priority" else "")),
    ("speculation", lambda r: r["speculation"]),
    ("$/hour", lambda r: _fmt(r["cost_usd_per_hour"])),
    ("$/M output tokens", lambda r: _fmt(r["cost_usd_per_output_mtoken"])),
    ("$/M tokens (in + out)", lambda r: _fmt(r["cost_usd_per_total_mtoken"])),
    ("P99 TTFT s", lambda r: _fmt(r["p99_ttft_s"])),
    ("P99 TPOT s", lambda r: _fmt(r["p99_tpot_s"])),
    ("P99 e2e s", lambda r: _fmt(r["p99_e2e_s"])),
    # Only when the job predicted N-1 (redundancy > 0 or slo.n_minus_1): :func:`front_columns`.
    (N_MINUS_1_LABEL, lambda r: "saturates" if _present(r["n_minus_1_saturated"]) and bool(r["n_minus_1_saturated"])
     else " / ".join(_fmt(r[f"n_minus_1_p99_{m}_s"]) for m in ("ttft", "tpot", "e2e"))),
    ("output tok/s", lambda r: _fmt(r["output_tokens_per_s"])),
    ("acc. drop %", lambda r: _fmt(r["accuracy_drop_pct"])),
    ("KV pool GiB/GPU", lambda r: _fmt(r["memory_headroom_gib"])),
    ("profile", lambda r: "calibrated" if r["profile_calibrated"] else "UNCALIBRATED"),
]
SLO_NAMES = {"p99_ttft_s": "ttft", "p99_tpot_s": "tpot", "p99_e2e_s": "e2e"}


def front_columns(data: dict[str, Any], front: pd.DataFrame) -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    """:data:`FRONT_COLUMNS` (the N-1 column only when the job predicted one replica down), then each
    tenant class's P99s (traffic with classes)."""
    with_n_minus_1 = "n_minus_1_p99_ttft_s" in front
    classes = [c["name"] for c in data["workload"]["traffic"].get("classes") or []]
    extra = [(f"{tenant}: P99 {metric.upper()} s", lambda r, c=class_column(metric, tenant): _fmt(r.get(c)))
             for tenant in classes for metric in CLASS_METRICS]
    return [(label, cell) for label, cell in FRONT_COLUMNS if label != N_MINUS_1_LABEL or with_n_minus_1] + extra


def _present(value: Any) -> bool:
    """Whether a table cell holds a value (not None, NA or NaN)."""
    return not (value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)))


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
        violations.update(trial.record.violations.keys())
    lines.append(f"None of the {len(trials)} trials met every constraint. Constraints broken, by trials:")
    for name, count in violations.most_common():
        lines.append(f"- {name}: {count} trials")
    evaluated = trials[trials["fidelity"] != "precheck"]
    for key, target in slo.items():
        if target is None or key not in SLO_NAMES:
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
    for i, c in enumerate(data["workload"]["traffic"].get("classes") or []):
        for key, target in (c.get("slo") or {}).items():
            col = class_column(SLO_NAMES[key], c["name"])
            if target is None or col not in evaluated or not evaluated[col].notna().any():
                continue
            best = evaluated.loc[evaluated[col].idxmin()]
            lines.append(f"- traffic.classes.{i}.slo.{key} = {target:g} s ({c['name']}): the lowest P99 predicted was "
                         f"{best[col]:.3g} s (trial {best['trial']})"
                         + ("; this SLO cannot be met by the candidates searched" if best[col] > target else ""))
    if not len(evaluated):
        lines.append("- no configuration passed the checks before simulation (memory, TP, accuracy, GPU limit)")
    lines.append("Loosen the SLO keys named above, widen gpus/space, or raise accuracy.max_drop_pct or limits.max_gpus.")
    return lines


def _summary_lines(data: dict[str, Any], trials: pd.DataFrame) -> list[str]:
    w = data["workload"]
    arrival = w["traffic"]["arrival"]
    rate = arrival.get("rate_per_s")
    load = f"{rate:g} requests/s ({arrival['kind']})" if rate else f"{arrival.get('concurrency')} closed-loop clients"
    if arrival["kind"] == "sessions":
        load = f"{rate:g} conversations/s (multi-turn sessions)"
    classes = w["traffic"].get("classes") or []
    if classes:
        load += "; classes: " + ", ".join(
            f"{c['name']} ({c['share']:.0%}, priority {c.get('priority', 0)}"
            + "".join(f", P99 {k[4:-2].upper()} <= {v:g} s" for k, v in (c.get("slo") or {}).items() if v is not None)
            + ")" for c in classes)
    slo = ", ".join(f"{k} = {v:g} s" for k, v in w["slo"].items() if k in SLO_NAMES and v is not None) or "none"
    if w["slo"].get("n_minus_1"):
        slo += ", also with one replica down (slo.n_minus_1)"
    counts = trials["fidelity"].value_counts().to_dict() if len(trials) else {}
    feasible = int(trials["feasible"].sum()) if len(trials) else 0
    pruned = int(trials["objective_latency_s"].isna().sum()) if len(trials) else 0
    return [
        f"- Model: {w['model']}" + (f" (alternatives: {', '.join(a['model'] for a in w['alternatives'])})" if w["alternatives"] else ""),
        f"- Traffic: {load}",
        f"- SLOs: {slo}; objective: {COST_LABELS[w['objective']['cost']]} vs P99 {w['objective']['latency'].upper()}",
        f"- Accuracy budget: {w['accuracy']['max_drop_pct']:g}% drop; redundancy {w['redundancy']:.0%}; limits: "
        f"{w['limits']['max_gpus']} GPUs; priced per "
        + ("node: every GPU of each node a fleet occupies is rented" if w["pricing"]["whole_nodes"] else "GPU used"),
        f"- Trials: {len(trials)} ({counts.get('simulate', 0)} simulated at {w['fidelity']['search_requests']} requests, "
        f"{counts.get('estimate', 0)} screened by the estimate, {pruned} pruned with nothing predicted: "
        f"{counts.get('precheck', 0)} rejected before estimating, {pruned - counts.get('precheck', 0)} estimated to "
        f"saturate); {feasible} feasible; sampler {w['sampler']}, seed {w['seed']}",
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


def _why_cell(row: dict[str, Any]) -> str:
    same = row.get("equivalent_trials", "")
    return row["why"] + (f"; same predictions as trial(s) {same}" if isinstance(same, str) and same else "")


def _front_rows(front: pd.DataFrame, objective: dict, columns: list) -> list[tuple[dict[str, Any], list[str], str]]:
    """Each front row with its table cells and its mark (cheapest, fastest or '')."""
    marks = front_marks(front, objective)
    return [(row, [cell(row) for _, cell in columns] + [_why_cell(row)], marks.get(row["trial"], ""))
            for row in front.to_dict(orient="records")]


def render_markdown(data: dict[str, Any], trials: pd.DataFrame, front: pd.DataFrame) -> str:
    w = data["workload"]
    lines = [f"# servopt optimize: {data['job']['study']}", "", *_summary_lines(data, trials), ""]
    lines += [f"## Pareto front (re-checked with {w['fidelity']['final_requests']} simulated requests)", ""]
    if len(front):
        columns = front_columns(data, front)
        lines.append("| " + " | ".join(label.replace("|", "\\|") for label, _ in columns) + " | why |")
        lines.append("|" + "---|" * (len(columns) + 1))
        for _, cells, mark in _front_rows(front, w["objective"], columns):
            cells[0] += f" ({mark})" if mark else ""
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
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


PAGE_STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;padding:16px 20px;max-width:1600px;
  color:#222;box-sizing:border-box}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em}
/* auto-fill keeps a plot's column width while later plots are added: plotly sizes each plot once. */
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,560px),1fr));gap:12px}
.plot{border:1px solid #ddd;border-radius:4px;min-width:0}
table.front{border-collapse:collapse;font-size:12px;width:100%}
table.front td,table.front th{border:1px solid #ccc;padding:3px 4px;text-align:right;vertical-align:top}
table.front th{background:#f3f3f3;position:sticky;top:0}
table.front td.l,table.front th.l{text-align:left}
table.front td.model{text-align:left;min-width:9em}
table.front tr.why td{text-align:left;border-top:none;color:#444;padding-bottom:6px}
table.front tr.point td{border-bottom:none}
table.front tr.mark td{background:#fff7d6}
.scroll{overflow-x:auto}
.warn{color:#b30000;font-weight:bold}
code{overflow-wrap:anywhere}
"""
# Columns of the front table shown left-aligned (text, not numbers).
_TEXT_COLUMNS = {"model", "GPU", "replicas x (TP or P:D)", "quant (weights / KV)", "speculation", "profile"}


def _front_table_html(front: pd.DataFrame, objective: dict, columns: list) -> str:
    esc = html.escape
    head = "".join(f"<th class='{'l' if label in _TEXT_COLUMNS else ''}'>{esc(label)}</th>" for label, _ in columns)
    # Fits 1,280 px; a narrower window scrolls the table, not the page.
    rows = ["<div class='scroll'><table class='front'><thead><tr>" + head + "</tr></thead><tbody>"]
    for row, cells, mark in _front_rows(front, objective, columns):
        tds = []
        for (label, _), cell in zip(columns, cells, strict=False):
            if label == "model":  # break long ids after their slashes only
                tds.append(f"<td class='model'>{esc(cell).replace('/', '/<wbr>')}</td>")
            elif label == "profile" and not row["profile_calibrated"]:
                tds.append(f"<td class='l warn'>{esc(cell)}</td>")
            else:
                tds.append(f"<td class='{'l' if label in _TEXT_COLUMNS else ''}'>{esc(cell)}</td>")
        if mark:
            tds[0] = f"<td>{esc(cells[0])}<br><b>{esc(mark)}</b></td>"
        shade = " mark" if mark else ""
        rows.append(f"<tr class='point{shade}'>" + "".join(tds) + "</tr>")
        # The limiting factors run under the row, across the table, so no column grows tall.
        rows.append(f"<tr class='why{shade}'><td colspan='{len(columns)}'>why: {esc(cells[-1])}</td></tr>")
    rows.append("</tbody></table></div>")
    return "\n".join(rows)


def _figures_html(trials: pd.DataFrame, front: pd.DataFrame, w: dict[str, Any]) -> str:
    config = {"responsive": True, "displaylogo": False}
    # plotly.io escapes <, > and / in the figure's JSON, so no text from the workload can end the script.
    divs = [pio.to_html(fig, full_html=False, include_plotlyjs=False, config=config, div_id=f"plot-{metric}",
                        default_width="100%", default_height="500px")
            for metric, fig in pareto_figures(trials, front, w["objective"], w["slo"]).items()]
    return "<div class='plots'>" + "".join(f"<div class='plot'>{div}</div>" for div in divs) + "</div>"


def render_html(data: dict[str, Any], trials: pd.DataFrame, front: pd.DataFrame) -> str:
    w = data["workload"]
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>servopt: {esc(data['job']['study'])}</title>",
        f"<style>{PAGE_STYLE}</style>",
        f"<script>{get_plotlyjs()}</script></head><body>",
        f"<h1>servopt optimize: {esc(data['job']['study'])}</h1><ul>",
        *[f"<li>{esc(line[2:])}</li>" for line in _summary_lines(data, trials)],
        "</ul>",
        _figures_html(trials, front, w),
        "<p>Hover a point for its whole deployment and predictions; click a legend entry to hide a GPU.</p>",
        f"<h2>Pareto front (re-checked with {w['fidelity']['final_requests']} simulated requests)</h2>",
    ]
    if len(front):
        parts.append(_front_table_html(front, w["objective"], front_columns(data, front)))
        parts.append(f"<p>Export one: <code>servopt export {esc(data['job']['out_dir'])} --pick cheapest</code> "
                     "(or <code>fastest</code>, or a # above)</p>")
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
    by_number = {t.number: t.record for t in data["trials"]}
    points = []
    for row in front.to_dict(orient="records"):
        record = by_number[row["trial"]]
        points.append({
            "trial": row["trial"],
            "serve_id": record.serve_id,
            "profile_calibrated": bool(row["profile_calibrated"]),
            "model": record.model,
            "deployment": record.deployment.model_dump(mode="json"),
            "knobs": record.knobs,
            "metrics": {k: row[k] for k in (*COST_COLUMNS, "num_gpus", "gpus_rented", "p99_ttft_s", "p99_tpot_s",
                                             "p99_e2e_s", "output_tokens_per_s", "accuracy_drop_pct",
                                             *(c for c in row if c.startswith("n_minus_1_")))},
            "class_metrics": {c: row[c] for c in front.columns if c.endswith("]") and _present(row[c])},
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
