"""Shared by the bench_optimizer_* scripts: the servopt CLI in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def cli(args: list[str]) -> list[str]:
    """argv of `servopt ARGS` in a fresh interpreter."""
    return [sys.executable, "-m", "servopt.optimizer", *args]


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cli(args), capture_output=True, text=True, **kwargs)
