"""Screening the whole space: every deployment estimated, the front simulated cheapest first.

A sampler spends its budget where it draws; a discrete space of a few thousand deployments can be
estimated whole in less CPU than a hundred simulations. The screen (workload ``sampler: screen``)
lists every point of the space's grid, scores each distinct deployment (after the
repair and the derived replica count, as a trial would) with the analytic estimate, and bounds its
P99s from below by the estimate's largest measured overestimate of deployments that meet the SLOs
in simulation (:data:`ESTIMATE_OVERSHOOT`): a deployment whose optimistic P99s still miss an SLO,
or whose estimated fleet saturates, cannot be feasible and is dropped. The others are simulated in rounds, each round the deployments that no
other one left dominates by its estimate, cheapest first (:func:`screen_round`); a deployment
is dropped once a simulated feasible one costs no more, is no slower than its optimistic latency
and loses no accuracy against it, since it cannot change the front then. When no deployment is
left, every one that could beat the front was simulated.

The grid is each knob's values; an integer range too wide to list (``max_num_seqs`` 8..1024,
``max_num_batched_tokens`` 256..32768 by default) is screened at its ends and the powers of two in
between, the values vLLM's own defaults and most deployments use. A grid of more than
:data:`MAX_SCREEN_POINTS` points is not screened: the job falls back to NSGA-II and says so; so it
does when no deployment can reach the front (its trials, each with its reason, explain the empty
front).

Example (a space of 2 GPUs x 2 TPs x 4 ``max_num_seqs`` of the range 16..128 x 3 headrooms):
    >>> from servopt.search_spaces import SearchSpace, example_context
    >>> space = SearchSpace(example_context(gpus=("h100", "a100-80gb")), {"mode": "aggregated", "tp": [1, 2],
    ...     "quantization": "bf16", "kv_cache_dtype": "auto", "max_num_seqs": {"low": 16, "high": 128},
    ...     "max_num_batched_tokens": 8192, "enable_chunked_prefill": True, "speculation": "off",
    ...     "headroom": [0.0, 0.5, 1.0]})
    >>> grid = screen_grid(space)
    >>> grid["max_num_seqs"], count_points(space, grid)
    ([16, 32, 64, 128], 48)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..costmodels.errors import InputError
from ..search_spaces import LISTED_VALUES, Domain, IntRange, SearchSpace, Value
from ._evaluate import SLO_CONSTRAINTS, Evaluator, Preview

# Largest grid screened: at the ~0.55 ms of CPU per point measured (repair, compile and capacity per
# distinct engine, a cached capacity per headroom, the estimate of each distinct deployment: 24 s for
# the 46,080 points of the 70B job with mode aggregated, 51 s for DeepSeek-V3's 92,160) about a
# minute, a few hundred search simulations' worth; a larger grid falls back to the sampler.
MAX_SCREEN_POINTS = 100_000
# The knob that only sizes the derived fleet (absent where the workload searches ``replicas``).
FLEET_KNOB = "headroom"
# The estimate's largest overestimate of a simulated P99, estimate / simulation - 1, per metric, over
# the deployments the simulation finds within the SLOs (only those can be on the front):
# ``python benchmarks/bench_estimate_accuracy.py`` (2026-12-05, its four spaces: 1,867 such of 2,016
# deployments simulated at 1,500 requests): TTFT +675.3%, TPOT +57.2%, E2E +67.6%, rounded up. So a
# feasible deployment's simulated P99 is at least its estimate / (1 + overshoot) wherever the
# measurement covers (dense 8B and 70B models: no MoE model was measured); ITL, not measured, takes
# the largest.
ESTIMATE_OVERSHOOT = {"ttft": 6.76, "tpot": 0.58, "e2e": 0.68}


def overshoot(metric: str) -> float:
    """The estimate's largest measured overestimate of the P99 of ``metric`` (the largest of all
    when not measured)."""
    return ESTIMATE_OVERSHOOT.get(metric, max(ESTIMATE_OVERSHOOT.values()))


def grid_values(domain: Domain) -> list[Value]:
    """A knob's screened values: every value, or for an integer range too wide to list, its ends and
    the powers of two in between.

    Example:
        >>> grid_values(IntRange(8, 1024, log=True))
        [8, 16, 32, 64, 128, 256, 512, 1024]
        >>> grid_values(IntRange(100, 300))
        [100, 128, 256, 300]
    """
    if isinstance(domain, IntRange) and domain.count > LISTED_VALUES:
        powers = [2**i for i in range(domain.high.bit_length() + 1) if domain.low <= 2**i <= domain.high]
        return sorted({domain.low, domain.high, *(p for p in powers if domain.contains(p))})
    return domain.values()


def screen_grid(space: SearchSpace) -> dict[str, list[Value]]:
    """Every knob's screened values (:func:`grid_values`)."""
    return {k.name: grid_values(space.domain(k.name)) for k in space.knobs}


