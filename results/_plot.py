"""The Pareto plots: cost against P99 latency, one interactive plotly figure per latency that the
objective or an SLO names.

Points are coloured by GPU; the symbol says how far a trial got (simulated and feasible, feasible
on the estimate only, infeasible); the re-checked front is drawn over them with its cheapest and
fastest points marked (named in the legend, so no label covers a point), and each SLO is a dashed
line; a tenant class's own SLO is a dotted line with the front's P99 of that class drawn beside it.
A GPU whose profile is not calibrated says UNCALIBRATED in the legend, over the plot and in every
hover of its points. Each front point carries its 80% interval (the held-out error of its kind of
prediction, costmodels/uncertainty.py) as an error bar; a point whose interval holds an SLO is
outlined in orange: its verdict is within the model's own error. The axes open on the feasible region (:func:`feasible_ranges`); a button shows every trial. Hovering a point shows its whole deployment
and what was predicted. Trials with nothing predicted (pruned) have no latency to plot.
"""

from __future__ import annotations

import html
import json
import math
from typing import Any

import pandas as pd
import plotly.graph_objects as go

from ..costmodels.objectives import COSTS, columns

COST_LABELS = {name: cost.label for name, cost in COSTS.items()}
SLO_KEYS = {"ttft": "p99_ttft_s", "tpot": "p99_tpot_s", "e2e": "p99_e2e_s"}
# Qualitative colours that stay apart for the colour-blind (Okabe and Ito's palette).
GPU_COLOURS = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
STATUS_SYMBOLS = {"simulated": "circle", "estimate": "circle-open", "infeasible": "x-thin-open"}
STATUS_LABELS = {"simulated": "feasible, simulated", "estimate": "feasible, estimate only",
                 "infeasible": "infeasible"}
# Above this ratio of largest to smallest latency the axis is logarithmic.
LOG_AXIS_RATIO = 20


CLASS_COLOURS = ["#7a3d9a", "#8c6d1f", "#1f6f8c", "#8c1f4a"]


def panels(objective_latency: str, slo: dict, classes: list[dict] | None = None) -> list[str]:
    """The objective's latency first, then every other latency with an SLO (the workload's or a class's)."""
    targets = [slo, *((c.get("slo") or {}) for c in classes or [])]
    return [objective_latency] + [m for m in SLO_KEYS
                                  if m != objective_latency and any(t.get(SLO_KEYS[m]) for t in targets)]


def uncalibrated_gpus(*frames: pd.DataFrame) -> set[str]:
    """GPUs with a row predicted on a profile that is not calibrated."""
    out: set[str] = set()
    for frame in frames:
        if len(frame) and "profile_calibrated" in frame:
            out |= set(frame.loc[~frame["profile_calibrated"].astype(bool), "gpu"])
    return out


def gpu_colours(gpus: list[str]) -> dict[str, str]:
    return {gpu: GPU_COLOURS[i % len(GPU_COLOURS)] for i, gpu in enumerate(sorted(gpus))}


def _number(value: Any, unit: str = "") -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3g}{unit}"


def deployment_lines(row: dict[str, Any]) -> list[str]:
    """The deployment of a trials or front row, as hover lines (HTML-escaped)."""
    d = json.loads(row["deployment"])
    esc = html.escape
    dis = d.get("disaggregation")
    if dis:
        shape = (f"{d['replicas']} x ({dis['prefill_instances']} prefill TP{dis['prefill_tp']} + "
                 f"{dis['decode_instances']} decode TP{dis['decode_tp']})")
    else:
        shape = f"{d['replicas']} x TP{d['tp']}" + (f" PP{d['pp']}" if d["pp"] > 1 else "")
    spec = d.get("speculative")
    return [
        f"model {esc(str(row.get('serve_id') or row.get('model')))}",
        f"{esc(d['gpu'])}: {shape}, {row['num_gpus']} GPUs used, {row['gpus_rented']} rented",
        f"weights {esc(str(d['quantization']))}, KV cache {esc(d['kv_cache_dtype'])}",
        f"max_num_seqs {d['max_num_seqs']}, max_num_batched_tokens {d['max_num_batched_tokens']}, "
        f"chunked prefill {'on' if d['enable_chunked_prefill'] else 'off'}",
        "speculation " + (f"{esc(spec['method'])}, {spec['num_speculative_tokens']} tokens" if spec else "off"),
    ]


def prediction_lines(row: dict[str, Any]) -> list[str]:
    return [
        f"${_number(row['cost_usd_per_hour'])}/hour, ${_number(row['cost_usd_per_output_mtoken'])}/M output tokens, "
        f"${_number(row['cost_usd_per_total_mtoken'])}/M tokens (in + out)",
        f"P99 TTFT {_number(row['p99_ttft_s'], ' s')}, TPOT {_number(row['p99_tpot_s'], ' s')}, "
        f"ITL {_number(row['p99_itl_s'], ' s')}, e2e {_number(row['p99_e2e_s'], ' s')}",
        f"{_number(row['output_tokens_per_s'])} output tokens/s, accuracy drop {_number(row['accuracy_drop_pct'], '%')}",
    ]


