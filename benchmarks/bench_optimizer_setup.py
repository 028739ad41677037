"""Shared by the benchmark scripts: the servopt CLI in a fresh interpreter, and CPU time."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import yaml

from servopt.optimizer.defaults import default_workload_text

ROOT = Path(__file__).resolve().parent.parent


def cli(args: list[str]) -> list[str]:
    """argv of `servopt ARGS` in a fresh interpreter."""
    return [sys.executable, "-m", "servopt.optimizer", *args]


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cli(args), capture_output=True, text=True, **kwargs)


def default_job_file(directory: str | Path, trials: int) -> Path:
    """The built-in workload with a trial budget, written to ``directory/job.yaml``."""
    workload = yaml.safe_load(default_workload_text())
    workload["budget"] = {"trials": trials}
    path = Path(directory) / "job.yaml"
    path.write_text(yaml.safe_dump(workload))
    return path


def process_cpu_s() -> float:
    """User + system CPU seconds of this process and of its finished children so far (the re-check
    pool's workers among them)."""
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return sum(u.ru_utime + u.ru_stime for u in usage)
