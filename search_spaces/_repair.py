"""Repairs and pruning: sampled points moved onto valid ones, and values no point can use left out.

Optuna's samplers draw each knob from a fixed domain (NSGA-II's crossover and TPE's densities need
the same choices in every trial), so many drawn combinations break a rule that one knob can fix: a
TP too small for the weights, a token budget below ``max_num_seqs`` or, without chunked prefill,
below ``max_model_len``, an fp8 KV cache over the accuracy budget. A :class:`Repair` moves that knob to
the nearest value of its own domain that passes (the smallest TP that fits, the smallest budget that
covers), before anything is scored. The trial keeps the parameters the sampler drew (what it learns
from: a Baldwinian repair) and its record keeps the repaired knobs and what changed; several drawn
points that repair to one deployment are scored once. A point no knob can fix keeps its values and
is rejected with the rule's reason, as before.

A :class:`Pruner` leaves out, before sampling, domain values that no configuration can use (a weight
scheme over the accuracy budget for every model, or that no candidate GPU runs), unless that would
leave the knob empty; the search space lists them with the reason.

Example:
    >>> from servopt.search_spaces import SearchSpace, example_context
    >>> space = SearchSpace(example_context("llama-3.1-70b", gpus=("h100",)), {"mode": "aggregated"})
    >>> drawn = space.fixed({"gpu": "h100", "tp": 1, "quantization": "bf16", "kv_cache_dtype": "auto",
    ...     "max_num_seqs": 256, "max_num_batched_tokens": 1024, "enable_chunked_prefill": False,
    ...     "speculation": "off", "headroom": 0.0})
    >>> fixed = space.repair(drawn)
    >>> fixed["tp"], fixed["max_num_batched_tokens"]
    (2, 4096)
"""

from __future__ import annotations

from typing import ClassVar, Protocol

from ..costmodels.quantization import support_problem
from ..costmodels.engines import DEFAULT_ENGINE, get_engine
from ..costmodels.serving.compiled import DECODE, PREFILL, REPLICA, CompiledDeployment
from ._candidate import Candidate
from ._context import SpaceContext
from ._domains import Choices, Domain, Value
from ._knobs import DISAGGREGATED, SPECULATION_OFF


class SearchSpace(Protocol):
    """What a repair reads of the search space (:class:`~servopt.search_spaces.SearchSpace`), named
    here so that the space can hold its repairs without the two modules importing each other."""

    ctx: SpaceContext

    def domain(self, name: str) -> Domain: ...

    def compile(self, candidate: Candidate, replicas: int = 1) -> CompiledDeployment: ...


class Repair:
    """Base class: returns the values with one rule's knob moved to its nearest passing value."""

    name: ClassVar[str]

    def apply(self, values: dict[str, Value], space: SearchSpace) -> dict[str, Value]:
        raise NotImplementedError


class TokenBudget(Repair):
    """``max_num_batched_tokens`` raised to what vLLM requires: every sequence and its drafts, and a
    whole ``max_model_len`` prompt when prefill is not chunked."""

    name = "batch_limits"

    def apply(self, values: dict[str, Value], space: SearchSpace) -> dict[str, Value]:
        drafts = int(values.get("num_speculative_tokens", 0)) if values.get("speculation", SPECULATION_OFF) != SPECULATION_OFF else 0
        context = space.ctx.max_model_len[str(values.get("model", next(iter(space.ctx.models))))]
        need = get_engine(DEFAULT_ENGINE).min_batched_tokens(int(values["max_num_seqs"]), drafts,
                                                             bool(values["enable_chunked_prefill"]), context)
        if int(values["max_num_batched_tokens"]) >= need:
            return values
        raised = space.domain("max_num_batched_tokens").at_least(need)
        return values if raised is None else {**values, "max_num_batched_tokens": raised}


class KVCacheWithinAccuracy(Repair):
    """An fp8 KV cache that takes the weights over the accuracy budget goes back to ``auto``."""

    name = "accuracy"

    def apply(self, values: dict[str, Value], space: SearchSpace) -> dict[str, Value]:
        ctx, kv = space.ctx, values["kv_cache_dtype"]
        if kv == "auto" or not space.domain("kv_cache_dtype").contains("auto"):
            return values
        model, scheme = str(values.get("model", next(iter(ctx.models)))), str(values["quantization"])
        if ctx.accuracy_drop_pct(model, scheme, str(kv)) > ctx.max_drop_pct >= ctx.accuracy_drop_pct(model, scheme, "auto"):
            return {**values, "kv_cache_dtype": "auto"}
        return values


class SmallestFittingTP(Repair):
    """Each role's TP raised to the smallest of its domain, from the drawn one up, that divides the
    attention heads, fits a node and holds the weights, activations and one longest request."""

    name = "memory"
    KNOB_ROLES: ClassVar[dict[str, str]] = {"tp": REPLICA, "prefill_tp": PREFILL, "decode_tp": DECODE}

    def apply(self, values: dict[str, Value], space: SearchSpace) -> dict[str, Value]:
        ctx = space.ctx
        model = str(values.get("model", next(iter(ctx.models))))
        heads, node = ctx.models[model].spec.num_attention_heads, ctx.node_size(str(values["gpu"]))
        knobs = ("prefill_tp", "decode_tp") if values.get("mode") == DISAGGREGATED else ("tp",)
        for knob in knobs:
            options = sorted(int(v) for v in space.domain(knob).values() if int(v) >= int(values[knob]))
            for tp in options:
                trial = {**values, knob: tp}
                if heads % tp or tp > node:
                    continue
                roles = {r.name: r for r in space.compile(Candidate(trial)).roles}
                role = roles.get(self.KNOB_ROLES[knob])
                if role is not None and role.plan.fits:
                    values = trial
                    break
        return values


REPAIRS: tuple[Repair, ...] = (TokenBudget(), KVCacheWithinAccuracy(), SmallestFittingTP())


class Pruner:
    """Base class: splits one knob's domain into the values kept and those no point can use (with why)."""

    knob: ClassVar[str]

    def prune(self, domain: Domain, ctx: SpaceContext, domains: dict[str, Domain]) -> tuple[Domain, dict[Value, str]]:
        raise NotImplementedError


class ServableQuantization(Pruner):
    """Weight schemes that no candidate GPU runs, or that exceed the accuracy budget for every model
    even with the KV cache dtype that costs least."""

    knob = "quantization"

    def prune(self, domain: Domain, ctx: SpaceContext, domains: dict[str, Domain]) -> tuple[Domain, dict[Value, str]]:
        if not isinstance(domain, Choices) or len(domain.options) < 2:
            return domain, {}
        dropped: dict[Value, str] = {}
        kv_options = [str(v) for v in domains["kv_cache_dtype"].values()]
        for scheme in map(str, domain.options):
            if all(support_problem(scheme, gpu) for gpu in ctx.gpus.values()):
                dropped[scheme] = "no candidate GPU runs it"
                continue
            drops = [ctx.accuracy_drop_pct(m, scheme, kv) for m, choice in ctx.models.items() if scheme in choice.weights
                     for kv in kv_options]
            if drops and min(drops) > ctx.max_drop_pct:
                dropped[scheme] = f"expected accuracy drop {min(drops):.1f}% exceeds the {ctx.max_drop_pct:g}% budget"
        kept = tuple(o for o in domain.options if o not in dropped)
        return (Choices(kept), dropped) if kept else (domain, {})


PRUNERS: tuple[Pruner, ...] = (ServableQuantization(),)
