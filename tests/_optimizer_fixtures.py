"""Shared helpers of the optimizer, results and export tests: tiny workloads and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


def compiled_record(point: dict, gpus_per_node: int | None = None):
    """The deployment record of a front point given as servopt wrote points before the record (its
    spec, ``serve_id`` and ``weights``): compiled (roles, placements on ``gpus_per_node``), serving
    those weights, as the exporters read it."""
    from servopt.costmodels.architectures import resolve_model
    from servopt.costmodels.deployment import Deployment
    from servopt.costmodels.hardware import get_gpu
    from servopt.costmodels.profile import PerformanceProfile
    from servopt.costmodels.serving import compile_deployment
    from servopt.results import FrontPoint

    deployment = Deployment.model_validate(point["deployment"])
    gpu = get_gpu(deployment.gpu)
    spec = resolve_model(point.get("model") or point["serve_id"]).spec
    compiled = compile_deployment(spec, deployment, gpu, PerformanceProfile.spec_default(gpu), gpus_per_node=gpus_per_node)
    weights = FrontPoint.model_validate({"trial": 0, **point}).deployment.weights
    return compiled.record().model_copy(update={"weights": weights})


@pytest.fixture
def serving():
    """The simulator's module, for tests that replace one of its entry points."""
    import servopt.costmodels.serving as module

    return module


def write_workload(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def run_cli_process(args: list[str], cwd: Path, wait: bool = True, env: dict[str, str] | None = None):
    """``servopt ARGS`` in a fresh Python process (``env``: variables to add)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = [sys.executable, "-m", "servopt.optimizer", *args]
    if not wait:
        return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
