"""The values one knob may take: a list of choices, an integer range or a float range.

A domain suggests a value through an Optuna trial, lists its values for exhaustive enumeration,
and narrows itself to what a user writes under ``space:`` in the workload file: a scalar pins the
knob, a list narrows it to those choices, ``{low, high}`` narrows a numeric range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from ..costmodels.errors import InputError, did_you_mean

Value = bool | int | float | str
# The most values an integer range lists; a wider one is sampled (or screened on a grid), never listed.
LISTED_VALUES = 64


class Domain:
    """Base class: the set of values a knob may take."""

    def suggest(self, trial: optuna.Trial, name: str) -> Value:
        raise NotImplementedError

    def values(self) -> list[Value]:
        """Every value, for exhaustive enumeration (ranges must be small)."""
        raise NotImplementedError

    def contains(self, value: Value) -> bool:
        raise NotImplementedError

    def draw(self, rng: np.random.Generator) -> Value:
        """One value at random, as Optuna's random sampler would suggest it."""
        raise NotImplementedError

    def at_least(self, value: int) -> Value | None:
        """The smallest value of a numeric domain that is >= ``value`` (None when there is none)."""
        raise NotImplementedError

    @property
    def pinned(self) -> Value | None:
        """The single value of a pinned domain, else None."""
        return None

    def describe(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Choices(Domain):
    """A categorical knob. One choice means pinned: it is not suggested to the sampler."""

    options: tuple[Value, ...]

    def suggest(self, trial: optuna.Trial, name: str) -> Value:
        if len(self.options) == 1:
            return self.options[0]
        return trial.suggest_categorical(name, list(self.options))

    def values(self) -> list[Value]:
        return list(self.options)

    def draw(self, rng: np.random.Generator) -> Value:
        return self.options[int(rng.integers(len(self.options)))]

    def contains(self, value: Value) -> bool:
        return any(_same(value, option) for option in self.options)

    def at_least(self, value: int) -> Value | None:
        above = [o for o in self.options if not isinstance(o, bool | str) and o >= value]
        return min(above) if above else None

    @property
    def pinned(self) -> Value | None:
        return self.options[0] if len(self.options) == 1 else None

    def describe(self) -> str:
        return ", ".join(str(o) for o in self.options)


@dataclass(frozen=True)
class IntRange(Domain):
    """Integers from ``low`` to ``high``; ``log`` samples uniformly in log space."""

    low: int
    high: int
    log: bool = False
    step: int = 1

    def suggest(self, trial: optuna.Trial, name: str) -> Value:
        if self.low == self.high:
            return self.low
        return trial.suggest_int(name, self.low, self.high, log=self.log, step=self.step)

    @property
    def count(self) -> int:
        """How many integers the range holds."""
        return (self.high - self.low) // self.step + 1

    def values(self) -> list[Value]:
        count = self.count
        if count > LISTED_VALUES:
            raise InputError(f"a range of {count} integers is too large to enumerate; narrow it to a list")
        return list(range(self.low, self.high + 1, self.step))

    def contains(self, value: Value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and self.low <= value <= self.high \
            and (value - self.low) % self.step == 0

    def draw(self, rng: np.random.Generator) -> Value:
        if self.log:  # uniform in log space over [low - 0.5, high + 0.5], rounded, as Optuna draws
            value = round(math.exp(rng.uniform(math.log(self.low - 0.5), math.log(self.high + 0.5))))
            return min(max(value, self.low), self.high)
        return self.low + self.step * int(rng.integers((self.high - self.low) // self.step + 1))

    def at_least(self, value: int) -> Value | None:
        above = self.low + max(-(-(value - self.low) // self.step), 0) * self.step
        return above if above <= self.high else None

    @property
    def pinned(self) -> Value | None:
        return self.low if self.low == self.high else None

    def describe(self) -> str:
        return f"{self.low}..{self.high}" + (" (log)" if self.log else "") + (f" step {self.step}" if self.step > 1 else "")


@dataclass(frozen=True)
class FloatRange(Domain):
    """Floats from ``low`` to ``high`` on a grid of ``step``."""

    low: float
    high: float
    step: float

    def suggest(self, trial: optuna.Trial, name: str) -> Value:
        if self.low == self.high:
            return self.low
        return trial.suggest_float(name, self.low, self.high, step=self.step)

    def values(self) -> list[Value]:
        count = round((self.high - self.low) / self.step) + 1
        return [round(self.low + i * self.step, 10) for i in range(count)]

    def draw(self, rng: np.random.Generator) -> Value:
        return round(self.low + self.step * int(rng.integers(round((self.high - self.low) / self.step) + 1)), 10)

    def contains(self, value: Value) -> bool:
        if isinstance(value, bool) or not isinstance(value, int | float) or not self.low <= value <= self.high:
            return False
        return math.isclose(((value - self.low) / self.step) % 1, 0, abs_tol=1e-9) or \
            math.isclose(((value - self.low) / self.step) % 1, 1, abs_tol=1e-9)

    @property
    def pinned(self) -> Value | None:
        return self.low if self.low == self.high else None

    def describe(self) -> str:
        return f"{self.low}..{self.high} step {self.step}"


def _same(a: Value, b: Value) -> bool:
    """Equality that keeps True apart from 1 (YAML's true is not TP 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def narrow(domain: Domain, setting: Any, key: str, coerce: Callable[[Any], Value]) -> Domain:
    """The domain a user's ``space:`` setting leaves: ``coerce`` checks and converts each value.

    Every value must lie in ``domain`` (a user may narrow a knob, never widen it beyond what
    servopt can model); errors name ``key``.
    """
    if isinstance(setting, dict):
        return _narrow_range(domain, setting, key, coerce)
    items: Sequence[Any] = setting if isinstance(setting, list) else [setting]
    if not items:
        raise InputError(f"{key}: an empty list leaves nothing to search; give at least one value")
    values = []
    for item in items:
        try:
            value = coerce(item)
        except (TypeError, ValueError) as err:
            raise InputError(f"{key}: {err}") from None
        if not domain.contains(value):
            raise InputError(f"{key}: {item!r} is outside what servopt searches ({domain.describe()})")
        if not any(_same(value, v) for v in values):
            values.append(value)
    if isinstance(domain, IntRange | FloatRange) and len(values) > 1:
        values.sort()
    return Choices(tuple(values))


def _narrow_range(domain: Domain, setting: dict, key: str, coerce: Callable[[Any], Value]) -> Domain:
    if not isinstance(domain, IntRange | FloatRange):
        raise InputError(f"{key}: takes a value or a list of values, not a range")
    unknown = set(setting) - {"low", "high", "step"}
    if unknown:
        first = sorted(unknown)[0]
        raise InputError(f"{key}.{first}: unknown key{did_you_mean(first, ('low', 'high', 'step'))} (a range takes "
                         "low, high and step)")
    try:
        low = coerce(setting.get("low", domain.low))
        high = coerce(setting.get("high", domain.high))
        step = coerce(setting.get("step", domain.step))
    except (TypeError, ValueError) as err:
        raise InputError(f"{key}: {err}") from None
    if low > high:
        raise InputError(f"{key}: low ({low}) must not exceed high ({high})")
    if low < domain.low or high > domain.high:
        raise InputError(f"{key}: {low}..{high} is outside what servopt searches ({domain.describe()})")
    if step <= 0:
        raise InputError(f"{key}.step: must be positive (got {step})")
    if isinstance(domain, IntRange):
        log = domain.log and step == 1
        return IntRange(int(low), int(high), log=log, step=int(step))
    return FloatRange(float(low), float(high), float(step))
