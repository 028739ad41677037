"""``servopt export DIR``: a point of a job's front in one of the export formats (``results``' registry:
vLLM 0.33 launch scripts, Kubernetes manifests, the plan as JSON or YAML, SGLang commands)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ConfigDict, Field

from ...costmodels.errors import InputError, Spec, one_line, quote, validate_spec
from ...costmodels.model_sources import check_model_id
from ...costmodels.objectives import columns
from ...costmodels.outfiles import check_no_links, output_folder, read_text, write_text
from ...costmodels.userfiles import parse_json, shown
from ...results import (
    EXPORT_FORMATS, SHM_SIZE, Exported, ExportFormat, ExportRequest, FrontPoint, get_format, servopt_command,
)
from . import COMMANDS
from .common import given


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help=COMMANDS["export"][1],
        description="Export a point of the front in a --format. By default, write vLLM launch scripts into a "
        "folder: node-N.sh per node, router.sh when several instances sit behind the vLLM Router, README.md with "
        "the order to start them, and plan.json. A single-node, single-instance deployment's script is also printed.")
    parser.add_argument("dir", metavar="DIR", help="the job folder servopt optimize wrote")
    parser.add_argument("--pick", default="cheapest",
                        help="cheapest, fastest, or a trial number from the report's # column (default cheapest)")
    parser.add_argument("--format", choices=list(EXPORT_FORMATS), default=next(iter(EXPORT_FORMATS)),
                        help="; ".join(f"{name}: {f.help}" for name, f in EXPORT_FORMATS.items()))
    parser.add_argument("--out", type=given, default=None, metavar="FOLDER",
                        help="where the scripts go (default: DIR/export-trial-N)")
    parser.add_argument("--check", action="store_true",
                        help="parse every vllm serve command with vLLM's own parser (needs vLLM; see --vllm-python)")
    parser.add_argument("--vllm-python", type=given, default=None, metavar="PATH",
                        help="the Python of an environment with vLLM installed (default: $SERVOPT_VLLM_PYTHON, "
                        "this one, or ./.vllm-venv/bin/python)")
    k8s = parser.add_argument_group("--format kubernetes")
    k8s.add_argument("--name", type=given, default=None, help="prefix of every object's name (default: from the study and trial)")
    k8s.add_argument("--namespace", type=given, default="default", help="namespace of every object (default: default)")
    k8s.add_argument("--image", type=given, default=None, help="the vLLM image (default: vllm/vllm-openai of the exported vLLM)")
    k8s.add_argument("--router-image", type=given, default=None, help="the vLLM Router image (default: vllm/vllm-router)")
    k8s.add_argument("--node-selector", action="append", default=None, metavar="KEY=VALUE",
                     help="node label the pods need, instead of GPU feature discovery's nvidia.com/gpu.product "
                          "(repeatable)")
    k8s.add_argument("--hf-token-secret", type=given, default="hf-token",
                     help="Secret whose key 'token' holds the Hugging Face token (optional; default hf-token)")
    k8s.add_argument("--shm-size", type=given, default=SHM_SIZE, help=f"size of each pod's /dev/shm (default {SHM_SIZE})")
    k8s.add_argument("--model-cache-pvc", type=given, default=None, metavar="CLAIM",
                     help="PersistentVolumeClaim to keep downloaded weights in (default: an emptyDir per pod)")
    # The --format kubernetes options, to refuse them with another format (they would be ignored).
    parser.set_defaults(handler=run, kubernetes_options=[(a.option_strings[0], a.dest, a.default) for a in k8s._group_actions])


def _check_format_options(args: argparse.Namespace, fmt: ExportFormat) -> None:
    """Refuse options the chosen --format does not use, rather than ignore them."""
    if args.out is not None and fmt.printed:
        raise InputError(f"--out: --format {args.format} prints what it exports and writes no folder; redirect it "
                         f"(servopt export ... --format {args.format} > FILE), or drop --out")
    if args.vllm_python is not None and not (args.check and fmt.takes_vllm_python):
        takers = " or ".join(name for name, f in EXPORT_FORMATS.items() if f.takes_vllm_python)
        raise InputError("--vllm-python names the vLLM that --check runs on vllm serve commands; add --check "
                         f"(with --format {takers}), or drop --vllm-python")
    if args.format != "kubernetes":
        given = [flag for flag, dest, default in args.kubernetes_options if getattr(args, dest) != default]
        if given:
            raise InputError(f"{given[0]} is an option of --format kubernetes, not of --format {args.format}; add "
                             f"--format kubernetes, or drop {given[0]}")


# The formats that write a folder: each one's marker file says an --out folder holds an earlier
# export (it may be written again), and its files' first lines (with the trial they are of) tell a
# file of an earlier export from a person's (node scripts say it on their second line).
_FOLDER_FORMATS = [f for f in EXPORT_FORMATS.values() if not f.printed]
EXPORT_MARKERS = tuple(f.marker for f in _FOLDER_FORMATS)


def _earlier_export(path: Path) -> tuple[int, str] | None:
    """(trial, format) of a file an earlier export wrote, or None for any other file."""
    if not any(f.file_names.fullmatch(path.name) for f in _FOLDER_FORMATS) or not path.is_file() or path.is_symlink():
        return None
    try:
        head = path.read_bytes()[:400].decode("utf-8", errors="replace")
    except OSError:
        return None
    return next(((int(m.group(1)), f.name) for f in _FOLDER_FORMATS for pattern in f.heads
                 if (m := pattern.match(head))), None)


def export_folder(args: argparse.Namespace, trial: int, kind: str, writing: list[str]) -> Path:
    """The folder an export writes ``writing`` into (``--out``, else ``DIR/export-trial-N``, reached
    through no link planted in the job folder), cleared of what an earlier export left there that this
    one does not replace: its files of the same format (a 6-node plan's node-1..5.sh beside a new
    1-node plan), and those of another format when they are of another trial. A file servopt did
    not write is never removed (:func:`_earlier_export`)."""
    default = Path(args.dir) / f"export-trial-{trial}"
    if args.out is None:
        check_no_links(default, "export folder", args.dir)
    out = output_folder(args.out or default, "--out", EXPORT_MARKERS)
    for path in sorted(out.iterdir()):
        found = None if path.name in writing else _earlier_export(path)
        if found is not None and (found[1] == kind or found[0] != trial):
            path.unlink()
    return out


class _FrontObjective(Spec):
    model_config = ConfigDict(extra="allow")
    cost: str
    latency: str


class _FrontWorkload(Spec):
    model_config = ConfigDict(extra="allow")
    objective: _FrontObjective
    traffic: dict[str, Any] = Field(default_factory=dict)


class _FrontFile(Spec):
    model_config = ConfigDict(extra="allow")
    workload: _FrontWorkload
    points: list[FrontPoint]  # front.json of older jobs too (FrontPoint reads their layout)
    gpus: dict[str, dict[str, Any]] = Field(default_factory=dict)
    max_model_len: dict[str, dict[str, Any]] = Field(default_factory=dict)


def read_front(folder: str | Path) -> dict:
    """front.json, checked to be the shape servopt writes (it is a file anyone can edit)."""
    path = Path(folder) / "front.json"
    try:
        data = parse_json(read_text(path, "front file"), f"front file '{shown(path)}'")
    except FileNotFoundError:
        raise InputError(f"{shown(folder)} has no front.json; run servopt optimize (or "
                         f"{servopt_command('report', folder)}) first") from None
    where = f"front file '{shown(path)}' (rewrite it with {servopt_command('report', folder)})"
    # Strict about the deployment spec: a point on the front passed every rule (only trial records of
    # rejected points keep a spec as drawn).
    front = validate_spec(_FrontFile, data, where, context={"strict_spec": True})
    gpus = front.gpus
    points = []
    for point in front.points:
        if point.deployment.gpus_per_node is None:  # written when the point kept it beside the deployment
            nodes = (gpus.get(point.deployment.spec.gpu) or {}).get("gpus_per_node")
            point = point.model_copy(update={"deployment": point.deployment.model_copy(update={"gpus_per_node": nodes})})
        points.append(point)
    return {**front.model_dump(exclude={"points"}), "points": points}


def pick_point(front: dict, pick: str) -> FrontPoint:
    points: list[FrontPoint] = front["points"]
    if not points:
        raise InputError("the front is empty: nothing to export (see report.md for why)")
    objective = front["workload"]["objective"]
    keys = columns(objective)
    for point in points:
        missing = [k for k in keys if not isinstance(point.metrics.get(k), float | int)]
        if missing:
            raise InputError(f"front.json: trial {point.trial} has no metrics.{missing[0]}; rewrite front.json "
                             "with servopt report DIR")
    if pick == "cheapest":
        return min(points, key=lambda p: (p.metrics[keys[0]], p.metrics[keys[1]]))
    if pick == "fastest":
        return min(points, key=lambda p: (p.metrics[keys[1]], p.metrics[keys[0]]))
    if not re.fullmatch(r"[0-9]{1,12}", pick):  # ASCII digits: str.isdigit also takes '²'
        raise InputError(f"--pick: expected cheapest, fastest or a trial number, got {quote(pick)}")
    for point in points:
        if point.trial == int(pick):
            return point
    raise InputError(f"--pick: trial {pick} is not on the front; front trials: {', '.join(str(p.trial) for p in points)}")


def checked_point(point: FrontPoint) -> FrontPoint:
    """The point with the ids it serves checked again (front.json is a file anyone could have edited)
    and local paths made absolute (the scripts ``cd`` into their own folder)."""
    record = point.deployment
    if record.weights is not None:
        weights = record.weights.model_copy(
            update={"serve_id": check_model_id(record.weights.serve_id, "front.json deployment.weights.serve_id")})
        record = record.model_copy(update={"weights": weights})
    return point.model_copy(update={"serve_id": check_model_id(point.serve_id, "front.json serve_id"),
                                    "deployment": record})


@contextmanager
def _front_file_problems(folder: str | Path, point: FrontPoint) -> Iterator[None]:
    """A front.json edited into a shape servopt does not write fails where the export reads it: one
    line naming the trial, not a traceback."""
    try:
        yield
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise InputError(f"front.json: trial {point.trial} is not what servopt writes ({type(err).__name__}: "
                         f"{one_line(str(err))[:100]}); rewrite it with {servopt_command('report', folder)}") \
            from None


def run(args: argparse.Namespace) -> int:
    fmt = get_format(args.format)
    _check_format_options(args, fmt)
    front = read_front(args.dir)
    point = pick_point(front, args.pick)
    own = {dest: getattr(args, dest) for _, dest, _ in args.kubernetes_options}
    with _front_file_problems(args.dir, point):
        request = ExportRequest(front, checked_point(point), own, args.vllm_python)
        exported = fmt.export(request)
    written = "" if fmt.printed else _write(args, fmt, exported)
    print(exported.shown + written, end="")
    if args.check:
        print(fmt.check(exported, request))
    return 0


def _write(args: argparse.Namespace, fmt: ExportFormat, exported: Exported) -> str:
    """Write a folder format's files; the line saying where they went."""
    out = export_folder(args, exported.trial, fmt.name, list(exported.files))
    for name, text in exported.files.items():
        write_text(out / name, text, **({"mode": 0o755} if name in exported.executable else {}))
    return f"# written to {out}: {', '.join(exported.files)}\n"
