"""The search space: the knobs with their (possibly narrowed) domains, and how a point becomes a
:class:`~servopt.costmodels.deployment.Deployment`."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import optuna

from ..costmodels.deployment import Deployment, DisaggregationConfig, SpeculativeConfig
from ..costmodels.errors import InputError, did_you_mean
from ..costmodels.serving.compiled import CompiledDeployment
from ._candidate import Candidate
from ._constraints import CONSTRAINTS, Constraint, Violation
from ._context import SpaceContext
from ._domains import Domain, Value, narrow
from ._knobs import DISAGGREGATED, KNOBS, SPECULATION_OFF, HeadroomKnob, Knob, ReplicasKnob
from ._repair import PRUNERS, REPAIRS, Pruner, Repair

# Knobs that take ``space.tp`` when the workload does not set them.
TP_FOLLOWERS = ("prefill_tp", "decode_tp")


class SearchSpace:
    """Knobs and their domains for one job.

    Example:
        >>> from servopt.search_spaces import SearchSpace, example_context
        >>> space = SearchSpace(example_context(), {"tp": [1, 2], "quantization": "fp8", "mode": "aggregated"})
        >>> space.domain("quantization").pinned, space.domain("tp").values()
        ('fp8', [1, 2])
        >>> candidate = Candidate(space.complete({"gpu": "h100", "tp": 2}, np.random.default_rng(0)))
        >>> space.deployment(candidate, replicas=3).num_gpus
        6
    """

    def __init__(self, ctx: SpaceContext, settings: Mapping[str, Any] | None = None,
                 constraints: tuple[Constraint, ...] = CONSTRAINTS, repairs: tuple[Repair, ...] = REPAIRS,
                 pruners: tuple[Pruner, ...] = PRUNERS):
        self.ctx = ctx
        self.constraints = constraints
        self.repairs = repairs
        settings = dict(settings or {})
        # ``tp`` pins or narrows every engine's tensor parallelism: aggregated replicas', and P/D
        # prefill and decode instances' unless prefill_tp / decode_tp say otherwise (``space: {tp: 1}``
        # once left decode at TP 4 and 8 on the front).
        if "tp" in settings:
            for knob in TP_FOLLOWERS:
                settings.setdefault(knob, settings["tp"])
        knobs: list[Knob] = list(KNOBS)
        if "replicas" in settings:
            # Replicas searched directly: the derived count and its headroom no longer apply.
            knobs = [ReplicasKnob() if isinstance(k, HeadroomKnob) else k for k in knobs]
        by_name = {k.name: k for k in knobs}
        unknown = sorted(set(settings) - set(by_name))
        if unknown:
            raise InputError(f"space.{unknown[0]}: unknown knob{did_you_mean(unknown[0], by_name)}; knobs: "
                             f"{', '.join(by_name)}")
        self.knobs = tuple(knobs)
        self._domains: dict[str, Domain] = {}
        for knob in knobs:
            domain = knob.default_domain(ctx)
            if knob.name in settings:
                domain = narrow(domain, settings[knob.name], f"space.{knob.name}", knob.coerce)
            self._domains[knob.name] = domain
        # Values no configuration can use (a scheme over the accuracy budget for every model, or
        # that no candidate GPU runs) are left out before sampling, with the reason.
        self.excluded: dict[str, dict[Value, str]] = {}
        for pruner in pruners:
            kept, dropped = pruner.prune(self._domains[pruner.knob], ctx, self._domains)
            if dropped:
                self._domains[pruner.knob] = kept
                self.excluded.setdefault(pruner.knob, {}).update(dropped)

    # --- reading -------------------------------------------------------------------------------
    def domain(self, name: str) -> Domain:
        return self._domains[name]

    def describe(self) -> dict[str, str]:
        """Knob -> its domain in words (pinned knobs show their value; values left out, with why)."""
        out = {}
        for k in self.knobs:
            text = self._domains[k.name].describe()
            dropped = self.excluded.get(k.name)
            if dropped:
                text += " (left out: " + "; ".join(f"{v}: {why}" for v, why in dropped.items()) + ")"
            out[k.name] = text
        return out

    # --- sampling ------------------------------------------------------------------------------
    def _active(self, given: Mapping[str, Value], missing: Callable[[str, Domain], Value]) -> dict[str, Value]:
        """The active knobs in order (conditions read the values before them): a given value, else a
        pinned knob's value, else ``missing(name, domain)``."""
        out: dict[str, Value] = {}
        for knob in self.knobs:
            if not knob.active(out):
                continue
            domain = self._domains[knob.name]
            if knob.name in given:
                out[knob.name] = given[knob.name]
            elif domain.pinned is not None:
                out[knob.name] = domain.pinned
            else:
                out[knob.name] = missing(knob.name, domain)
        return out

    def complete(self, values: Mapping[str, Value], rng: np.random.Generator) -> dict[str, Value]:
        """``values`` with every active knob they lack drawn at random (pinned knobs at their value).

        A sampler's joint proposal holds only the knobs every earlier trial had; the others come from
        here, so that the proposal can be estimated and scored whole: a branch no trial took yet
        (``tp`` of an aggregated point when every trial so far was disaggregated), and, once trials
        took both branches, every knob of either (``tp``, each side's instances and TP), as NSGA-II's
        joint space never holds them again.
        """
        return {**values, **self._active(values, lambda _name, domain: domain.draw(rng))}

    def sample(self, trial: optuna.Trial) -> Candidate:
        """Suggest every active knob through ``trial`` (define-by-run, so conditions hold)."""
        return Candidate(self._active({}, lambda name, domain: domain.suggest(trial, name)))

    def fixed(self, values: Mapping[str, Value]) -> Candidate:
        """A candidate from given values; knobs left out take their pinned value."""

        def refuse(name: str, domain: Domain) -> Value:
            raise InputError(f"no value for knob '{name}' ({domain.describe()})")

        return Candidate(self._active(values, refuse))

    def enumerate(self, grid: Mapping[str, list[Value]] | None = None) -> Iterator[Candidate]:
        """Every point of the space (conditional knobs only where active; the last knob varies
        fastest); for small spaces, or over ``grid``'s values of each knob instead of all of them."""

        def walk(index: int, values: dict[str, Value]) -> Iterator[Candidate]:
            if index == len(self.knobs):
                yield Candidate(dict(values))
                return
            knob = self.knobs[index]
            if not knob.active(values):
                yield from walk(index + 1, values)
                return
            for value in (grid[knob.name] if grid is not None else self._domains[knob.name].values()):
                values[knob.name] = value
                yield from walk(index + 1, values)
                del values[knob.name]

        return walk(0, {})

    # --- turning a point into a deployment ------------------------------------------------------
    def model_key(self, candidate: Candidate) -> str:
        return str(candidate.get("model", next(iter(self.ctx.models))))

    def deployment(self, candidate: Candidate, replicas: int = 1) -> Deployment:
        """The deployment a candidate describes, with ``replicas`` copies: every knob named after a
        deployment field is that field (a knob the candidate leaves inactive keeps the field's
        default), the others say how to build the rest (serving mode, speculation)."""
        c = candidate
        model = self.model_key(c)
        fields: dict[str, Any] = {name: value for name, value in c.values.items() if name in Deployment.model_fields}
        fields.setdefault("replicas", replicas)
        fields["max_model_len"] = self.ctx.max_model_len[model]
        if c.get("mode") == DISAGGREGATED:
            fields["tp"] = c["prefill_tp"]
            fields["disaggregation"] = DisaggregationConfig(
                prefill_instances=c["prefill_instances"], prefill_tp=c["prefill_tp"],
                decode_instances=c["decode_instances"], decode_tp=c["decode_tp"],
            )
        label = c.get("speculation", SPECULATION_OFF)
        if label != SPECULATION_OFF:
            choice = self.ctx.speculation[str(label)]
            fields["speculative"] = SpeculativeConfig(
                method=choice.method, num_speculative_tokens=c["num_speculative_tokens"],
                acceptance_rate=choice.acceptance_rate, draft_model=choice.draft_model,
            )
        # vLLM's own rules (the token budget against max_num_seqs, ...) are searched constraints here:
        # build without validation and let BatchLimits report them (validated() checks the rest).
        return Deployment.model_construct(**fields)

    @staticmethod
    def validated(deployment: Deployment) -> Deployment:
        """The same deployment through pydantic validation, for a configuration that passed the
        constraints."""
        return Deployment.model_validate(deployment.model_dump())

    def compile(self, candidate: Candidate, replicas: int = 1) -> CompiledDeployment:
        """The candidate's deployment compiled once (roles, limits, memory plans, step models)."""
        return self.ctx.compile(self.model_key(candidate), self.deployment(candidate, replicas))

    # --- constraints ---------------------------------------------------------------------------
    def violations(self, candidate: Candidate, replicas: int | None = None,
                   compiled: CompiledDeployment | None = None) -> list[Violation]:
        """Broken constraints of the candidate (or of its ``compiled`` deployment); those that need
        the replica count run only when it is given."""
        compiled = compiled or self.compile(candidate, replicas or 1)
        model = self.model_key(candidate)
        found = []
        for constraint in self.constraints:
            if constraint.needs_replicas and replicas is None:
                continue
            violation = constraint.check(compiled, model, self.ctx)
            if violation is not None:
                found.append(violation)
        return found

    # --- repair --------------------------------------------------------------------------------
    def repair(self, candidate: Candidate) -> Candidate:
        """The nearest point that passes the rules a knob of the candidate can fix (within each
        knob's domain): see :mod:`~servopt.search_spaces._repair`."""
        values = dict(candidate.values)
        for rule in self.repairs:
            values = rule.apply(values, self)
        return Candidate(values)

    @property
    def constraint_names(self) -> list[str]:
        return [c.name for c in self.constraints]

