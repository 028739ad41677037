"""report.md and report.html of an optimize job, plus the CSV/JSON tables.

report.html works offline: it loads plotly.js from ``plotly.min.js`` written once beside it (no
CDN; the library is 4.8 MB, so inlining it made every report 5 MB), and says so in the page when
that file is missing. The page lays its plots out in as many columns as the window holds, so
nothing is cut off at 1,280 px or narrower.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.io as pio
from plotly.offline import get_plotlyjs

from ..costmodels.escaping import markdown_text, shell_word
from ..costmodels.outfiles import spreadsheet_safe, write_text
from ..costmodels.serving.slo import SLO
from ._plot import COST_LABELS, front_marks, pareto_figures
from ._record import LATENCY_TIE
from ._tables import CLASS_METRICS, COST_COLUMNS, class_column, pareto_frame, trials_frame

PLOTLY_JS = "plotly.min.js"  # beside report.html, written once per job folder
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
    ("P99 TTFT s [80%]", lambda r: _p99_cell(r, "ttft")),
    ("P99 TPOT s [80%]", lambda r: _p99_cell(r, "tpot")),
    ("P99 e2e s [80%]", lambda r: _p99_cell(r, "e2e")),
    # Only when the job predicted N-1 (redundancy > 0 or slo.n_minus_1): :func:`front_columns`.
    (N_MINUS_1_LABEL, lambda r: "saturates" if _present(r["n_minus_1_saturated"]) and bool(r["n_minus_1_saturated"])
     else " / ".join(_fmt(r[f"n_minus_1_p99_{m}_s"]) for m in ("ttft", "tpot", "e2e"))),
    ("output tok/s", lambda r: _fmt(r["output_tokens_per_s"])),
    ("acc. drop %", lambda r: _fmt(r["accuracy_drop_pct"])),
    ("KV pool GiB/GPU", lambda r: _fmt(r["memory_headroom_gib"])),
    ("profile", lambda r: "calibrated" if r["profile_calibrated"] else "UNCALIBRATED"),
]
TIE_NOTE = (f"At equal cost, P99s within {LATENCY_TIE:.0%} of each other count as tied (the predictions' error) and the "
            "front keeps the point with the lower accuracy drop (acc. drop %).")
INTERVAL_NOTE = ("Each P99 is followed by its 80% interval [low-high]: where measured values fell around servopt's "
                 "predictions of the same kind (GPU calibrated or not, GPU class, dense or MoE, vLLM engine, load) on "
                 "serving runs left out of its fit. (SLO?) marks a target inside the interval: the verdict is within "
                 "the model's own error.")
SLO_NAMES = {"p99_ttft_s": "ttft", "p99_tpot_s": "tpot", "p99_e2e_s": "e2e"}


def slo_targets(slo: dict[str, Any] | None) -> list[tuple[str, str, float]]:
    """(key, metric, target) of every latency target an SLO mapping sets: its other keys, such as
    ``n_minus_1``, are options, not targets (a class's ``n_minus_1: false`` once printed as "P99 NUS <= 0 s").

    >>> slo_targets({"p99_ttft_s": 0.5, "p99_tpot_s": None, "n_minus_1": False})
    [('p99_ttft_s', 'ttft', 0.5)]
    """
    return [(key, SLO_NAMES[key], float(value)) for key, value in (slo or {}).items()
            if key in SLO_NAMES and value is not None]


def front_columns(data: dict[str, Any], front: pd.DataFrame) -> list[tuple[str, Callable[[dict[str, Any]], str]]]:
    """:data:`FRONT_COLUMNS` (the N-1 column only when the job predicted one replica down), then each
    tenant class's P99 TTFT / TPOT / e2e in one column (traffic with classes)."""
    with_n_minus_1 = "n_minus_1_p99_ttft_s" in front
    classes = [c["name"] for c in data["workload"]["traffic"].get("classes") or []]
    # One column per class, its three P99s in one cell (as the N-1 column): a column per class and
    # metric made the table of two tenants scroll sideways at 1,280 px.
    extra = [(f"{tenant}: P99 TTFT / TPOT / e2e s",
              lambda r, t=tenant: " / ".join(_fmt(r.get(class_column(metric, t))) for metric in CLASS_METRICS))
             for tenant in classes]
    # One model on the whole front is named in the summary, not in every row.
    one_model = front["model"].nunique() <= 1
    return [(label, cell) for label, cell in FRONT_COLUMNS
            if (label != N_MINUS_1_LABEL or with_n_minus_1) and not (label == "model" and one_model)] + extra


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


def _p99_cell(row: dict[str, Any], metric: str) -> str:
    """A P99 with its 80% interval (the held-out error of its kind of prediction); '(SLO?)' where the
    interval holds the metric's SLO: the verdict is within the model's own error."""
    text = _fmt(row[f"p99_{metric}_s"])
    low, high = row.get(f"p99_{metric}_s_low"), row.get(f"p99_{metric}_s_high")
    if _present(low) and _present(high):
        text += f" [{_fmt(low)}-{_fmt(high)}]"
    if f"p99_{metric}" in str(row.get("slo_straddled") or "").split():
        text += " (SLO?)"
    return text


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
    capacity = capacity_lines(data, trials)
    lines += capacity
    for key, metric, target in slo_targets(slo):
        col = f"p99_{metric}_s"
        finite = evaluated[col].replace(math.inf, math.nan) if len(evaluated) else evaluated
        if len(evaluated) and not finite.notna().any() and evaluated[col].notna().any():
            lines.append(f"- slo.{key} = {target:g} s: no trial's queue stayed bounded, so no P99 "
                         f"{metric.upper()} is finite; see the capacity above")
        elif len(evaluated) and finite.notna().any():
            best = evaluated.loc[finite.idxmin()]
            lines.append(
                f"- slo.{key} = {target:g} s: the lowest P99 {metric.upper()} predicted was {best[col]:.3g} s "
                f"(trial {best['trial']}: {best['gpu']}, {best['num_gpus']} GPUs, {best['quantization']})"
                + ("; this SLO cannot be met by the candidates searched" if best[col] > target else "")
            )
    for i, c in enumerate(data["workload"]["traffic"].get("classes") or []):
        for key, metric, target in slo_targets(c.get("slo")):
            col = class_column(metric, c["name"])
            if col not in evaluated or not evaluated[col].notna().any():
                continue
            best = evaluated.loc[evaluated[col].idxmin()]
            lines.append(f"- traffic.classes.{i}.slo.{key} = {target:g} s ({c['name']}): the lowest P99 predicted was "
                         f"{best[col]:.3g} s (trial {best['trial']})"
                         + ("; this SLO cannot be met by the candidates searched" if best[col] > target else ""))
    if not len(evaluated):
        lines.append("- no configuration passed the checks before simulation (memory, TP, accuracy, GPU limit)")
    if capacity:
        lines.append("Lower traffic.arrival.rate_per_s to what the GPUs above sustain, or raise limits.max_gpus to the "
                     "fewest GPUs named, or widen gpus/space.")
    else:
        lines.append("Loosen the SLO keys named above, widen gpus/space, or raise accuracy.max_drop_pct or "
                     "limits.max_gpus.")
    return lines


def capacity_lines(data: dict[str, Any], trials: pd.DataFrame) -> list[str]:
    """When most predicted trials saturate: the largest rate each GPU and quantization sustains (a
    saturated deployment completes requests at its capacity, which the estimate or simulation
    predicted as ``requests_per_s``), and the fewest of its GPUs that would serve the asked rate
    (replicas are independent, so a replica's capacity times the replicas the rate needs). Empty
    otherwise, or for a closed-loop or trace arrival."""
    w = data["workload"]
    rate = w["traffic"]["arrival"].get("rate_per_s")
    if not rate or not len(trials):
        return []
    unit = "conversations/s" if w["traffic"]["arrival"]["kind"] == "sessions" else "requests/s"
    predicted = trials[trials["requests_per_s"].notna() & (trials["requests_per_s"] > 0) & (trials["replicas"] > 0)]
    saturated = predicted[predicted["saturated"].fillna(False).astype(bool)]
    if not len(predicted) or len(saturated) * 2 <= len(predicted):
        return _sizing_lines(data, trials, rate, unit)
    lines = [f"- capacity: {len(saturated)} of {len(predicted)} predicted trials saturate at {rate:g} {unit} (the queue "
             f"grows without bound); what each option sustains, as predicted (limits.max_gpus = {w['limits']['max_gpus']}):"]
    options = []
    for (gpu, quant), rows in saturated.groupby(["gpu", "quantization"]):
        best = rows.loc[rows["requests_per_s"].idxmax()]
        per_replica = rows["requests_per_s"] / rows["replicas"]
        gpus_per_replica = rows["num_gpus"] / rows["replicas"]
        fewest = ((rate / per_replica).apply(lambda n: math.ceil(n - 1e-9)) * gpus_per_replica).astype(int)
        at = fewest.idxmin()
        options.append((float(best["requests_per_s"]), f"  - {gpu} {quant}: at most {best['requests_per_s']:.3g} {unit} "
                        f"(trial {best['trial']}, {int(best['num_gpus'])} GPUs); {rate:g} {unit} would need about "
                        f"{fewest[at]} GPUs ({-(-fewest[at] // int(gpus_per_replica[at]))} replicas like trial "
                        f"{rows.loc[at, 'trial']}, {per_replica[at]:.3g} {unit} each)"))
    return lines + [text for _, text in sorted(options, key=lambda o: -o[0])]


def _sizing_lines(data: dict[str, Any], trials: pd.DataFrame, rate: float, unit: str) -> list[str]:
    """:func:`capacity_lines` for fleets refused before any prediction because the replicas the rate
    needs exceed ``limits.max_gpus``: by one replica's saturation rate as the analytic estimate
    predicts it (``replica_requests_per_s``, the engine model ``servopt predict`` runs)."""
    sized = trials[trials["replica_requests_per_s"].notna() & (trials["replica_requests_per_s"] > 0)
                   & (trials["replicas"] > 0)]
    too_big = sum("max_gpus" in t.record.violations for t in data["trials"])
    if not len(sized) or too_big * 2 <= len(trials):
        return []
    max_gpus = data["workload"]["limits"]["max_gpus"]
    lines = [f"- capacity: {too_big} of {len(trials)} trials need more than limits.max_gpus = {max_gpus} GPUs "
             f"for {rate:g} {unit}; by the estimate's saturation rate of one replica (what `servopt predict "
             f"--analytic` finds for it):"]
    options = []
    for (gpu, quant), rows in sized.groupby(["gpu", "quantization"]):
        per_replica = rows["replica_requests_per_s"]
        gpus_per_replica = (rows["num_gpus"] / rows["replicas"]).round().astype(int)
        within = per_replica * (max_gpus // gpus_per_replica)
        fewest = ((rate / per_replica).apply(lambda n: math.ceil(n - 1e-9)) * gpus_per_replica).astype(int)
        at, best = fewest.idxmin(), within.idxmax()
        options.append((float(within[best]), f"  - {gpu} {quant}: at most {within[best]:.3g} {unit} on "
                        f"{int(max_gpus // gpus_per_replica[best] * gpus_per_replica[best])} GPUs "
                        f"({per_replica[best]:.3g} {unit} per replica of {_gpus(gpus_per_replica[best])}); "
                        f"{rate:g} {unit} would need about {fewest[at]} GPUs"
                        + (f" ({per_replica[at]:.3g} {unit} per replica of {_gpus(gpus_per_replica[at])})"
                           if at != best else "")))
    return lines + [text for _, text in sorted(options, key=lambda o: -o[0])]


def _gpus(count: int) -> str:
    return f"{count} GPU" + ("" if count == 1 else "s")


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
            + "".join(f", P99 {metric.upper()} <= {target:g} s" for _, metric, target in slo_targets(c.get("slo")))
            + ")" for c in classes)
    slo = ", ".join(f"{key} = {target:g} s" for key, _, target in slo_targets(w["slo"])) or "none"
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
        f"{w['limits']['max_gpus']} GPUs; {_pricing_text(w['pricing']['whole_nodes'], data['gpus'])}",
        f"- Trials: {len(trials)} ({counts.get('simulate', 0)} simulated at {w['fidelity']['search_requests']} requests, "
        f"{counts.get('estimate', 0)} screened by the estimate, {pruned} pruned with nothing predicted: "
        f"{counts.get('precheck', 0)} rejected before estimating, {pruned - counts.get('precheck', 0)} estimated to "
        f"saturate); {feasible} feasible; sampler {w['sampler']}, seed {w['seed']}",
        *_screen_lines(data),
        *_recheck_lines(data),
        f"- Study '{data['job']['study']}' in {data['job']['storage']}",
        *[f"- Warning: {line}" for line in unit_warnings(w)],
    ]