def gridded(space: SearchSpace, grid: dict[str, list[Value]]) -> dict[str, list[Value]]:
    """The knobs screened on a grid rather than at every value, with the grid's values."""
    def size(domain: Domain) -> int:
        return domain.count if isinstance(domain, IntRange) else len(domain.values())

    return {name: values for name, values in grid.items() if len(values) < size(space.domain(name))}


def count_points(space: SearchSpace, grid: dict[str, list[Value]]) -> int:
    """How many points the grid holds (conditional knobs counted only where active), without listing
    them: values of a knob that leave the same later knobs active are counted as one branch, times
    their number (exact as long as each knob's condition reads one earlier knob, as every knob of
    :data:`~servopt.search_spaces.KNOBS` does)."""
    knobs = space.knobs

    def walk(index: int, values: dict[str, Value]) -> int:
        if index == len(knobs):
            return 1
        knob = knobs[index]
        if not knob.active(values):
            return walk(index + 1, values)
        branches: dict[tuple[bool, ...], list[Value]] = {}
        for value in grid[knob.name]:
            chosen = {**values, knob.name: value}
            branches.setdefault(tuple(later.active(chosen) for later in knobs[index + 1:]), []).append(value)
        return sum(len(same) * walk(index + 1, {**values, knob.name: same[0]}) for same in branches.values())

    return walk(0, {})


@dataclass(frozen=True)
class Screened:
    """A distinct deployment that may reach the front: the first grid point that scores it, its
    estimated objective values, their optimistic bounds (cost and latency the simulation may reach at
    best), and its accuracy drop; ``order`` is its place in the grid (ties of cost break by it)."""

    params: dict[str, Value]
    key: str
    estimate: tuple[float, float]
    optimistic: tuple[float, float]
    accuracy_drop_pct: float
    order: int


@dataclass
class ScreenPlan:
    """What the screen found before simulating: the grid's points, the distinct deployments they
    score, how many broke a rule (memory, TP, accuracy, ...), how many the estimate's optimistic
    bound rules out (saturated, or an SLO missed), and the others, cheapest first. ``fallback`` says
    why the space was not screened (then nothing else is set)."""

    points: int
    gridded: dict[str, list[Value]] = field(default_factory=dict)
    deployments: int = 0
    ruled_out: int = 0
    out_of_reach: int = 0
    candidates: list[Screened] = field(default_factory=list)
    fallback: str | None = None


def plan_screen(evaluator: Evaluator, max_points: int | None = None) -> ScreenPlan:
    """Estimate every deployment of the space's grid and keep those that may be feasible, cheapest
    first (see the module docstring); a grid over ``max_points`` (:data:`MAX_SCREEN_POINTS`) is not
    listed (``fallback``)."""
    max_points = MAX_SCREEN_POINTS if max_points is None else max_points
    space = evaluator.problem.space
    grid = screen_grid(space)
    points = count_points(space, grid)
    plan = ScreenPlan(points, gridded(space, grid))
    if points > max_points:
        plan.fallback = (f"the space was not screened whole: its grid holds {points:,} points, more than the "
                         f"{max_points:,} the screen estimates; NSGA-II searched it, so deployments it never drew were "
                         "neither estimated nor simulated")
        return plan
    seen: set[tuple] = set()
    ruled_before_fleet: tuple | None = None
    for order, candidate in enumerate(space.enumerate(grid)):
        point = candidate.values
        # headroom (the last knob, varying fastest) only sizes the derived fleet: a rule broken before
        # the fleet is sized is broken by the same deployment, of one replica, at every headroom.
        engine = tuple((k, v) for k, v in point.items() if k != FLEET_KNOB)
        if engine == ruled_before_fleet:
            continue
        preview = evaluator.preview(candidate)
        if preview.violations and preview.capacity is None:
            ruled_before_fleet = engine
        if preview.key in seen:
            continue
        seen.add(preview.key)
        if preview.violations:
            plan.ruled_out += 1
            continue
        screened = _screened(evaluator, point, preview, order)
        if screened is None:
            plan.out_of_reach += 1
        else:
            plan.candidates.append(screened)
    plan.deployments = len(seen)
    plan.candidates.sort(key=lambda s: (*s.optimistic, s.order))
    if not plan.candidates:  # an empty front: the sampler's trials, each with its reason, say why
        plan.fallback = (f"every one of the space's {plan.deployments:,} deployments ({points:,} points) breaks a rule "
                         "or misses an SLO even at the estimate's optimistic bound; NSGA-II's trials show why")
    return plan


