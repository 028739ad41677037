"""What an export format is: :class:`ExportFormat`, one subclass per ``servopt export --format``.

A format turns a point of a job's front into what it exports (:class:`Exported`: the files of an
export folder, or the text it prints) and checks that with the engine's own parser. Formats return
values; the ``export`` command writes and prints them. The registry is :mod:`._formats`.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..costmodels.errors import InputError
from ._record import FrontPoint


class ParserMissing(InputError):
    """``--check`` found no installation of the engine whose parser it runs."""


@dataclass(frozen=True)
class ExportRequest:
    """A front point to export: ``front`` as ``servopt export`` reads front.json, the ``point``
    (its ids checked), the format's own ``options`` by name (Kubernetes names, images, ...) and the
    ``python`` whose engine parses the commands under ``--check`` (None: the format finds one)."""

    front: dict[str, Any]
    point: FrontPoint
    options: dict[str, Any] = field(default_factory=dict)
    python: str | None = None

    @property
    def classes(self) -> list[dict[str, Any]] | None:
        """The workload's tenant classes, as front.json keeps the workload."""
        return (self.front.get("workload") or {}).get("traffic", {}).get("classes")


@dataclass(frozen=True)
class Exported:
    """What a format exports: ``files`` (name -> text, in the order the command lists them; none for
    a printed format), the ``executable`` ones among them, the text ``shown``, the ``plan`` they
    come from, and the format's own ``parts`` that its check reads (scripts, manifests)."""

    trial: int
    shown: str
    files: dict[str, str] = field(default_factory=dict)
    executable: frozenset[str] = frozenset()
    plan: dict[str, Any] = field(default_factory=dict)
    parts: Any = None


class ExportFormat(ABC):
    """One ``--format``: its ``name`` and ``help``; a folder format names its ``marker`` file (an
    export folder holding it may be written again), the ``file_names`` it writes and the ``heads``
    (patterns of its files' first lines, group 1 the trial) by which an earlier export's files are
    told from a person's. A printed format has no marker. ``takes_vllm_python``: ``--check`` runs
    vLLM's parser in the interpreter ``--vllm-python`` names."""

    name: ClassVar[str]
    help: ClassVar[str]
    marker: ClassVar[str | None] = None
    file_names: ClassVar[re.Pattern[str] | None] = None
    heads: ClassVar[tuple[re.Pattern[str], ...]] = ()
    takes_vllm_python: ClassVar[bool] = False

    @property
    def printed(self) -> bool:
        """Whether the format prints what it exports (and writes no folder)."""
        return self.marker is None

    @abstractmethod
    def export(self, request: ExportRequest) -> Exported:
        """What the format exports for the request's point."""

    @abstractmethod
    def check(self, exported: Exported, request: ExportRequest) -> str:
        """One line saying what the engine's own parser (and any schema) accepted; InputError
        naming what they reject, :class:`ParserMissing` when the parser is not installed."""