def unit_warnings(workload: dict[str, Any]) -> list[str]:
    """The workload's targets that read as another unit (what ``optimize`` warned before it ran)."""
    slos = [("slo", workload["slo"])] + [(f"traffic.classes.{i}.slo", c.get("slo") or {})
                                         for i, c in enumerate(workload["traffic"].get("classes") or [])]
    return [line for where, slo in slos for line in SLO.model_validate(slo).unit_warnings(where)]


def _pricing_text(whole_nodes: bool | None, gpus: dict[str, Any]) -> str:
    """How fleets are billed: whole nodes, the GPUs used, or as each GPU's price is quoted."""
    if whole_nodes is not None:
        return "priced per " + ("node: every GPU of each node a fleet occupies is rented" if whole_nodes else "GPU used")
    by_node = [g for g, info in gpus.items() if info.get("price_per") == "node"]
    by_gpu = [g for g in gpus if g not in by_node]
    parts = ([f"whole nodes of {', '.join(by_node)} (priced as whole instances)"] if by_node else []) + \
        ([f"the GPUs used of {', '.join(by_gpu)} (priced per GPU)"] if by_gpu else [])
    return "rented as priced: " + "; ".join(parts)


def screen_statement(screen: dict[str, Any]) -> str:
    """What the whole-space screen covered (the study's ``screen`` attribute:
    :func:`~servopt.optimizer.study.screen_space`), in one sentence.

    Example:
        >>> print(screen_statement({"points": 48, "deployments": 30, "ruled_out": 10, "out_of_reach": 5,
        ...                         "candidates": 15, "simulated": 4, "dropped": 11, "left": 0, "gridded": {}}))
        every deployment in the space was screened (48 points, 30 distinct deployments: 10 broke a rule,
        5 cannot meet the SLOs even at the estimate's optimistic bound); 4 were simulated; every point
        whose optimistic bound could beat the front was simulated (11 others were dropped: a simulated
        deployment that costs no more beats their bound)
    """
    if screen.get("fallback"):
        return screen["fallback"]
    grid = "; ".join(f"{knob} at {', '.join(map(str, values))}" for knob, values in (screen.get("gridded") or {}).items())
    head = (f"every deployment in the space{f' ({grid})' if grid else ''} was screened ({screen['points']:,} points, "
            f"{screen['deployments']:,} distinct deployments: {screen['ruled_out']:,} broke a rule, "
            f"{screen['out_of_reach']:,} cannot meet the SLOs even at the estimate's optimistic bound); "
            f"{screen['simulated']:,} were simulated; ")
    if screen.get("left"):
        return head + (f"{screen['left']:,} whose optimistic bound could still beat the front were not simulated "
                       f"({screen['stopped']})")
    return head + (f"every point whose optimistic bound could beat the front was simulated ({screen['dropped']:,} "
                   "others were dropped: a simulated deployment that costs no more beats their bound)")


