"""``servopt export DIR``: launch scripts for a point of a job's front (vLLM 0.33), or SGLang commands."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
from pathlib import Path
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import yaml

from pydantic import ConfigDict, Field

from ...costmodels.deployment import Deployment
from ...costmodels.errors import MAX_INT, InputError, Spec, one_line, quote, validate_spec
from ...costmodels.model_sources import check_model_id
from ...costmodels.outfiles import output_folder, read_text, write_text
from ...costmodels.userfiles import parse_json, shown
from ...results import check_with_vllm, launch_plan, node_scripts, render_readme
from ...results._export_sglang import check_with_sglang, render_sglang, sglang_plan


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="write vLLM launch scripts (one per node, plus the router) for a point of a job's front",
        description="Write vLLM launch scripts for a point of the front into a folder: node-N.sh per node, "
        "router.sh when several instances sit behind the vLLM Router, README.md with the order to start them, "
        "and plan.json. A single-node, single-instance deployment's script is also printed.")
    parser.add_argument("dir", metavar="DIR", help="the job folder servopt optimize wrote")
    parser.add_argument("--pick", default="cheapest",
                        help="cheapest, fastest, or a trial number from the report's # column (default cheapest)")
    parser.add_argument("--format", choices=["vllm", "json", "yaml", "sglang"], default="vllm",
                        help="scripts (default), print the launch plan as JSON or YAML, or print "
                             "`python -m sglang.launch_server` commands (with --check: parsed by SGLang's parser, "
                             "from SGLang importable or $SERVOPT_SGLANG_PYTHON)")
    parser.add_argument("--out", default=None, metavar="FOLDER",
                        help="where the scripts go (default: DIR/export-trial-N)")
    parser.add_argument("--check", action="store_true",
                        help="parse every vllm serve command with vLLM's own parser (needs vLLM; see --vllm-python)")
    parser.add_argument("--vllm-python", default=None, metavar="PATH",
                        help="the Python of an environment with vLLM installed (default: $SERVOPT_VLLM_PYTHON, "
                        "this one, or ./.vllm-venv/bin/python)")
    parser.set_defaults(handler=run)


class _FrontPoint(Spec):
    """A front point as export reads it (front.json holds more, which it passes on)."""

    model_config = ConfigDict(extra="allow")
    trial: int = Field(ge=0, le=MAX_INT)
    serve_id: str
    model: str | None = None
    deployment: dict[str, Any]
    roles: list[dict[str, Any]] = Field(default_factory=list)
    weights: dict[str, Any] | None = None
    gpus_per_node: int = Field(ge=1, le=1024)
    metrics: dict[str, float | None] = Field(default_factory=dict)
    class_metrics: dict[str, float | None] = Field(default_factory=dict)
    profile_calibrated: bool = True


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
    points: list[_FrontPoint]
    gpus: dict[str, dict[str, Any]] = Field(default_factory=dict)
    max_model_len: dict[str, dict[str, Any]] = Field(default_factory=dict)


def read_front(folder: str | Path) -> dict:
    """front.json, checked to be the shape servopt writes (it is a file anyone can edit)."""
    path = Path(folder) / "front.json"
    try:
        data = parse_json(read_text(path, "front file"), f"front file '{shown(path)}'")
    except FileNotFoundError:
        raise InputError(f"{shown(folder)} has no front.json; run servopt optimize (or "
                         f"{shlex.join(['servopt', 'report', str(folder)])}) first") from None
    where = f"front file '{shown(path)}' (rewrite it with servopt report {shlex.quote(str(folder))})"
    return validate_spec(_FrontFile, data, where).model_dump()


def pick_point(front: dict, pick: str) -> dict:
    points = front["points"]
    if not points:
        raise InputError("the front is empty: nothing to export (see report.md for why)")
    objective = front["workload"]["objective"]
    keys = (f"cost_{objective['cost']}", f"p99_{objective['latency']}_s")
    for point in points:
        missing = [k for k in keys if not isinstance(point["metrics"].get(k), float | int)]
        if missing:
            raise InputError(f"front.json: trial {point['trial']} has no metrics.{missing[0]}; rewrite front.json "
                             "with servopt report DIR")
    if pick == "cheapest":
        return min(points, key=lambda p: (p["metrics"][keys[0]], p["metrics"][keys[1]]))
    if pick == "fastest":
        return min(points, key=lambda p: (p["metrics"][keys[1]], p["metrics"][keys[0]]))
    if not re.fullmatch(r"[0-9]{1,12}", pick):  # ASCII digits: str.isdigit also takes '²'
        raise InputError(f"--pick: expected cheapest, fastest or a trial number, got {quote(pick)}")
    for point in points:
        if point["trial"] == int(pick):
            return point
    raise InputError(f"--pick: trial {pick} is not on the front; front trials: {', '.join(str(p['trial']) for p in points)}")


def checked_point(point: dict) -> dict:
    """The point with the ids it serves checked again (front.json is a file anyone could have edited)
    and local paths made absolute (the scripts ``cd`` into their own folder), its deployment validated."""
    point = {**point, "serve_id": check_model_id(point["serve_id"], "front.json serve_id")}
    if point.get("weights"):
        weights = point["weights"]
        point["weights"] = {**weights, "serve_id": check_model_id(weights.get("serve_id"), "front.json weights.serve_id")}
    validate_spec(Deployment, point["deployment"], f"front.json trial {point['trial']}: deployment")
    return point


def plan_for(front: dict, point: dict) -> dict:
    """The launch plan of a front point."""
    point = checked_point(point)
    gpu = point["deployment"]["gpu"]
    calibrated = bool(front.get("gpus", {}).get(gpu, {}).get("calibrated", point.get("profile_calibrated", True)))
    basis = (front.get("max_model_len") or {}).get(point.get("model", ""), {}).get("basis")
    classes = (front.get("workload") or {}).get("traffic", {}).get("classes")
    return launch_plan(point, gpus_per_node=point["gpus_per_node"], calibrated=calibrated, max_model_len_basis=basis,
                       classes=classes)


@contextmanager
def _front_file_problems(folder: str | Path, point: dict) -> Iterator[None]:
    """A front.json edited into a shape servopt does not write fails where the export reads it: one
    line naming the trial, not a traceback."""
    try:
        yield
    except InputError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise InputError(f"front.json: trial {point['trial']} is not what servopt writes ({type(err).__name__}: "
                         f"{one_line(str(err))[:100]}); rewrite it with servopt report {shlex.quote(str(folder))}") \
            from None


def run(args: argparse.Namespace) -> int:
    front = read_front(args.dir)
    point = pick_point(front, args.pick)
    if args.format == "sglang":
        return _export_sglang(args, front, point)
    with _front_file_problems(args.dir, point):
        plan = plan_for(front, point)
        scripts = node_scripts(plan)
    if args.format == "json":
        print(json.dumps(plan, indent=2))
    elif args.format == "yaml":
        print(yaml.safe_dump(plan, sort_keys=False), end="")
    else:
        out = output_folder(args.out or Path(args.dir) / f"export-trial-{plan['trial']}", "--out", ["plan.json"])
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
        version, problems = check_with_vllm(scripts, args.vllm_python)
        if problems:
            raise InputError("vLLM rejects the exported flags: " + "; ".join(problems))
        count = sum(text.count("vllm serve") for text in scripts.values())
        print(f"# --check: vLLM {version}'s `vllm serve` parser accepts all {count} command(s)")
    return 0


def _export_sglang(args: argparse.Namespace, front: dict, point: dict) -> int:
    with _front_file_problems(args.dir, point):
        point = checked_point(point)
        plan = sglang_plan(point, gpus_per_node=point["gpus_per_node"],
                           classes=(front.get("workload") or {}).get("traffic", {}).get("classes"))
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