def _calibration_line(row: dict[str, Any]) -> list[str]:
    return [] if row.get("profile_calibrated", True) else ["<b>UNCALIBRATED</b> profile: datasheet defaults"]


def _trial_hover(row: dict[str, Any], status: str) -> str:
    source = " (simulated)" if row["fidelity"] == "simulate" else " (estimated)"
    head = f"<b>trial {row['trial']}</b>: {STATUS_LABELS[status]}" + (source if status == "infeasible" else "")
    lines = [head, *_calibration_line(row), *deployment_lines(row), *prediction_lines(row)]
    if row["reason"]:
        lines.append("why infeasible: " + html.escape(str(row["reason"])))
    return "<br>".join(lines)


def interval_lines(row: dict[str, Any]) -> list[str]:
    """A front point's 80% intervals (held-out error of its kind) and whether one holds an SLO."""
    spans = [f"{m.upper()} {_number(row.get(f'p99_{m}_s_low'))}-{_number(row.get(f'p99_{m}_s_high'), ' s')}"
             for m in ("ttft", "tpot", "itl", "e2e") if pd.notna(row.get(f"p99_{m}_s_low", math.nan))]
    lines = ["P99 80% intervals: " + ", ".join(spans)] if spans else []
    if row.get("slo_straddled"):
        lines.append("<b>SLO verdict uncertain</b>: the interval of " + html.escape(str(row["slo_straddled"]))
                     + " holds its target")
    return lines


def _front_hover(row: dict[str, Any], marks: dict[int, str]) -> str:
    mark = f" ({marks[row['trial']]})" if row["trial"] in marks else ""
    head = f"<b>trial {row['trial']}{mark}</b>: Pareto front, re-checked with {row['simulated_requests']} requests"
    return "<br>".join([head, *_calibration_line(row), *deployment_lines(row), *prediction_lines(row),
                        *interval_lines(row), "limited by: " + html.escape(row["why"])])


def _status(trials: pd.DataFrame) -> pd.Series:
    feasible = trials["feasible"].astype(bool)
    return pd.Series(
        ["infeasible" if not ok else ("simulated" if fid == "simulate" else "estimate")
         for ok, fid in zip(feasible, trials["fidelity"], strict=True)], index=trials.index)


def front_marks(front: pd.DataFrame, objective: dict) -> dict[int, str]:
    """The cheapest and the fastest front point (by the objective's cost and latency)."""
    if not len(front):
        return {}
    cost, latency = columns(objective)
    cheapest = front.sort_values([cost, latency]).iloc[0]["trial"]
    fastest = front.sort_values([latency, cost]).iloc[0]["trial"]
    if cheapest == fastest:
        return {int(cheapest): "cheapest and fastest"}
    return {int(cheapest): "cheapest", int(fastest): "fastest"}


def log_ticks(values: pd.Series) -> list[float]:
    """1-2-5 ticks over ``values`` (each labelled in full, not as a bare mantissa)."""
    low, high = math.floor(math.log10(values.min())), math.ceil(math.log10(values.max()))
    return [m * 10.0**e for e in range(low, high + 1) for m in (1, 2, 5)]


def _trial_traces(fig: go.Figure, evaluated: pd.DataFrame, status: pd.Series, cost_col: str, col: str,
                  colours: dict[str, str], uncalibrated: set[str]) -> None:
    for gpu, colour in colours.items():
        rows = evaluated[(evaluated["gpu"] == gpu) & evaluated[col].notna()] if len(evaluated) else evaluated
        # The legend entry is a filled marker whatever the GPU's first point is; it shows or hides
        # every trace of its group.
        # plotly reads <a>, <b> and entities in a trace's name: a GPU a hardware file named is text.
        name = html.escape(gpu) + (" (UNCALIBRATED)" if gpu in uncalibrated else "")
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name, legendgroup=gpu,
                                 marker={"color": colour, "size": 9}, hoverinfo="skip"))
        if not len(rows):
            continue
        kinds = status[rows.index]
        fig.add_trace(go.Scatter(
            x=rows[cost_col], y=rows[col], mode="markers", name=html.escape(gpu), legendgroup=gpu, showlegend=False,
            marker={"color": colour, "size": 8, "symbol": [STATUS_SYMBOLS[k] for k in kinds],
                    "opacity": [0.35 if k == "infeasible" else 0.85 for k in kinds], "line": {"width": 1.2}},
            hovertext=[_trial_hover(r, k) for r, k in zip(rows.to_dict("records"), kinds, strict=True)],
            hoverinfo="text",
        ))
    for kind, symbol in STATUS_SYMBOLS.items():  # what the symbols mean, in grey
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=STATUS_LABELS[kind],
                                 marker={"color": "#666", "symbol": symbol, "size": 8}, hoverinfo="skip"))