def _screen_lines(data: dict[str, Any]) -> list[str]:
    screen = data.get("screen")
    return [f"- Screen: {screen_statement(screen)}"] if screen else []


def _recheck_lines(data: dict[str, Any]) -> list[str]:
    """What the front's re-check established (:func:`~servopt.optimizer.study.recheck_statement`)."""
    r = data.get("recheck")
    if not r:
        return []
    line = (f"- Re-check: {r['rechecked']} of {r['candidates']} candidates (simulated feasible, or within their P99's "
            f"interval of an SLO: {r['within_interval']}) re-simulated with {r['requests']} requests, {r['failed']} failed")
    if r["cheapest_passing"] is not None:
        cost = data["workload"]["objective"]["cost"]
        line += (f"; every candidate cheaper than {r['cheapest_passing']:.4g} ({COST_LABELS[cost]}) was re-checked and "
                 "failed, and every candidate not re-checked is dominated by a re-checked point that passed, or ties with "
                 "one at equal cost whose accuracy drop is no higher")
    return [line]


def _config_lines(front: pd.DataFrame) -> list[str]:
    """Each checkpoint the front serves, with its weights' format and the config its architecture was read from."""
    seen: dict[str, str] = {}
    for row in front.to_dict(orient="records"):
        if row["model"] not in seen:
            fmt = f"{row['weights_format']}; " if row.get("weights_format") else ""
            seen[row["model"]] = f"- {row['model']}: {fmt}model config: {row.get('config_source') or 'not recorded'}"
    return list(seen.values()) or ["- (no front point)"]


