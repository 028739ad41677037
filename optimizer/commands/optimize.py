"""``servopt optimize [WORKLOAD]``: search deployments, re-check the front, write the report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import optuna

from ...costmodels.errors import one_line, validate_spec
from ...results import explain_empty, export_command, trials_frame, write_results
from ..defaults import DEFAULT_NAME, default_workload
from .._storage import STORAGE_ENV
from ..job import Job
from ..workload import MAX_TIME_S, MAX_TRIALS, Accuracy, Budget, load_workload
from . import COMMANDS
from .common import given, number_in, whole_number

# Workers of one machine: more than a large server's cores only wait on each other.
MAX_JOBS = 1024


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "optimize",
        help=COMMANDS["optimize"][1],
        description="Search deployments with Optuna (cost vs P99 latency under SLO, accuracy and memory "
        "constraints), re-check the front with a longer simulation, and write trials.csv, pareto.csv, "
        "front.json, report.md and report.html. Rerunning the same job resumes it. Unless the workload says "
        f"otherwise, a quantization may cost at most {Accuracy().max_drop_pct:g}% accuracy "
        "(accuracy.max_drop_pct); docs/workload.md lists every key.",
    )
    parser.add_argument("workload", nargs="?", default=None,
                        help="workload YAML file (default: the built-in Llama-3.1-8B chat job)")
    parser.add_argument("--out", type=given, default=None, metavar="DIR", help="job folder (default: servopt-runs/STUDY)")
    parser.add_argument("--study", type=given, default=None, metavar="NAME", help="study name (default: the workload file's name)")
    parser.add_argument("--storage", type=given, default=None, metavar="URL",
                        help=f"where the study lives: journal:///path/file or an SQLAlchemy URL of a shared database "
                        f"(default: ${STORAGE_ENV}, else the workload's storage, else the journal file "
                        "DIR/study.journal); a password in it is never printed or saved")
    parser.add_argument("--jobs", type=whole_number(1, MAX_JOBS), default=1, metavar="N",
                        help="worker processes on this machine")
    parser.add_argument("--trials", type=whole_number(1, MAX_TRIALS), default=None, help="override budget.trials")
    parser.add_argument("--time", type=number_in(0, MAX_TIME_S), default=None, metavar="SECONDS",
                        help="override budget.time_s")
    parser.add_argument("--hardware", type=given, default=None, metavar="YAML", help="YAML file of GPU overrides/additions")
    parser.add_argument("--restart", action="store_true",
                        help="start afresh: delete the trials the job's study holds (rerunning a job resumes it, and "
                        "is refused when its workload, a model's config, the hardware file, a price or a profile "
                        "changed since it started)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=run)


def make_job(args: argparse.Namespace) -> Job:
    if args.workload is None:
        workload, name = default_workload(), DEFAULT_NAME
    else:
        workload, name = load_workload(args.workload), Path(args.workload).stem
    if args.trials is not None or args.time is not None:
        budget = validate_spec(Budget, {
            "trials": args.trials if args.trials is not None else workload.budget.trials,
            "time_s": args.time if args.time is not None else workload.budget.time_s,
        }, "--trials/--time: budget")
        workload = workload.model_copy(update={"budget": budget})
    study = args.study or name
    out = Path(args.out) if args.out else Path("servopt-runs") / study
    return Job(workload, out, study=study, storage=args.storage, jobs=args.jobs, hardware=args.hardware, name=name,
               restart=args.restart)


def run(args: argparse.Namespace) -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the progress bar reports trials
    job = make_job(args)
    warned = job.workload.warnings()
    for line in warned:
        print(f"servopt optimize: warning: {line}", file=sys.stderr)
    outcome = job.run(progress=not args.no_progress)
    data = job.collect()
    paths = write_results(job.out_dir, data)
    front = [t for t in data["trials"] if t.number in set(outcome.front)]
    result = {
        "study": job.study_name, "storage": job.shown_storage, "out_dir": str(job.out_dir),
        "trials": outcome.trials, "new_trials": outcome.new_trials,
        "workers": [{"worker": w.worker, "trials": w.trials_run} for w in outcome.workers],
        "simulated": outcome.simulations, "rechecked": outcome.rechecked,
        "elapsed_s": round(outcome.elapsed_s, 2), "front": outcome.front,
        "files": {name: str(path) for name, path in paths.items()}, "notes": list(outcome.notes),
        "warnings": warned,
    }
    empty = not front
    if empty:
        result["empty_front"] = explain_empty(data, trials_frame(data))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for note in outcome.notes:
            print(f"note: {one_line(note)}")
        ran = ", ".join(str(w.trials_run) for w in outcome.workers)
        print(f"study '{one_line(job.study_name)}' in {one_line(job.shown_storage)}: {outcome.trials} trials "
              f"({outcome.new_trials} run "
              f"here" + (f" by {len(outcome.workers)} workers: {ran}" if len(outcome.workers) > 1 else "")
              + f"; {outcome.simulations} simulated in all), front of {len(outcome.front)} re-checked in "
              f"{outcome.elapsed_s:.1f} s")
        if empty:
            print("\n".join(one_line(line) for line in result["empty_front"]))
        print(f"report: {one_line(str(paths['report.md']))} and {one_line(str(paths['report.html']))}")
        if not empty:
            print(f"export: {export_command(job.out_dir)}")
    # An empty front means the workload's targets cannot be met as written: a bad-input outcome.
    return 2 if empty else 0