def _front_traces(fig: go.Figure, front: pd.DataFrame, cost_col: str, col: str, line: bool,
                  colours: dict[str, str], marks: dict[int, str]) -> None:
    ordered = front.sort_values(cost_col)
    low, high = f"{col}_low", f"{col}_high"
    bands = {}
    if low in ordered and ordered[low].notna().any():
        # Each point's 80% interval from the held-out error of its kind of prediction.
        bands = {"error_y": {"type": "data", "symmetric": False, "array": (ordered[high] - ordered[col]).fillna(0),
                             "arrayminus": (ordered[col] - ordered[low]).fillna(0), "color": "#555", "thickness": 1.2,
                             "width": 5}}
    straddled = ordered.get("slo_straddled", pd.Series("", index=ordered.index)).fillna("").astype(bool)
    fig.add_trace(go.Scatter(
        x=ordered[cost_col], y=ordered[col], name=f"Pareto front, re-checked ({len(front)})"
        + (", 80% intervals" if bands else ""),
        mode="lines+markers" if line else "markers", line={"color": "#222", "width": 1.5, "shape": "hv"},
        marker={"size": 13, "symbol": "diamond", "color": [colours[g] for g in ordered["gpu"]],
                "line": {"color": ["#d95f02" if s else "#222" for s in straddled], "width": [3 if s else 1.5 for s in straddled]}},
        hovertext=[_front_hover(r, marks) for r in ordered.to_dict("records")], hoverinfo="text", **bands,
    ))
    if straddled.any():
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", hoverinfo="skip",
                                 name="interval holds an SLO: verdict uncertain",
                                 marker={"size": 13, "symbol": "diamond-open", "color": "#d95f02",
                                         "line": {"width": 3, "color": "#d95f02"}}))
    # The cheapest and fastest points are named in the legend, not by labels that could hide points.
    for trial, mark in marks.items():
        row = ordered[ordered["trial"] == trial]
        if len(row) and pd.notna(row[col].iloc[0]):
            fig.add_trace(go.Scatter(
                x=row[cost_col], y=row[col], mode="markers", name=f"{mark} (#{trial})", hoverinfo="skip",
                marker={"size": 22, "symbol": "star-open", "color": "#b30000", "line": {"width": 2}}))


def feasible_ranges(evaluated: pd.DataFrame, status: pd.Series, front: pd.DataFrame, cost_col: str, col: str,
                    targets: list[float], log: bool) -> tuple[list[float], list[float]] | None:
    """Axis ranges around the feasible points, the front and the SLOs (None when nothing is feasible):
    where the choice is made, without the expensive or saturated trials that stretch the axes."""
    feasible = evaluated[status.reindex(evaluated.index) != "infeasible"] if len(evaluated) else evaluated
    xs = pd.concat([feasible[cost_col] if len(feasible) else pd.Series(dtype=float),
                    front[cost_col] if len(front) else pd.Series(dtype=float)]).dropna()
    ys = pd.concat([feasible[col] if len(feasible) else pd.Series(dtype=float),
                    front[col] if len(front) else pd.Series(dtype=float),
                    pd.Series([t for t in targets if t] or [math.nan], dtype=float)]).dropna()
    if not len(xs) or not len(ys):
        return None
    low, high = float(xs.min()), float(xs.max())
    pad = (high - low) * 0.08 or high * 0.08 or 1.0
    x_range = [max(low - pad, 0.0), high + pad]
    if log:
        y_low, y_high = math.log10(ys.min()), math.log10(ys.max())
        y_pad = (y_high - y_low) * 0.08 or 0.1
        return x_range, [y_low - y_pad, y_high + y_pad]
    y_pad = (float(ys.max()) - float(ys.min())) * 0.08 or float(ys.max()) * 0.08 or 1.0
    return x_range, [max(float(ys.min()) - y_pad, 0.0), float(ys.max()) + y_pad]