def profile_groups(data: dict[str, Any]) -> tuple[list[tuple[str, dict[str, Any], str]], list[str]]:
    """Each GPU with its own part of its profile's description, and the sources they share, stated
    once: a shipped profile reads "<GPU name>: <sources>", the same sources for every GPU."""
    parts = {gpu: info["profile"].split(": ", 1) for gpu, info in data["gpus"].items()}
    shared = Counter(p[1] for p in parts.values() if len(p) == 2)
    common = [text for text, count in shared.items() if count > 1]
    rows = []
    for gpu, info in data["gpus"].items():
        head = parts[gpu]
        own = head[0] if len(head) == 2 and head[1] in common else info["profile"]
        note = f" (sources {common.index(head[1]) + 1})" if len(head) == 2 and head[1] in common and len(common) > 1 else ""
        rows.append((gpu, info, own + note))
    return rows, common


def _profile_lines(data: dict[str, Any]) -> list[str]:
    """The markdown lines of the calibration profiles (GPU names and profile sources escaped)."""
    md = markdown_text
    rows, common = profile_groups(data)
    lines = []
    for gpu, info, own in rows:
        flag = "calibrated" if info["calibrated"] else "**UNCALIBRATED**: predictions on this GPU rest on datasheet defaults"
        lines.append(f"- {md(gpu)} (${info['price_per_gpu_hour']:.2f}/GPU-hour): {md(own)} ({flag})")
    for i, text in enumerate(common, start=1):
        lines += ["", (f"Sources {i}: " if len(common) > 1 else "Sources of these profiles: ") + md(text)]
    return lines


