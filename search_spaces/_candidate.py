"""One point of the search space: the value of every active knob."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ._domains import Value


@dataclass(frozen=True)
class Candidate:
    """One point of the space: the value of every active knob (pinned ones included).

    >>> c = Candidate({"tp": 2, "gpu": "h100"})
    >>> c["tp"], c.get("pp", 1), c.key
    (2, 1, (('gpu', 'h100'), ('tp', 2)))
    """

    values: Mapping[str, Value]

    def __getitem__(self, name: str) -> Value:
        return self.values[name]

    def get(self, name: str, default: Value | None = None) -> Value | None:
        return self.values.get(name, default)

    @property
    def key(self) -> tuple:
        """Hashable identity, for caching repeated points."""
        return tuple(sorted(self.values.items()))