def _class_traces(fig: go.Figure, front: pd.DataFrame, cost_col: str, metric: str, classes: list[dict]) -> None:
    """Each class's own SLO on ``metric`` (dotted), and the front's P99 of that class beside it."""
    for i, c in enumerate(classes):
        target = (c.get("slo") or {}).get(SLO_KEYS[metric])
        if not target:
            continue
        colour = CLASS_COLOURS[i % len(CLASS_COLOURS)]
        name = html.escape(str(c["name"]))
        fig.add_hline(y=target, line={"color": colour, "dash": "dot", "width": 1.5})
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"class {name} SLO: P99 {metric.upper()} <= "
                                 f"{target:g} s", line={"color": colour, "dash": "dot", "width": 1.5}, hoverinfo="skip"))
        col = f"p99_{metric}_s[{c['name']}]"
        if len(front) and col in front and front[col].notna().any():
            rows = front[front[col].notna()].sort_values(cost_col)
            fig.add_trace(go.Scatter(
                x=rows[cost_col], y=rows[col], mode="markers", name=f"class {name}: front's P99 {metric.upper()}",
                marker={"size": 9, "symbol": "triangle-up", "color": colour},
                hovertext=[f"trial {r['trial']}: class {name} P99 {metric.upper()} {_number(r[col], ' s')} "
                           f"(SLO {target:g} s)" for r in rows.to_dict("records")], hoverinfo="text"))


def pareto_figures(trials: pd.DataFrame, front: pd.DataFrame, objective: dict, slo: dict,
                   classes: list[dict] | None = None) -> dict[str, go.Figure]:
    """One figure per panel metric (see :func:`panels`), keyed by the metric; ``classes``: the
    traffic's tenant classes, whose own SLOs are drawn too."""
    cost_col = columns(objective)[0]
    evaluated = trials[trials["objective_latency_s"].notna()] if len(trials) else trials
    colours = gpu_colours(sorted(set(evaluated["gpu"] if len(evaluated) else []) | set(front["gpu"] if len(front) else [])))
    status = _status(evaluated) if len(evaluated) else pd.Series(dtype=str)
    marks = front_marks(front, objective)
    uncalibrated = uncalibrated_gpus(evaluated, front)
    figures = {}
    for metric in panels(objective["latency"], slo, classes):
        col = f"p99_{metric}_s"
        target = slo.get(SLO_KEYS[metric])
        targets = [target, *((c.get("slo") or {}).get(SLO_KEYS[metric]) for c in classes or [])]
        values = pd.concat([evaluated[col] if len(evaluated) else pd.Series(dtype=float),
                            front[col] if len(front) else pd.Series(dtype=float),
                            pd.Series([t for t in targets if t] or [math.nan], dtype=float)])
        values = values.dropna()
        log = bool(len(values)) and values.min() > 0 and values.max() / values.min() > LOG_AXIS_RATIO
        fig = go.Figure()
        _trial_traces(fig, evaluated, status, cost_col, col, colours, uncalibrated)
        if len(front):
            _front_traces(fig, front, cost_col, col, metric == objective["latency"], colours, marks)
        _class_traces(fig, front, cost_col, metric, classes or [])
        if uncalibrated:
            fig.add_annotation(text=f"UNCALIBRATED: {', '.join(sorted(uncalibrated))} (datasheet defaults)",
                               xref="paper", yref="paper", x=1.0, y=1.0, xanchor="right", yanchor="bottom",
                               showarrow=False, font={"color": "#b30000", "size": 12})
        if target:  # named in the legend, so no label sits over the points
            fig.add_hline(y=target, line={"color": "#2ca02c", "dash": "dash", "width": 1.5})
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"SLO: P99 {metric.upper()} <= {target:g} s",
                                     line={"color": "#2ca02c", "dash": "dash", "width": 1.5}, hoverinfo="skip"))
        if log:
            ticks = log_ticks(values)
            fig.update_yaxes(type="log", tickvals=ticks, ticktext=[f"{t:g}" for t in ticks])
        ranges = feasible_ranges(evaluated, status, front, cost_col, col, targets, log)
        if ranges:
            # Opens on the feasible region; the button (or a double click) shows every trial.
            fig.update_xaxes(range=ranges[0])
            fig.update_yaxes(range=ranges[1])
            fig.update_layout(updatemenus=[{
                "type": "buttons", "direction": "left", "x": 0.45, "xanchor": "center", "y": 1.0, "yanchor": "bottom",
                "showactive": True, "font": {"size": 11}, "buttons": [
                    {"label": "feasible region", "method": "relayout",
                     "args": [{"xaxis.range": ranges[0], "yaxis.range": ranges[1]}]},
                    {"label": "all trials", "method": "relayout",
                     "args": [{"xaxis.autorange": True, "yaxis.autorange": True}]}]}])
        fig.update_layout(
            title={"text": f"cost vs P99 {metric.upper()}" + (" (objective)" if metric == objective["latency"] else ""),
                   "x": 0.02},
            xaxis_title=COST_LABELS[objective["cost"]], yaxis_title=f"P99 {metric.upper()} (s)",
            template="plotly_white", hovermode="closest", margin={"l": 60, "r": 20, "t": 50, "b": 10},
            # Under the plot, so the plot keeps the panel's width.
            legend={"font": {"size": 11}, "orientation": "h", "yanchor": "top", "y": -0.18, "x": 0},
            hoverlabel={"align": "left", "font": {"size": 12}},
        )
        figures[metric] = fig
    return figures