# A number in a reason that varies between trials: not part of a word (l4, P99, fp8, Llama-3.1-8B)
# and not a target the workload set (after "SLO ", or "= " as in limits.max_gpus = 8).
_NUMBER = re.compile(r"(?<![\w.\-/])(?<!SLO )(?<!= )\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.\-])")


def group_reasons(reasons: list[str], top: int = 8) -> list[tuple[int, str]]:
    """The most common reasons trials were infeasible, grouped: each part of a trial's reason (parts
    are joined by "; ") with its varying figures taken out is one group, counted once per trial,
    and shown with each figure's range over the group. Saturation reasons group by their fidelity.

    >>> group_reasons(["estimated P99 TTFT 0.61 s > SLO 0.5 s", "estimated P99 TTFT 0.93 s > SLO 0.5 s; x",
    ...                "estimated P99 TTFT 0.7 s > SLO 0.5 s"])
    [(3, 'estimated P99 TTFT 0.61-0.93 s > SLO 0.5 s'), (1, 'x')]
    """
    groups: dict[str, tuple[int, list[list[float]]]] = {}
    for reason in reasons:
        seen = set()
        for part in filter(None, (p.strip() for p in reason.split("; "))):
            if part.startswith(("saturated", "re-check", "settled by")):
                part = part.split(":")[0]
            figures = [float(m.group(0)) for m in _NUMBER.finditer(part)]
            template = _NUMBER.sub("\0", part)
            if template in seen:
                continue
            seen.add(template)
            count, values = groups.get(template, (0, [[] for _ in figures]))
            for slot, value in zip(values, figures, strict=True):
                slot.append(value)
            groups[template] = (count + 1, values)
    out = []
    for template, (count, values) in sorted(groups.items(), key=lambda g: -g[1][0])[:top]:
        text = template
        for slot in values:
            low, high = min(slot), max(slot)
            text = text.replace("\0", f"{low:.3g}" if low == high else f"{low:.3g}-{high:.3g}", 1)
        out.append((count, text))
    return out


def _markdown_lines(lines: list[str]) -> list[str]:
    """Plain-text lines (a list item's ``- `` kept) as markdown: everything after that escaped by
    :func:`~servopt.costmodels.escaping.markdown_text`, for the user's names they hold."""
    out = []
    for line in lines:
        bullet, text = re.match(r"( *- )?(.*)", line).groups()
        out.append((bullet or "") + markdown_text(text))
    return out


def _table_cell(text: str) -> str:
    return markdown_text(text).replace("|", "\\|")


