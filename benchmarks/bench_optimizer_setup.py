"""Shared by the bench_optimizer_* scripts: the simulator in use, and a servopt CLI subprocess.

Until the simulator (branch sim) is on main, the scripts fall back to the test suite's stub and say
so on every report line: figures measured that way show the optimizer's own cost, not the simulator's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def real_simulator() -> bool:
    import servopt.costmodels.serving as serving

    return hasattr(serving, "simulate") and hasattr(serving, "estimate")


def use_simulator() -> str:
    """Bind the simulator in this process; returns which one is used."""
    if real_simulator():
        return "simulator: costmodels.serving"
    sys.path.insert(0, str(ROOT / "tests"))
    import _serving_stub

    _serving_stub.install()
    return "simulator: TEMPORARY test stub (costmodels.serving.simulate/estimate not on main yet)"


def cli(args: list[str]) -> list[str]:
    """argv of `servopt ARGS` in a fresh interpreter, with the stub bound when needed."""
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'benchmarks')!r}); import bench_optimizer_setup as s; "
            "s.use_simulator(); from servopt.optimizer.cli import main; sys.exit(main(sys.argv[1:]))")
    return [sys.executable, "-c", code, *args]


def run(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(cli(args), capture_output=True, text=True, **kwargs)
