"""The export formats, by name (``servopt export --format NAME``).

A new format is a module with its :class:`~servopt.results._format.ExportFormat` subclass, plus
one line in :data:`EXPORT_FORMATS`.

Example:
    >>> list(EXPORT_FORMATS), get_format("kubernetes").printed, get_format("sglang").printed
    (['vllm', 'kubernetes', 'json', 'yaml', 'sglang'], False, True)
"""

from __future__ import annotations

from ..costmodels.errors import InputError, quote
from ._export import PlanJson, PlanYaml, VllmScripts
from ._export_kubernetes import KubernetesManifests
from ._export_sglang import SglangCommands
from ._format import ExportFormat

EXPORT_FORMATS: dict[str, ExportFormat] = {f.name: f for f in (
    VllmScripts(), KubernetesManifests(), PlanJson(), PlanYaml(), SglangCommands())}


def get_format(name: str) -> ExportFormat:
    """The export format called ``name``; one InputError line naming the others otherwise."""
    found = EXPORT_FORMATS.get(name)
    if found is None:
        raise InputError(f"--format: no export format {quote(name)}; formats: {', '.join(EXPORT_FORMATS)}")
    return found