def _reason_lines(trials: pd.DataFrame, top: int = 8) -> list[str]:
    """"- N x reason" for the most common reasons trials were infeasible (:func:`group_reasons`);
    empty when no trial was infeasible with a reason, so no heading stands over nothing."""
    if not len(trials):
        return []
    infeasible = trials[~trials["feasible"].astype(bool)]
    reasons = [r for r in infeasible["reason"] if isinstance(r, str) and r.strip()]
    return [f"- {count} x {reason}" for count, reason in group_reasons(reasons, top)]


def _why_cell(row: dict[str, Any]) -> str:
    same = row.get("equivalent_trials", "")
    return row["why"] + (f"; same predictions as trial(s) {same}" if isinstance(same, str) and same else "")


def _front_rows(front: pd.DataFrame, objective: dict, columns: list) -> list[tuple[dict[str, Any], list[str], str]]:
    """Each front row with its table cells and its mark (cheapest, fastest or '')."""
    marks = front_marks(front, objective)
    return [(row, [cell(row) for _, cell in columns] + [_why_cell(row)], marks.get(row["trial"], ""))
            for row in front.to_dict(orient="records")]


def render_markdown(data: dict[str, Any], trials: pd.DataFrame, front: pd.DataFrame) -> str:
    # Every user string (study, class, GPU and model names, paths) through markdown_text: no HTML,
    # link or line of a user's runs when the report is rendered.
    w = data["workload"]
    lines = [f"# servopt optimize: {markdown_text(data['job']['study'])}", "",
             *_markdown_lines(_summary_lines(data, trials)), ""]
    lines += [f"## Pareto front (re-checked with {w['fidelity']['final_requests']} simulated requests)", ""]
    if len(front):
        columns = front_columns(data, front)
        lines.append("| " + " | ".join(_table_cell(label) for label, _ in columns) + " | why |")
        lines.append("|" + "---|" * (len(columns) + 1))
        for _, cells, mark in _front_rows(front, w["objective"], columns):
            cells[0] += f" ({mark})" if mark else ""
            lines.append("| " + " | ".join(_table_cell(c) for c in cells) + " |")
        lines += ["", TIE_NOTE]
        if "p99_ttft_s_low" in front and front["p99_ttft_s_low"].notna().any():
            lines += ["", INTERVAL_NOTE]
        if not front["profile_calibrated"].astype(bool).all():
            lines += ["", "Rows marked UNCALIBRATED are predicted on a GPU without a calibration profile (datasheet "
                          "defaults): measure before relying on them."]
        lines += ["", f"Export one: {markdown_text(export_command(data['job']['out_dir']), code=True)} (or `fastest`, "
                      "or a # above)."]
    else:
        lines += ["**The front is empty.**", "", *_markdown_lines(explain_empty(data, trials))]
    lines += ["", "## Model configurations", "", *_markdown_lines(_config_lines(front))]
    lines += ["", "## Calibration profiles", "", *_profile_lines(data)]
    reasons = _reason_lines(trials)
    if reasons:
        lines += ["", "## Most common reasons trials were infeasible", "", *_markdown_lines(reasons)]
    lines += ["", "## Search space", ""] + _markdown_lines([f"- {k}: {v}" for k, v in data["space"].items()])
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
table.front td.model{text-align:left;white-space:nowrap}
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
            if label == "model":  # two lines at most: the organisation, then the name unbroken
                tds.append(f"<td class='model'>{'/<br>'.join(esc(part) for part in cell.split('/', 1))}</td>")
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
            for metric, fig in pareto_figures(trials, front, w["objective"], w["slo"],
                                              w["traffic"].get("classes")).items()]
    return "<div class='plots'>" + "".join(f"<div class='plot'>{div}</div>" for div in divs) + "</div>"


