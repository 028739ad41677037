"""Every front point of the built-in job and of every example, exported and checked.

Runs ``servopt optimize`` (a reduced trial budget, same search) for the default job and each file in
examples/, then for every point of each front ``servopt export --check`` (the launch scripts, parsed
by vLLM's own ``vllm serve`` parser; each command's ``--max-model-len`` against vLLM's own reading of
the model's config, ``_get_and_verify_max_len``, and its ``--quantization`` against the method vLLM
picks for the checkpoint's config, ``ModelConfig._verify_quantization``, where the config carries the
checkpoint's metadata: a checkpoint whose format is its card's is counted apart) and ``servopt export --format kubernetes --check`` (every
manifest validated offline against the Kubernetes schemas and the LeaderWorkerSet CRD schema, every
container's command parsed by vLLM's parser), and prints one line per point and the counts. Then the
payloads of tests/test_export.py, planted in a local checkpoint folder's name: a small job on that
folder, every front point exported to manifests, the YAML read back, and every container that runs
a shell run with stub executables first on PATH; it counts the payloads that ran (injections).
Needs vLLM in a separate environment (``.vllm-venv`` or ``SERVOPT_VLLM_PYTHON``) and
kubernetes-validate (the test extra).

    python benchmarks/bench_export_check.py [--trials 60] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from servopt.costmodels.architectures import config_files
from servopt.optimizer.cli import main as servopt
from servopt.results import check_commands_with_vllm, with_configs
from servopt.results._export_kubernetes import (
    KUBERNETES_VERSION, LWS_EXAMPLE_ENV, check_manifests, container_words, serve_argvs,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_export import PAYLOADS, _stub_path  # noqa: E402  (the tests' payloads and stubs, not a copy)


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
    failures = checked = k8s_failures = manifests = 0
    commands: list[dict] = []  # every container's vllm serve command, parsed by vLLM once at the end
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
            code, text = run(["export", str(folder), "--pick", str(point["trial"]), "--format", "kubernetes",
                              "--out", str(folder / f"k8s-{point['trial']}")])
            docs = list(yaml.safe_load_all((folder / f"k8s-{point['trial']}" / "kubernetes.yaml").read_text()))
            problems = check_manifests(docs) if code == 0 else [text.strip()[-300:]]
            k8s_failures += bool(problems)
            argvs = serve_argvs(docs)
            configs = {c["argv"][2]: files for c in argvs if (files := config_files(c["argv"][2])) is not None}
            commands += [{**c, "label": f"{name} trial {point['trial']}: {c['label']}"}
                         for c in with_configs(argvs, configs)]
            manifests += len(docs)
            print(f"{'':<22} kubernetes: {len(docs)} objects, {'valid' if not problems else problems}")
        print(f"{name}: {len(points)} front points in {time.perf_counter() - start:.0f} s")
    leaked = {k for k in os.environ if k.startswith("SERVOPT_")} - env_before
    print(f"{checked} exports checked, {failures} failed; --max-model-len checked against vLLM's reading of the "
          f"model config for {lengths}, --quantization against vLLM's pick for {quantizations} ({card_formats} "
          f"served checkpoints have card formats, parser and registry only); environment variables set: "
          f"{sorted(leaked) or 'none'}")
    version, rejected = check_commands_with_vllm(commands)
    print(f"{checked} Kubernetes exports: {manifests} objects, {k8s_failures} exports with an object invalid against "
          f"the Kubernetes {KUBERNETES_VERSION} schemas; {len(commands)} container commands, {len(rejected)} rejected "
          f"by vLLM {version}'s parser" + "".join(f"\n  {r}" for r in rejected))
    k8s_failures += len(rejected)
    injections, exported = planted(out / "payloads")
    print(f"payloads: {len(PAYLOADS)}, Kubernetes exports of their jobs: {exported}, injections: {injections}")
    sys.exit(1 if failures or k8s_failures or injections else 0)


def planted(out: Path) -> tuple[int, int]:
    """(payloads that ran, exports made) for a job on a local checkpoint folder named by each payload."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
              "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    injections = exported = 0
    stubs = _stub_path(out)
    for i, payload in enumerate(PAYLOADS):
        marker = out / f"pwned-{i}"
        folder = out / payload.format(m=marker).replace("/", "_")
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(config))
        workload = {"model": str(folder), "gpus": ["h100"], "budget": {"trials": 12}, "seed": 1,
                    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 2},
                                "input_tokens": {"kind": "fixed", "value": 512},
                                "output_tokens": {"kind": "fixed", "value": 64}},
                    "space": {"tp": [1, 2], "mode": ["aggregated", "disaggregated"]},
                    "fidelity": {"search_requests": 60, "final_requests": 60}}
        (out / f"w{i}.yaml").write_text(json.dumps(workload))
        job = out / f"job-{i}"
        code, _ = run(["optimize", str(out / f"w{i}.yaml"), "--out", str(job), "--no-progress"])
        if code != 0:  # refused at input (control characters in the path): nothing to export
            continue
        for point in json.loads((job / "front.json").read_text())["points"]:
            code, text = run(["export", str(job), "--pick", str(point["trial"]), "--format", "kubernetes",
                              "--out", str(job / f"k8s-{point['trial']}")])
            exported += code == 0
            docs = list(yaml.safe_load_all((job / f"k8s-{point['trial']}" / "kubernetes.yaml").read_text()))
            for doc in docs:
                lwt = doc["spec"].get("leaderWorkerTemplate", {})
                templates = ([doc["spec"]["template"]] if doc["kind"] == "Deployment" else
                             [lwt["leaderTemplate"], lwt["workerTemplate"]] if lwt else [])
                for template in templates:
                    words = container_words(template["spec"]["containers"][0], LWS_EXAMPLE_ENV)
                    if words[0] == "/bin/sh":
                        env = {**os.environ, **LWS_EXAMPLE_ENV, "PATH": f"{stubs}:{os.environ['PATH']}",
                               "STUB_LOG": str(out / "calls.log")}
                        subprocess.run(words, env=env, capture_output=True, timeout=60, check=False)
                    elif words[:2] == ["vllm", "serve"] and words[2] != str(folder):
                        injections += 1  # the folder did not reach vllm as one word, unchanged
        injections += marker.exists()
    return injections, exported


if __name__ == "__main__":
    main()
