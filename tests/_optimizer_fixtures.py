"""Shared helpers of the optimizer, results and export tests: tiny workloads and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

TESTS = Path(__file__).parent

TINY = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 8},
                "input_tokens": {"kind": "fixed", "value": 512},
                "output_tokens": {"kind": "fixed", "value": 128}},
    "slo": {"p99_ttft_s": 2.0, "p99_tpot_s": 0.1},
    "gpus": ["h100", "a100-80gb"],
    "space": {"mode": "aggregated", "speculation": "off", "max_num_seqs": [32, 128], "max_num_batched_tokens": [2048, 8192]},
    "budget": {"trials": 12},
    "fidelity": {"search_requests": 200, "final_requests": 400},
}


@pytest.fixture
def serving(monkeypatch):
    """The simulator's entry points (the temporary stub until branch sim lands)."""
    import _serving_stub

    import servopt.costmodels.serving as module

    if not hasattr(module, "simulate"):
        monkeypatch.setattr(module, "simulate", _serving_stub.simulate, raising=False)
        monkeypatch.setattr(module, "estimate", _serving_stub.estimate, raising=False)
    return module


def write_workload(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def run_cli_process(args: list[str], cwd: Path, wait: bool = True):
    """``servopt ARGS`` in a fresh Python process (with the simulator stub while it is needed)."""
    code = ("import sys; sys.path.insert(0, %r); import _serving_stub; _serving_stub.install(); "
            "from servopt.optimizer.cli import main; sys.exit(main(sys.argv[1:]))" % str(TESTS))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-c", code, *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
