"""Every front point of the built-in job and of every example, exported and checked.

Runs ``servopt optimize`` (a reduced trial budget, same search) for the default job and each file in
examples/, then exports every point of each front as launch scripts and as Kubernetes manifests. Every
``vllm serve`` command, of the scripts and of the containers, is checked by vLLM 0.33 itself: its
``vllm serve`` parser and, where servopt has the served model's config, vLLM's own reading of it
(``_get_and_verify_max_len`` on the command's ``--max-model-len``; ``ModelConfig._verify_quantization``
where the config carries the checkpoint's own metadata: the ``--quantization`` must be the method vLLM
picks; a checkpoint whose format is its card's is counted apart). The commands are checked in one batch
(one vLLM start); the first point of each job also runs ``servopt export --check`` as a user would.
Every manifest is validated offline against the Kubernetes schemas and the LeaderWorkerSet CRD schema.
It prints one line per point and the counts. Then the payloads of tests/test_export.py, planted in a
local checkpoint folder's name: a small job on that folder, every front point exported to manifests,
the YAML read back, and every container that runs a shell run with stub executables first on PATH; it
counts the payloads that ran (injections). Needs vLLM in a separate environment (``.vllm-venv`` or
``SERVOPT_VLLM_PYTHON``) and kubernetes-validate (the test extra).

    python benchmarks/bench_export_check.py [--trials 60] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from servopt.costmodels.architectures import config_files
from servopt.optimizer.cli import main as servopt
from servopt.results import FrontPoint, check_commands_with_vllm, serve_commands, with_configs
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
    shell: list[dict] = []  # every launch script's vllm serve command, checked by vLLM once at the end
    commands: list[dict] = []  # every container's vllm serve command, likewise
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
        for i, point in enumerate(points):
            # The first point of each job runs `export --check` as a user runs it; the others' commands
            # join one batch for vLLM (one vLLM start: the same checks, minutes fewer per point).
            check = ["--check"] if i == 0 else []
            code, text = run(["export", str(folder), "--pick", str(point["trial"]), *check,
                              "--out", str(folder / f"export-{point['trial']}")])
            verdict = [line for line in text.splitlines() if "--check" in line or "error" in line]
            record = FrontPoint.model_validate(point).deployment
            checked += 1
            failures += code != 0
            scripts = {p.name: p.read_text() for p in sorted((folder / f"export-{point['trial']}").glob("*.sh"))}
            shell += labelled(serve_commands(scripts), f"{name} trial {point['trial']}")
            print(f"{name:<22} trial {point['trial']:>4} {record.quantization:<6} "
                  f"{record.weights.serve_id if record.weights else point['serve_id']:<58} "
                  + (f"{'ok' if code == 0 else 'REJECTED'}: {verdict[-1] if verdict else text.strip()[-200:]}" if check
                     else f"{'exported' if code == 0 else 'FAILED: ' + text.strip()[-200:]}"))
            code, text = run(["export", str(folder), "--pick", str(point["trial"]), "--format", "kubernetes",
                              "--out", str(folder / f"k8s-{point['trial']}")])
            docs = list(yaml.safe_load_all((folder / f"k8s-{point['trial']}" / "kubernetes.yaml").read_text()))
            problems = check_manifests(docs) if code == 0 else [text.strip()[-300:]]
            k8s_failures += bool(problems)
            commands += labelled(serve_argvs(docs), f"{name} trial {point['trial']}")
            manifests += len(docs)
            print(f"{'':<22} kubernetes: {len(docs)} objects, {'valid' if not problems else problems}")
        print(f"{name}: {len(points)} front points in {time.perf_counter() - start:.0f} s")
    leaked = {k for k in os.environ if k.startswith("SERVOPT_")} - env_before
    version, rejected = check_commands_with_vllm(shell)
    failures += len(rejected)
    with_config = [c for c in shell if c.get("config")]
    by = {kind: sum(1 for c in with_config if c.get("quantization_from") == kind) for kind in ("config", "card")}
    print(f"{checked} exports, {len(shell)} vllm serve commands, {len(rejected)} rejected by vLLM {version}: its parser, "
          f"and for {len(with_config)} commands vLLM's reading of the model config (--max-model-len within "
          f"_get_and_verify_max_len), --quantization equal to the method vLLM picks for {by['config']} checkpoints' "
          f"own metadata and {by['card']} checkpoints' metadata as their cards state it "
          f"({len(with_config) - by['config'] - by['card']} 16-bit); environment variables set: "
          f"{sorted(leaked) or 'none'}" + "".join(f"\n  {r}" for r in rejected))
    version, rejected = check_commands_with_vllm(commands)
    print(f"{checked} Kubernetes exports: {manifests} objects, {k8s_failures} exports with an object invalid against "
          f"the Kubernetes {KUBERNETES_VERSION} schemas; {len(commands)} container commands, {len(rejected)} rejected "
          f"by vLLM {version}'s parser and its reading of the model config" + "".join(f"\n  {r}" for r in rejected))
    k8s_failures += len(rejected)
    injections, exported = planted(out / "payloads")
    print(f"payloads: {len(PAYLOADS)}, Kubernetes exports of their jobs: {exported}, injections: {injections}")
    sys.exit(1 if failures or k8s_failures or injections else 0)


def labelled(argvs: list[dict], label: str) -> list[dict]:
    """Commands with the config files of the models they serve (as ``export --check`` sends them), labelled by point."""
    configs = {c["argv"][2]: files for c in argvs if len(c["argv"]) > 2 and (files := config_files(c["argv"][2]))}
    return [{**c, "label": f"{label}: {c['label']}"} for c in with_configs(argvs, configs)]


def planted(out: Path) -> tuple[int, int]:
    """(payloads that ran, exports made) for a job on a local checkpoint folder named by each payload."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 8192, "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
              "vocab_size": 128256, "max_position_embeddings": 8192, "tie_word_embeddings": True, "torch_dtype": "bfloat16"}
    injections = exported = 0
    out.mkdir(parents=True, exist_ok=True)
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
                spec = doc.get("spec") or {}  # objects without a spec (ConfigMaps) run nothing
                lwt = spec.get("leaderWorkerTemplate", {})
                templates = ([spec["template"]] if doc["kind"] == "Deployment" else
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