def _screened(evaluator: Evaluator, point: dict[str, Value], preview: Preview, order: int) -> Screened | None:
    """The deployment with its optimistic bounds, or None when even they miss: the estimated fleet
    saturates, or an SLO's estimated P99 over its :data:`ESTIMATE_OVERSHOOT` is above the target.
    Tenant classes' SLOs and the N-1 targets drop nothing (their misses mix metrics); the simulation
    judges them."""
    try:
        estimated = evaluator.estimated(preview)
    except InputError:  # a deployment the simulator cannot model: the trial would say why
        return None
    # A fleet the estimate still finds saturated after growing it is pruned, as a sampler's trial is: the
    # replica count is derived from that same estimate's saturation rate.
    if estimated.values is None or estimated.violations["saturated"] > 0:
        return None
    for name, (_, metric) in SLO_CONSTRAINTS.items():
        if estimated.violations[name] > overshoot(metric):  # (1 + miss) / (1 + overshoot) > 1
            return None
    w = evaluator.problem.workload
    cost, latency = estimated.values
    # A per-token cost falls as the simulated throughput rises; in a closed loop that throughput grows
    # as latency falls, at most by the end-to-end overshoot.
    optimistic_cost = cost if w.objective.cost == "usd_per_hour" else cost / (1 + overshoot("e2e"))
    deployment = preview.compiled.deployment
    drop = evaluator.problem.ctx.accuracy_drop_pct(preview.model, deployment.quantization, deployment.kv_cache_dtype)
    return Screened({k: v for k, v in point.items() if evaluator.problem.space.domain(k).pinned is None},
                    repr(preview.key), (cost, latency), (optimistic_cost, latency / (1 + overshoot(w.objective.latency))),
                    float(drop or 0.0), order)


def open_candidates(plan: ScreenPlan, simulated: np.ndarray, simulated_drop: np.ndarray,
                    done: set[str]) -> list[Screened]:
    """The plan's deployments still to simulate, cheapest first: not simulated yet (``done`` keys),
    and not beaten for sure: no simulated feasible deployment (rows of ``simulated``: cost, latency;
    ``simulated_drop``: their accuracy drops) costs no more than one's optimistic cost, is no slower
    than its optimistic latency, and drops no more accuracy.

    Example:
        >>> a = Screened({"tp": 1}, "a", (1.0, 2.0), (1.0, 1.0), 0.0, 0)
        >>> b = Screened({"tp": 2}, "b", (2.0, 3.0), (2.0, 1.5), 0.0, 1)
        >>> plan = ScreenPlan(2, candidates=[a, b])
        >>> [s.key for s in open_candidates(plan, np.zeros((0, 2)), np.zeros(0), set())]
        ['a', 'b']
        >>> [s.key for s in open_candidates(plan, np.array([[1.0, 1.2]]), np.array([0.0]), {"a"})]
        []
    """
    bound = np.array([s.optimistic for s in plan.candidates], dtype=float).reshape(-1, 2)
    drop = np.array([s.accuracy_drop_pct for s in plan.candidates], dtype=float)
    beaten = np.zeros(len(bound), dtype=bool)
    for (cost, latency), their_drop in zip(simulated, simulated_drop, strict=True):
        beaten |= (cost <= bound[:, 0]) & (latency <= bound[:, 1]) & (their_drop <= drop)
    return [s for s, out in zip(plan.candidates, beaten, strict=True) if not out and s.key not in done]


def screen_round(candidates: list[Screened]) -> list[Screened]:
    """The candidates no other one's estimate dominates (costs no more and is faster), cheapest first:
    one round of the screen's simulations, which reaches every cost level before any level is
    simulated through (the front's shape, not only its cheapest end, within a small budget).

    Example:
        >>> a, b = Screened({}, "a", (1.0, 3.0), (1.0, 2.0), 0.0, 0), Screened({}, "b", (1.0, 4.0), (1.0, 2.5), 0.0, 1)
        >>> c = Screened({}, "c", (2.0, 2.0), (2.0, 1.0), 0.0, 2)
        >>> [s.key for s in screen_round([c, b, a])]
        ['a', 'c']
    """
    out: list[Screened] = []
    for s in sorted(candidates, key=lambda s: (*s.estimate, s.order)):
        if not out or s.estimate[1] < out[-1].estimate[1]:
            out.append(s)
    return out
