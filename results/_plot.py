"""The Pareto plot: cost against P99 latency, one panel per latency that the objective or an SLO
names, with feasible, infeasible and front points and the SLO lines. Returned as inline SVG."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import pandas as pd  # noqa: E402

COST_LABELS = {"usd_per_hour": "fleet cost ($/hour)", "usd_per_mtoken": "cost ($ per million output tokens)"}
SLO_KEYS = {"ttft": "p99_ttft_s", "tpot": "p99_tpot_s", "e2e": "p99_e2e_s"}


def panels(objective_latency: str, slo: dict) -> list[str]:
    """The objective's latency first, then every other latency with an SLO."""
    return [objective_latency] + [m for m in SLO_KEYS if m != objective_latency and slo.get(SLO_KEYS[m])]


def pareto_svg(trials: pd.DataFrame, front: pd.DataFrame, objective: dict, slo: dict) -> str:
    """An SVG document (as text) of the trials and the front."""
    metrics = panels(objective["latency"], slo)
    cost_col = f"cost_{objective['cost']}"
    fig, axes = plt.subplots(1, len(metrics), figsize=(6.4 * len(metrics), 4.6), squeeze=False)
    evaluated = trials[trials["fidelity"] != "precheck"] if len(trials) else trials
    for ax, metric in zip(axes[0], metrics, strict=True):
        col = f"p99_{metric}_s"
        if len(evaluated):
            infeasible = evaluated[~evaluated["feasible"]]
            screened = evaluated[evaluated["feasible"] & (evaluated["fidelity"] == "estimate")]
            simulated = evaluated[evaluated["feasible"] & (evaluated["fidelity"] == "simulate")]
            ax.scatter(infeasible[cost_col], infeasible[col], marker="x", s=14, color="#bbbbbb",
                       label=f"infeasible ({len(infeasible)})")
            ax.scatter(screened[cost_col], screened[col], s=12, color="#9ecae1",
                       label=f"feasible, estimate only ({len(screened)})")
            ax.scatter(simulated[cost_col], simulated[col], s=16, color="#3182bd",
                       label=f"feasible, simulated ({len(simulated)})")
        if len(front):
            ordered = front.sort_values(cost_col)
            if metric == objective["latency"]:
                ax.step(ordered[cost_col], ordered[col], where="post", color="#de2d26", linewidth=1.2)
            ax.scatter(ordered[cost_col], ordered[col], s=40, color="#de2d26", zorder=3,
                       label=f"Pareto front, re-checked ({len(front)})")
            for row in ordered.itertuples():
                ax.annotate(str(row.trial), (getattr(row, cost_col), getattr(row, col)), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        target = slo.get(SLO_KEYS[metric])
        if target:
            ax.axhline(target, color="#31a354", linestyle="--", linewidth=1, label=f"SLO {SLO_KEYS[metric]} = {target:g} s")
        ax.set_xlabel(COST_LABELS[objective["cost"]])
        ax.set_ylabel(f"P99 {metric.upper()} (s)")
        values = evaluated[col].dropna() if len(evaluated) else pd.Series(dtype=float)
        if len(values) and values.min() > 0 and values.max() / values.min() > 20:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
        ax.set_title(f"cost vs P99 {metric.upper()}" + (" (objective)" if metric == objective["latency"] else ""))
    fig.tight_layout()
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]

