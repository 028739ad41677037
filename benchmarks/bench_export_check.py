"""Every front point of the built-in job and of every example, exported and parsed by vLLM.

Runs ``servopt optimize`` (a reduced trial budget, same search) for the default job and each file in
examples/, then ``servopt export --check`` for every point of each front, with no environment
variable set, and prints one line per point: the scheme, the checkpoint it serves, and whether vLLM's
own ``vllm serve`` parser accepts all of its commands, whose ``--max-model-len`` vLLM's own reading
of the model's config allows (``_get_and_verify_max_len``) and whose ``--quantization`` is the method
vLLM picks for the checkpoint's config (``ModelConfig._verify_quantization``; a checkpoint whose format
is its card's has no config metadata to check, and is counted apart). Needs vLLM in a separate
environment (``.vllm-venv`` or ``SERVOPT_VLLM_PYTHON``, see README).

    python benchmarks/bench_export_check.py [--trials 60] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

from servopt.optimizer.cli import main as servopt

ROOT = Path(__file__).resolve().parents[1]


def run(args: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = servopt(args)
    return code, out.getvalue() + err.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="servopt-export-check-"))
    env_before = {k for k in os.environ if k.startswith("SERVOPT_")}
    jobs = [("default", None)] + [(p.stem, p) for p in sorted((ROOT / "examples").glob("*.yaml"))]
    failures = checked = 0
    lengths = quantizations = card_formats = 0
    for name, path in jobs:
        start = time.perf_counter()
        folder = out / name
        code, text = run(["optimize", *([str(path)] if path else []), "--out", str(folder), "--trials",
                          str(args.trials), "--no-progress"])
        if code != 0:
            print(f"{name}: optimize exited {code}: {text.strip().splitlines()[-1]}")
            failures += 1
            continue
        points = json.loads((folder / "front.json").read_text())["points"]
        for point in points:
            code, text = run(["export", str(folder), "--pick", str(point["trial"]), "--check",
                              "--out", str(folder / f"export-{point['trial']}")])
            verdict = [line for line in text.splitlines() if "--check" in line or "error" in line]
            weights = point.get("weights") or {}
            checked += 1
            failures += code != 0
            counts = re.search(r"config of (\d+)/(\d+) model\(s\), --quantization against the method vLLM picks for (\d+)",
                               verdict[-1] if verdict else "")
            if counts:
                lengths += int(counts[1])
                quantizations += int(counts[3])
                card_formats += int(counts[2]) - int(counts[3])
            print(f"{name:<22} trial {point['trial']:>4} {point['deployment']['quantization']:<6} "
                  f"{weights.get('serve_id', point['serve_id']):<58} "
                  f"{'ok' if code == 0 else 'REJECTED'}: {verdict[-1] if verdict else text.strip()[-200:]}")
        print(f"{name}: {len(points)} front points in {time.perf_counter() - start:.0f} s")
    leaked = {k for k in os.environ if k.startswith("SERVOPT_")} - env_before
    print(f"{checked} exports checked, {failures} failed; --max-model-len checked against vLLM's reading of the "
          f"model config for {lengths}, --quantization against vLLM's pick for {quantizations} ({card_formats} "
          f"served checkpoints have card formats, parser and registry only); environment variables set: "
          f"{sorted(leaked) or 'none'}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
