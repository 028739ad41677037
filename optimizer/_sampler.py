"""A sampler wrapper that proposes points the study has not scored yet, pre-selected by a cheap model.

In a discrete space a genetic or Bayesian sampler soon proposes points it has tried before, and the
repair (:mod:`servopt.search_spaces._repair`) and the derived replica count map several drawn points
onto one deployment; each such trial spends budget on a cached answer. :class:`DistinctSampler` asks
the wrapped sampler again (then draws at random) until the proposal is scored as a deployment no
earlier trial scored. What the wrapped sampler leaves to independent sampling (a mutated parameter,
the first generation) is drawn at random here, as NSGA-II and TPE would draw it.

With a ``choose`` function it collects :data:`PROPOSALS` such distinct proposals and lets ``choose``
pick the one to score (pre-selection, as surrogate-assisted evolutionary algorithms do: the
optimizer ranks them by the analytic estimate, which costs a few milliseconds where a trial's
simulation costs a tenth of a second or more). The joint proposal holds only the parameters every
earlier trial had (Optuna's intersection search space); with a ``complete`` function
(:meth:`~servopt.search_spaces.SearchSpace.complete`) the others are drawn at random, so that ``choose``
can rank the whole point, and the trial is then given the very values ranked. Those others are every
conditional knob once trials took more than one branch: with ``mode`` searched, ``tp`` and each side's
instances and TP are drawn anew for every proposal, for the whole study, since NSGA-II's crossover and
mutation act on the intersection only (multivariate TPE with ``group=True`` models each branch's knobs).

Example:
    >>> import optuna
    >>> sampler = DistinctSampler(optuna.samplers.RandomSampler(seed=0), lambda params: params.get("x"), seed=0)
    >>> study = optuna.create_study(sampler=sampler)
    >>> study.optimize(lambda t: t.suggest_categorical("x", [1, 2, 3]), n_trials=3)
    >>> sorted(t.params["x"] for t in study.trials)
    [1, 2, 3]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

_TRIED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)
# Distinct proposals ranked per trial: their estimates together cost about a fifth of one search
# simulation (a few ms each against ~0.1 s).
PROPOSALS = 8


class DistinctSampler(optuna.samplers.BaseSampler):
    """Wraps ``sampler``; ``key`` maps a trial's parameters to the point it scores (None: unknown);
    ``choose(study, proposals)`` returns the index of the proposal to score."""

    TRIES = 24

    def __init__(self, sampler: optuna.samplers.BaseSampler, key: Callable[[dict[str, Any]], Any], seed: int | None,
                 choose: Callable[[optuna.Study, list[dict[str, Any]]], int] | None = None,
                 complete: Callable[[dict[str, Any], np.random.Generator], dict[str, Any]] | None = None):
        self.sampler = sampler
        self._key = key
        self._choose = choose
        self._complete = complete
        self._rng = np.random.default_rng(seed)
        # trial number -> the whole proposal it was chosen as; its knobs outside the joint search
        # space are handed out when the trial suggests them (sample_independent).
        self._chosen: dict[int, dict[str, Any]] = {}
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._keys: dict[int, Any] = {}
        self._space = optuna.search_space.IntersectionSearchSpace(include_pruned=True)

    def _seen(self, study: optuna.Study, current: int) -> set:
        seen = set()
        for trial in study.get_trials(deepcopy=False, states=_TRIED):
            if trial.number == current:
                continue
            key = self._keys.get(trial.number)
            if key is None:
                key = self._key(trial.params)
                if trial.state != TrialState.RUNNING:  # a running trial's parameters may still grow
                    self._keys[trial.number] = key
            seen.add(key)
        return seen

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        # Every parameter that earlier trials share, so that the whole proposal is known here.
        return {**self._space.calculate(study), **self.sampler.infer_relative_search_space(study, trial)}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return self.sampler.sample_relative(study, trial, search_space)
        seen = self._seen(study, trial.number)
        wanted = PROPOSALS if self._choose is not None else 1
        proposal: dict[str, Any] = {}
        proposals = []
        for attempt in range(self.TRIES):
            # The wrapped sampler first; random draws once it keeps repeating itself.
            drawn = self.sampler.sample_relative(study, trial, search_space) if attempt < self.TRIES // 2 else {}
            proposal = {name: drawn[name] if name in drawn else
                        self._random.sample_independent(study, trial, name, distribution)
                        for name, distribution in search_space.items()}
            if self._complete is not None:
                proposal = self._complete(proposal, self._rng)
            key = self._key(proposal)
            if key is None or key not in seen:
                proposals.append(proposal)
                seen.add(key)
                if len(proposals) == wanted:
                    break
        if len(proposals) > 1:
            proposal = proposals[self._choose(study, proposals)]
        elif proposals:
            proposal = proposals[0]
        self._chosen[trial.number] = proposal
        return {name: proposal[name] for name in search_space}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        chosen = self._chosen.get(trial.number, {})
        if param_name in chosen and _within(param_distribution, chosen[param_name]):
            return chosen[param_name]
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.sampler.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: list[float] | None) -> None:
        self._chosen.pop(trial.number, None)
        self.sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()
        self._random.reseed_rng()
        self._rng = np.random.default_rng()


def _within(distribution: BaseDistribution, value: Any) -> bool:
    try:
        return distribution._contains(distribution.to_internal_repr(value))
    except (ValueError, TypeError):
        return False
