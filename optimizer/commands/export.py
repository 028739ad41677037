"""``servopt export DIR``: launch scripts for a point of a job's front (vLLM 0.33), or SGLang commands."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ConfigDict, Field

from ...costmodels.architectures import config_files
from ...costmodels.errors import InputError, Spec, one_line, quote, validate_spec
from ...costmodels.escaping import dump_yaml
from ...costmodels.model_sources import check_model_id
from ...costmodels.outfiles import check_no_links, output_folder, read_text, write_text
from ...costmodels.userfiles import parse_json, shown
from ...results import (
    KUBERNETES_VERSION, SHM_SIZE, FrontPoint, KubernetesOptions, check_commands_with_vllm, check_manifests,
    check_with_sglang, check_with_vllm, kubernetes_manifests, launch_plan, node_scripts, render_kubernetes,
    render_kubernetes_readme, render_readme, render_sglang, safe_name, serve_argvs, servopt_command, sglang_plan,
    with_configs,
)
from . import COMMANDS
from .common import given


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help=COMMANDS["export"][1],
        description="Write vLLM launch scripts for a point of the front into a folder: node-N.sh per node, "
        "router.sh when several instances sit behind the vLLM Router, README.md with the order to start them, "
        "and plan.json. A single-node, single-instance deployment's script is also printed.")
    parser.add_argument("dir", metavar="DIR", help="the job folder servopt optimize wrote")
    parser.add_argument("--pick", default="cheapest",
                        help="cheapest, fastest, or a trial number from the report's # column (default cheapest)")
    parser.add_argument("--format", choices=["vllm", "kubernetes", "json", "yaml", "sglang"], default="vllm",
                        help="scripts (default); Kubernetes manifests (kubernetes.yaml, also printed: pipe it to "
                             "kubectl apply -f -); print the launch plan as JSON or YAML; or print "
                             "`python -m sglang.launch_server` commands (with --check: parsed by SGLang's parser, "
                             "from SGLang importable or $SERVOPT_SGLANG_PYTHON)")
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


# Formats that print what they export (on stdout): they write no --out folder.
PRINTED_FORMATS = ("json", "yaml", "sglang")


def _check_format_options(args: argparse.Namespace) -> None:
    """Refuse options the chosen --format does not use, rather than ignore them."""
    if args.out is not None and args.format in PRINTED_FORMATS:
        raise InputError(f"--out: --format {args.format} prints what it exports and writes no folder; redirect it "
                         f"(servopt export ... --format {args.format} > FILE), or drop --out")
    if args.vllm_python is not None and not (args.check and args.format in ("vllm", "kubernetes")):
        raise InputError("--vllm-python names the vLLM that --check runs on vllm serve commands; add --check "
                         "(with --format vllm or kubernetes), or drop --vllm-python")
    if args.format != "kubernetes":
        given = [flag for flag, dest, default in args.kubernetes_options if getattr(args, dest) != default]
        if given:
            raise InputError(f"{given[0]} is an option of --format kubernetes, not of --format {args.format}; add "
                             f"--format kubernetes, or drop {given[0]}")


# Files that say an --out folder holds an earlier export (it may be written again).
EXPORT_MARKERS = ("plan.json", "kubernetes.yaml")
# The first lines of the files an export writes, with the format and the trial they are of: how a
# file of an earlier export is told from a person's (node scripts say it on their second line).
_EXPORT_HEADS = (
    (re.compile(r"^#!/usr/bin/env bash\n# servopt export for vLLM [^:\n]*: trial ([0-9]+)"), "vllm"),
    (re.compile(r"^# vLLM launch scripts: trial ([0-9]+) "), "vllm"),
    (re.compile(r'^\{\n  "vllm_version": "[^"\n]*",\n  "trial": ([0-9]+),'), "vllm"),
    (re.compile(r"^# servopt export for Kubernetes [^:\n]*: trial ([0-9]+)"), "kubernetes"),
    (re.compile(r"^# Kubernetes manifests: trial ([0-9]+) "), "kubernetes"),
)
_EXPORT_NAMES = re.compile(r"node-[0-9]+\.sh|router\.sh|README\.md|plan\.json|kubernetes\.yaml|README-kubernetes\.md")


def export_folder(args: argparse.Namespace, trial: int, kind: str, writing: list[str]) -> Path:
    """The folder an export writes ``writing`` into (``--out``, else ``DIR/export-trial-N``, reached
    through no link planted in the job folder), cleared of what an earlier export left there that this
    one does not replace: its files of the same format (a 6-node plan's node-1..5.sh beside a new
    1-node plan), and those of the other format when they are of another trial. A file servopt did
    not write is never removed (:data:`_EXPORT_HEADS`)."""
    default = Path(args.dir) / f"export-trial-{trial}"
    if args.out is None:
        check_no_links(default, "export folder", args.dir)
    out = output_folder(args.out or default, "--out", EXPORT_MARKERS)
    for path in sorted(out.iterdir()):
        if path.name in writing or not _EXPORT_NAMES.fullmatch(path.name) or not path.is_file() or path.is_symlink():
            continue
        try:
            head = path.read_bytes()[:400].decode("utf-8", errors="replace")
        except OSError:
            continue
        found = next(((int(m.group(1)), fmt) for pattern, fmt in _EXPORT_HEADS if (m := pattern.match(head))), None)
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
    keys = (f"cost_{objective['cost']}", f"p99_{objective['latency']}_s")
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


def plan_for(front: dict, point: FrontPoint) -> dict:
    """The launch plan of a front point."""
    point = checked_point(point)
    gpu = point.deployment.spec.gpu
    calibrated = bool(front.get("gpus", {}).get(gpu, {}).get("calibrated", point.profile_calibrated))
    basis = (front.get("max_model_len") or {}).get(point.model, {}).get("basis")
    return launch_plan(point.deployment, trial=point.trial, calibrated=calibrated, max_model_len_basis=basis,
                       classes=_classes(front), metrics=point.metrics, class_metrics=point.class_metrics)


def _classes(front: dict) -> list[dict] | None:
    """The workload's tenant classes, as front.json keeps the workload."""
    return (front.get("workload") or {}).get("traffic", {}).get("classes")


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
    _check_format_options(args)
    front = read_front(args.dir)
    point = pick_point(front, args.pick)
    if args.format == "sglang":
        return _export_sglang(args, front, point)
    with _front_file_problems(args.dir, point):
        plan = plan_for(front, point)
        if args.format == "kubernetes":
            return _export_kubernetes(args, front, point, plan)
        scripts = node_scripts(plan)
    if args.format == "json":
        print(json.dumps(plan, indent=2))
    elif args.format == "yaml":
        print(dump_yaml(plan), end="")
    else:
        out = export_folder(args, plan["trial"], "vllm", [*scripts, "README.md", "plan.json"])
        for name, text in scripts.items():
            write_text(out / name, text, mode=0o755)
        write_text(out / "README.md", render_readme(plan, scripts))
        write_text(out / "plan.json", json.dumps(plan, indent=2) + "\n")
        if list(scripts) == ["node-0.sh"]:
            print(scripts["node-0.sh"], end="")
        else:
            print(read_text(out / "README.md", "export README"), end="")
        print(f"# written to {out}: {', '.join(sorted(scripts))}, README.md, plan.json")
    if args.check:
        configs = served_configs(plan)
        version, problems = check_with_vllm(scripts, args.vllm_python, configs=configs)
        if problems:
            raise InputError("vLLM rejects the exported flags: " + "; ".join(problems))
        count = sum(text.count("vllm serve") for text in scripts.values())
        print(f"# --check: vLLM {version}'s `vllm serve` parser accepts all {count} command(s); "
              f"{configs_checked(plan, configs)}")
    return 0