def render_html(data: dict[str, Any], trials: pd.DataFrame, front: pd.DataFrame) -> str:
    w = data["workload"]
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>servopt: {esc(data['job']['study'])}</title>",
        f"<style>{PAGE_STYLE}</style>",
        f"<script src='{PLOTLY_JS}'></script></head><body>",
        "<p id='no-plotly' class='warn' hidden>The plots need plotly.min.js beside this file (servopt report DIR "
        "writes it again).</p><script>if (!window.Plotly) document.getElementById('no-plotly').hidden = false;"
        "</script>",
        f"<h1>servopt optimize: {esc(data['job']['study'])}</h1><ul>",
        *[f"<li>{esc(line[2:])}</li>" for line in _summary_lines(data, trials)],
        "</ul>",
        _figures_html(trials, front, w),
        "<p>Hover a point for its whole deployment and predictions; click a legend entry to hide a GPU.</p>",
        f"<h2>Pareto front (re-checked with {w['fidelity']['final_requests']} simulated requests)</h2>",
    ]
    if len(front):
        parts.append(_front_table_html(front, w["objective"], front_columns(data, front)))
        parts.append(f"<p>{esc(TIE_NOTE)}</p>")
        if "p99_ttft_s_low" in front and front["p99_ttft_s_low"].notna().any():
            parts.append(f"<p>{esc(INTERVAL_NOTE)}</p>")
        parts.append(f"<p>Export one: <code>{esc(export_command(data['job']['out_dir']))}</code> "
                     "(or <code>fastest</code>, or a # above)</p>")
    else:
        lines = explain_empty(data, trials)
        parts.append("<p class='warn'>The front is empty.</p><ul>" + "".join(f"<li>{esc(x.lstrip('- '))}</li>" for x in lines) + "</ul>")
    parts.append("<h2>Model configurations</h2><ul>" + "".join(f"<li>{esc(x[2:])}</li>" for x in _config_lines(front))
                 + "</ul>")
    parts.append("<h2>Calibration profiles</h2><ul>")
    rows, common = profile_groups(data)
    for gpu, info, own in rows:
        flag = "calibrated" if info["calibrated"] else "<span class='warn'>UNCALIBRATED</span>: datasheet defaults"
        parts.append(f"<li>{esc(gpu)} (${info['price_per_gpu_hour']:.2f}/GPU-hour): {esc(own)} ({flag})</li>")
    parts.append("</ul>")
    parts += [f"<p class='sources'>{'Sources %d: ' % i if len(common) > 1 else 'Sources of these profiles: '}"
              f"{esc(text)}</p>" for i, text in enumerate(common, start=1)]
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


def export_command(out_dir: str | Path, pick: str = "cheapest") -> str:
    """The ``servopt export`` command line for a job folder, shell-quoted (a folder is a user's string:
    pasted, it must not run as code).

    >>> export_command("runs/o;touch x;#")
    "servopt export 'runs/o;touch x;#' --pick cheapest"
    """
    return servopt_command("export", out_dir, "--pick", pick)


def servopt_command(command: str, path: str | Path, *options: str) -> str:
    """A ``servopt COMMAND PATH [OPTIONS]`` line to print: shell-quoted (control characters in
    bash's ``$'...'`` form, :func:`~servopt.costmodels.escaping.shell_word`), and its path never read
    as an option (a folder named ``-o`` is written ``./-o``).

    >>> servopt_command("report", "-o"), servopt_command("report", "a\\nb")
    ('servopt report ./-o', "servopt report $'a\\\\nb'")
    """
    path = str(path)
    return " ".join(map(shell_word, ["servopt", command, f"./{path}" if path.startswith("-") else path, *options]))


def write_results(out_dir: str | Path, data: dict[str, Any]) -> dict[str, Path]:
    """Write trials.csv, pareto.csv, front.json, report.md and report.html; return their paths."""
    out = Path(out_dir)
    trials = trials_frame(data)
    front = pareto_frame(data)
    front_doc = {"study": data["job"]["study"], "workload": data["workload"], "gpus": data["gpus"],
                 "max_model_len": data.get("max_model_len", {}), "points": front_points(data, front)}
    texts = {
        "trials.csv": spreadsheet_safe(trials).to_csv(index=False),
        "pareto.csv": spreadsheet_safe(front).to_csv(index=False),
        "front.json": json.dumps(front_doc, indent=2, default=_json_default) + "\n",
        "report.md": render_markdown(data, trials, front),
        "report.html": render_html(data, trials, front),
    }
    # Atomic, and a link planted in the folder is replaced rather than written through.
    paths = {name: write_text(out / name, text) for name, text in texts.items()}
    library = get_plotlyjs()
    current = out / PLOTLY_JS
    if not current.is_file() or current.is_symlink() or current.stat().st_size != len(library.encode()):
        write_text(current, library)
    return paths


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars from pandas rows
        return value.item()
    raise TypeError(f"cannot serialize {type(value).__name__}")
