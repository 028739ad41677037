"""``servopt export DIR``: launch commands for a front point (vLLM 0.33, or SGLang)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

from ...costmodels.errors import InputError
from ...results import check_with_vllm, launch_plan, render_shell
from ...results._export_sglang import check_with_sglang, render_sglang, sglang_plan


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("export", help="print vLLM launch commands for a point of a job's front")
    parser.add_argument("dir", metavar="DIR", help="the job folder servopt optimize wrote")
    parser.add_argument("--pick", default="cheapest",
                        help="cheapest, fastest, or a trial number from the report's # column (default cheapest)")
    parser.add_argument("--format", choices=["vllm", "json", "yaml", "sglang"], default="vllm",
                        help="vLLM shell commands (default), the vLLM launch plan as JSON or YAML, or "
                             "`python -m sglang.launch_server` commands")
    parser.add_argument("--check", action="store_true",
                        help="validate the flags with vLLM's own parser (needs vLLM), or SGLang's for --format sglang "
                             "(SGLang importable, or SERVOPT_SGLANG_PYTHON naming a Python that has it)")
    parser.set_defaults(handler=run)


def read_front(folder: str | Path) -> dict:
    path = Path(folder) / "front.json"
    try:
        return json.loads(path.read_text())
    except OSError:
        raise InputError(f"{folder} has no front.json; run servopt optimize (or servopt report {folder}) first") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path} is not valid JSON (line {err.lineno}: {err.msg})") from None


def pick_point(front: dict, pick: str) -> dict:
    points = front["points"]
    if not points:
        raise InputError("the front is empty: nothing to export (see report.md for why)")
    objective = front["workload"]["objective"]
    if pick == "cheapest":
        return min(points, key=lambda p: (p["metrics"][f"cost_{objective['cost']}"], p["metrics"][f"p99_{objective['latency']}_s"]))
    if pick == "fastest":
        return min(points, key=lambda p: (p["metrics"][f"p99_{objective['latency']}_s"], p["metrics"][f"cost_{objective['cost']}"]))
    if not pick.isdigit():
        raise InputError(f"--pick: expected cheapest, fastest or a trial number, got '{pick}'")
    for point in points:
        if point["trial"] == int(pick):
            return point
    raise InputError(f"--pick: trial {pick} is not on the front; front trials: {', '.join(str(p['trial']) for p in points)}")


def run(args: argparse.Namespace) -> int:
    front = read_front(args.dir)
    point = pick_point(front, args.pick)
    w = front["workload"]
    if args.format == "sglang":
        return _export_sglang(args, point, w.get("checkpoints") or {})
    plan = launch_plan(point, w.get("checkpoints") or {}, gpus_per_node=point["gpus_per_node"])
    if args.format == "json":
        print(json.dumps(plan, indent=2))
    elif args.format == "yaml":
        print(yaml.safe_dump(plan, sort_keys=False), end="")
    else:
        print(render_shell(plan), end="")
    if args.check:
        try:
            problems = check_with_vllm(plan)
        except ImportError:
            raise InputError("--check needs vLLM importable in this environment (pip install vllm)") from None
        if problems:
            raise InputError("vLLM rejects the exported flags: " + "; ".join(problems))
        print("# --check: vLLM's parser accepts every instance's flags")
    return 0


def _export_sglang(args: argparse.Namespace, point: dict, checkpoints: dict) -> int:
    plan = sglang_plan(point, checkpoints, gpus_per_node=point["gpus_per_node"])
    print(render_sglang(plan), end="")
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
