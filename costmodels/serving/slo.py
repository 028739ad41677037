"""Latency targets a deployment is scored against (the ``slo:`` of a workload).

``n_minus_1: true`` asks that the targets also hold with one replica down: the same traffic on one
replica fewer (seed 7.4's redundancy, checked rather than assumed). The optimizer then simulates
every candidate at N and at N-1 replicas and sizes fleets with at least one spare replica.

Targets are in seconds. One outside what any deployment could mean (:data:`PLAUSIBLE_S`: a TPOT of a
second or more, a TTFT of ten minutes, ...) is most likely written in milliseconds;
:meth:`SLO.unit_warnings` says so in one line with the likely fix, and the commands print it (and
the report repeats it). It is a warning, not a refusal: such a target is legal (an offline batch
job may not care about TTFT), it only must not pass silently. A target below what any GPU does
(a TTFT under 1 ms, a TPOT under 0.1 ms) is warned the same way: no candidate will meet it.

Example:
    >>> SLO(p99_ttft_s=2.0, p99_tpot_s=0.05).targets()
    {'ttft': 2.0, 'tpot': 0.05}
    >>> SLO(p99_ttft_s=0.5, n_minus_1=True).n_minus_1
    True
    >>> for line in SLO(p99_ttft_s=500, p99_tpot_s=50).unit_warnings():
    ...     print(line)
    slo.p99_tpot_s: 50 is in seconds (a TPOT of 1 s or more is no deployment's target); did you mean 0.05 (50 ms)?
    slo.p99_ttft_s: 500 is in seconds, beside slo.p99_tpot_s in milliseconds; did you mean 0.5 (500 ms)?
"""

from __future__ import annotations

from pydantic import Field

from ..errors import Seconds, Spec

# (lowest, highest) target in seconds that a deployment could mean, per metric: no GPU returns a
# first token in under a millisecond or a next token in under 0.1 ms, and no interactive target
# waits ten minutes for a first token, a second per token or an hour for a whole answer.
PLAUSIBLE_S = {"ttft": (1e-3, 600.0), "tpot": (1e-4, 1.0), "e2e": (1e-3, 3600.0)}


class SLO(Spec):
    """Latency targets at P99 (any subset), in seconds (finite, at most a year). A target that reads as
    milliseconds (TTFT >= 600 s, TPOT >= 1 s, end-to-end >= 1 h) or below what any GPU does (TTFT
    under 1 ms, TPOT under 0.1 ms) is warned in one line with the likely fix, not refused."""

    p99_ttft_s: Seconds | None = None
    p99_tpot_s: Seconds | None = None
    p99_e2e_s: Seconds | None = None
    n_minus_1: bool = Field(default=False, description="the targets hold with one replica down as well")

    def targets(self) -> dict[str, float]:
        """The targets that are set, by metric (ttft, tpot, e2e)."""
        pairs = {"ttft": self.p99_ttft_s, "tpot": self.p99_tpot_s, "e2e": self.p99_e2e_s}
        return {metric: target for metric, target in pairs.items() if target is not None}

    def unit_warnings(self, where: str = "slo") -> list[str]:
        """One line per target outside :data:`PLAUSIBLE_S`, with the likely fix (``where``: the
        key path of this SLO in the workload file). When one target reads as milliseconds, another
        of a second or more beside it most likely does too, and is warned with it."""
        out, in_ms = [], []
        targets = self.targets()
        for metric, target in targets.items():
            low, high = PLAUSIBLE_S[metric]
            key = f"{where}.p99_{metric}_s"
            if target >= high:
                in_ms.append(key)
                out.append(f"{key}: {target:g} is in seconds (a {metric.upper()} of {high:g} s or more is no "
                           f"deployment's target); did you mean {target / 1000:g} ({target:g} ms)?")
            elif target < low:
                out.append(f"{key}: {target:g} s ({target * 1e3:g} ms) is below what any GPU does (a {metric.upper()} "
                           f"under {low * 1e3:g} ms); no deployment will meet it: the unit is seconds")
        for metric, target in targets.items() if in_ms else ():
            key = f"{where}.p99_{metric}_s"
            if key not in in_ms and target >= 1 and target / 1000 >= PLAUSIBLE_S[metric][0]:
                out.append(f"{key}: {target:g} is in seconds, beside {in_ms[0]} in milliseconds; did you mean "
                           f"{target / 1000:g} ({target:g} ms)?")
        return out


def above(latency_s: float, target_s: float, label: str = "SLO") -> str:
    """``"<latency> s > <label> <target> s"`` with as many digits as it takes for the two to differ
    (a P99 of 0.5004 s is not "0.5 s > SLO 0.5 s").

    >>> above(0.5004, 0.5), above(0.75, 0.5, "its SLO")
    ('0.5004 s > SLO 0.5 s', '0.75 s > its SLO 0.5 s')
    """
    shown = f"{latency_s:.3g}"
    for digits in range(4, 10):
        if float(shown) > target_s:
            break
        shown = f"{latency_s:.{digits}g}"
    return f"{shown} s > {label} {target_s:g} s"