def kubernetes_options(args: argparse.Namespace, front: dict, trial: int) -> KubernetesOptions:
    selector = None
    if args.node_selector:
        pairs = [item.partition("=") for item in args.node_selector]
        if any(not sep for _, sep, _ in pairs):
            raise InputError("--node-selector: expected KEY=VALUE, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
        selector = {key: value for key, _, value in pairs}
    defaults = KubernetesOptions()
    return KubernetesOptions(
        name=args.name or safe_name(f"{front.get('study', 'servopt')}-t{trial}"), namespace=args.namespace,
        image=args.image or defaults.image, router_image=args.router_image or defaults.router_image,
        node_selector=selector, hf_token_secret=args.hf_token_secret, shm_size=args.shm_size,
        model_cache_pvc=args.model_cache_pvc).check()


def served_configs(plan: dict) -> dict:
    """Model id -> the config files vLLM would read for it (``config_files``), for each model the plan serves."""
    served = {instance["model"] for instance in plan["instances"]}
    return {model: files for model in served if (files := config_files(model)) is not None}


def configs_checked(plan: dict, configs: dict) -> str:
    """What ``--check`` compared with vLLM's own reading of the served models' configs."""
    served = {instance["model"] for instance in plan["instances"]}
    by = {kind: [m for m, files in configs.items() if files.quantization_from == kind] for kind in ("config", "card")}
    return (f"--max-model-len checked against vLLM's reading of the config of {len(configs)}/{len(served)} model(s), "
            f"--quantization against the method vLLM picks for {len(by['config'])} checkpoint(s) by their own "
            f"metadata and {len(by['card'])} by the metadata their cards state")


def _export_kubernetes(args: argparse.Namespace, front: dict, point: FrontPoint, plan: dict) -> int:
    options = kubernetes_options(args, front, plan["trial"])
    vendor = (front.get("gpus", {}).get(plan["gpu"]) or {}).get("vendor")
    docs = kubernetes_manifests(plan, options, gpus_per_node=point.deployment.gpus_per_node, vendor=vendor)
    text = render_kubernetes(plan, docs)
    out = export_folder(args, plan["trial"], "kubernetes", ["kubernetes.yaml", "README-kubernetes.md"])
    write_text(out / "kubernetes.yaml", text)
    write_text(out / "README-kubernetes.md", render_kubernetes_readme(plan, docs, options))
    print(text, end="")
    print(f"# written to {out}: kubernetes.yaml, README-kubernetes.md")
    if args.check:
        problems = check_manifests(docs)
        if problems:
            raise InputError("the manifests break the Kubernetes schemas: " + "; ".join(problems))
        configs = served_configs(plan)
        commands = with_configs(serve_argvs(docs), configs)
        version, problems = check_commands_with_vllm(commands, args.vllm_python)
        if problems:
            raise InputError("vLLM rejects the exported flags: " + "; ".join(problems))
        print(f"# --check: {len(docs)} objects valid against the Kubernetes {KUBERNETES_VERSION} schemas; vLLM {version}'s "
              f"`vllm serve` parser accepts all {len(commands)} container command(s); {configs_checked(plan, configs)}")
    return 0


def _export_sglang(args: argparse.Namespace, front: dict, point: FrontPoint) -> int:
    with _front_file_problems(args.dir, point):
        point = checked_point(point)
        plan = sglang_plan(point.deployment, trial=point.trial, classes=_classes(front), metrics=point.metrics)
        text = render_sglang(plan)
    print(text, end="")
    if args.check:
        python = os.environ.get("SERVOPT_SGLANG_PYTHON") or sys.executable
        try:
            problems = check_with_sglang(plan, python)
        except (ImportError, OSError) as err:
            raise InputError(f"--check --format sglang needs SGLang importable by {python} (pip install sglang, or "
                             f"set SERVOPT_SGLANG_PYTHON to a Python that has it): {err}") from None
        if problems:
            raise InputError("SGLang rejects the exported flags: " + "; ".join(problems))
        print("# --check: SGLang's parser accepts every server's flags")
    return 0
