"""``servopt report DIR``: regenerate an optimize job's tables and reports from its study."""

from __future__ import annotations

import argparse
import json
import sys

from ...costmodels.errors import one_line
from ...results import write_results
from .._storage import STORAGE_ENV
from ..job import Job
from . import COMMANDS
from .common import given


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("report", help=COMMANDS["report"][1])
    parser.add_argument("dir", metavar="DIR", help="the job folder servopt optimize wrote")
    parser.add_argument("--storage", type=given, default=None, metavar="URL",
                        help=f"the study's storage URL, when job.json keeps it without its password (or set "
                        f"${STORAGE_ENV})")
    parser.add_argument("--json", action="store_true", help="print the written paths as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    job = Job.load(args.dir, args.storage)
    paths = write_results(job.out_dir, job.collect())
    for note in job.notes:
        print(f"servopt report: note: {one_line(note)}", file=sys.stderr)
    files = {name: str(path) for name, path in paths.items()}
    print(json.dumps(files, indent=2) if args.json else "\n".join(map(one_line, files.values())))
    return 0
