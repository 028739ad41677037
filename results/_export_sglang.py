"""Launch commands for a front point on SGLang (``python -m sglang.launch_server``).

servopt predicts vLLM's engine; this writes the same deployment for SGLang, flag by flag, so that a
team on SGLang starts from the point the search chose (its latencies are predicted for vLLM, not
SGLang, and the plan says so):

- parallelism: vLLM's ``tp`` per data-parallel rank and ``data_parallel_size`` ``D`` become SGLang's
  ``--tp-size`` over all the instance's GPUs with ``--dp-size D --enable-dp-attention`` for an MoE
  model (attention data-parallel, ``tp`` GPUs per rank; the MoE layers over all of them), and
  ``--ep-size`` equal to that TP size with expert parallelism; a dense model's DP ranks are SGLang
  data-parallel workers of ``--tp-size tp`` each; ``--pp-size`` for pipeline stages;
- weights: ``--quantization fp8`` when the 16-bit checkpoint is quantized at load, else the
  pre-quantized checkpoint the point serves, whose config SGLang reads; ``--dtype`` for bf16/fp16; ``--kv-cache-dtype fp8_e4m3`` for vLLM's fp8 KV
  (e4m3 is vLLM's ``fp8``);
- batching: ``--chunked-prefill-size`` (vLLM's token budget; ``-1`` without chunked prefill),
  ``--max-running-requests`` (``max_num_seqs``), ``--context-length`` and ``--mem-fraction-static``:
  SGLang's static pool holds the weights and the KV cache, so it is set to the share of GPU memory
  that the weights plus the KV pool of the compiled role's memory plan take, keeping the KV capacity;
  every instance's parallelism and limits are its role's in the compiled deployment, as the trial
  recorded them (``roles``);
- priority scheduling: ``--enable-priority-scheduling --schedule-low-priority-values-first`` (SGLang
  serves higher values first unless told otherwise; vLLM lower ones). SGLang's priority scheduler is
  not vLLM's: a waiting request may preempt running ones whose priority is more than
  ``--priority-scheduling-preemption-threshold`` (default 10) lower, which vLLM never does, so when
  the classes' priorities span that much the threshold is raised above their span; under KV
  pressure SGLang retracts by length, not priority (``--retraction-policy priority`` in recent
  releases). The plan's notes say so;
- prefix caching off: ``--disable-radix-cache``; speculative decoding: ``--speculative-algorithm``
  (EAGLE, EAGLE3, NGRAM, STANDALONE for a draft model; MTP runs as EAGLE on the model's own layers)
  with a chain of ``g`` steps; prefill/decode disaggregation: ``--disaggregation-mode`` per role
  (NIXL transfer) and SGLang's router in PD mode.

Example (vLLM's defaults for an H200 fill the limits the deployment leaves out):
    >>> from servopt.costmodels import Deployment, PerformanceProfile, get_gpu, get_model
    >>> from servopt.costmodels.serving import compile_deployment
    >>> h200 = get_gpu("h200")
    >>> compiled = compile_deployment(get_model("llama-3.1-8b"), Deployment(gpu="h200", kv_cache_dtype="fp8"), h200,
    ...                               PerformanceProfile.spec_default(h200))
    >>> print(sglang_plan(compiled.record())["instances"][0]["command"])  # doctest: +NORMALIZE_WHITESPACE
    CUDA_VISIBLE_DEVICES=0 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B --port 8000
    --tp-size 1 --dtype bfloat16 --kv-cache-dtype fp8_e4m3 --max-running-requests 1024 --chunked-prefill-size 8192
    --context-length 131072 --mem-fraction-static 0.905
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..costmodels.architectures import resolve_model
from ..costmodels.errors import InputError
from ..costmodels.serving.compiled import DECODE, PREFILL, REPLICA, DeploymentRecord, RoleRecord
from ._export import BASE_PORT, DTYPES, ROUTER_PORT, comment, compiled_instances, priority_note, served_weights, shell_command
from ._format import Exported, ExportFormat, ExportRequest, ParserMissing

KV_DTYPES = {"auto": "auto", "fp8": "fp8_e4m3"}
SPECULATIVE_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM",
                          "draft_model": "STANDALONE"}


def _memory_fraction(role: RoleRecord) -> float | None:
    """Share of GPU memory for the weights plus the KV pool of the compiled role's memory plan (None
    when the trial did not record it)."""
    if role.gpu_memory_bytes is None or role.weights_bytes_per_gpu is None or role.kv_cache_bytes_per_gpu is None:
        return None
    return round((role.weights_bytes_per_gpu + role.kv_cache_bytes_per_gpu) / role.gpu_memory_bytes, 3)


# SGLang's default --priority-scheduling-preemption-threshold: a waiting request whose priority is
# more than this above a running one's preempts it.
SGLANG_PRIORITY_PREEMPTION_THRESHOLD = 10


def sglang_args(record: DeploymentRecord, role: RoleRecord, moe: bool, priority_span: int = 0) -> list[str]:
    """SGLang's server flags for one instance of a compiled ``role`` of ``record`` (after
    ``--model-path`` and ``--port``), in a fixed order (``priority_span``: the largest difference
    between the classes' priorities)."""
    d, weights = record.spec, served_weights(record)
    tp, dp = role.tp, role.data_parallel_size
    ep = d.enable_expert_parallel and moe
    if moe and dp > 1:
        args = ["--tp-size", str(tp * dp), "--dp-size", str(dp), "--enable-dp-attention"]
    else:
        args = ["--tp-size", str(tp)] + (["--dp-size", str(dp)] if dp > 1 else [])
    if ep:
        args += ["--ep-size", str(tp * dp)]
    if role.pp > 1:
        args += ["--pp-size", str(role.pp)]
    if weights.scheme == "fp8" and weights.format is None:
        args += ["--quantization", "fp8"]  # a 16-bit checkpoint quantized at load
    elif weights.scheme in DTYPES:
        args += ["--dtype", DTYPES[weights.scheme]]
    args += ["--kv-cache-dtype", KV_DTYPES[d.kv_cache_dtype], "--max-running-requests", str(role.max_num_seqs),
             "--chunked-prefill-size", str(role.max_num_batched_tokens if d.enable_chunked_prefill else -1),
             "--context-length", str(record.max_model_len)]
    fraction = _memory_fraction(role)
    args += ["--mem-fraction-static", f"{fraction if fraction is not None else d.gpu_memory_utilization:g}"]
    if not d.enable_prefix_caching:
        args.append("--disable-radix-cache")
    if d.scheduling_policy == "priority":
        args += ["--enable-priority-scheduling", "--schedule-low-priority-values-first"]
        if priority_span >= SGLANG_PRIORITY_PREEMPTION_THRESHOLD:  # vLLM never preempts for a waiting request
            args += ["--priority-scheduling-preemption-threshold", str(priority_span + 1)]
    spec = d.speculative
    if spec:
        g = spec.num_speculative_tokens
        args += ["--speculative-algorithm", SPECULATIVE_ALGORITHMS[spec.method], "--speculative-num-steps", str(g),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(g + 1)]
        if spec.draft_model:
            args += ["--speculative-draft-model-path", spec.draft_model]
    return args


def _moe(record: DeploymentRecord) -> bool:
    """Whether the model is MoE (records of old jobs did not say: the model is resolved then)."""
    if record.moe is not None:
        return record.moe
    try:
        return resolve_model(record.model or served_weights(record).serve_id).spec.moe is not None
    except InputError:
        return False


def sglang_plan(record: DeploymentRecord, *, trial: int | None = None, classes: list[dict[str, Any]] | None = None,
                metrics: dict[str, float] | None = None) -> dict[str, Any]:
    """Every SGLang server to start (with its command), the PD router, and notes, as plain data
    (``classes``: the workload's tenant classes, for priority scheduling). Servers run where the
    record places its instances."""
    d = record.spec
    priorities = [c.get("priority", 0) for c in classes or []]
    span = max(priorities) - min(priorities) if priorities else 0
    model, moe = served_weights(record, trial).serve_id, _moe(record)
    instances, routers, notes = [], [], []
    port = BASE_PORT
    urls: dict[int, dict[str, list[str]]] = {}
    for role, place in compiled_instances(record, trial):
        if place.gpus > place.gpus_per_node:
            raise InputError(f"trial {trial}: {place.gpus} GPUs per SGLang server span nodes; export it for "
                             "vLLM (servopt export --format vllm), whose multi-node commands servopt writes")
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, place.devices))}
        args = ["--model-path", model, "--port", str(port), *sglang_args(record, role, moe, span)]
        if role.role != REPLICA:
            args += ["--disaggregation-mode", role.role, "--disaggregation-transfer-backend", "nixl"]
            urls.setdefault(place.replica, {PREFILL: [], DECODE: []})[role.role].append(f"http://node{place.node}:{port}")
        instances.append({"replica": place.replica, "role": role.role, "node": place.node, "port": port,
                          "gpus": place.gpus, "env": env, "args": args,
                          "command": shell_command(env, ["python", "-m", "sglang.launch_server"], args)})
        port += 1
    for replica, by_role in urls.items():
        router = ["--pd-disaggregation", *[a for url in by_role[PREFILL] for a in ("--prefill", url)],
                  *[a for url in by_role[DECODE] for a in ("--decode", url)], "--port", str(ROUTER_PORT + replica)]
        routers.append({"replica": replica, "args": router,
                        "command": shell_command({}, ["python", "-m", "sglang_router.launch_router"], router)})
    dis = d.disaggregation
    notes.append("latencies were predicted for vLLM; SGLang's kernels and scheduler differ, so measure before relying "
                 "on them")
    if dis:
        notes.append("nodeN in the router commands stands for the host of node N (pip install sglang-router).")
    if d.replicas > 1:
        notes.append(f"{d.replicas} replicas: put a load balancer in front of the "
                     + ("routers." if dis else "servers' ports."))
    if d.scheduling_policy == "priority":
        notes.append(priority_note(classes, "--enable-priority-scheduling --schedule-low-priority-values-first",
                                   "without --enable-priority-scheduling SGLang ignores it"))
        kept = ("raised here above the classes' span of " if span >= SGLANG_PRIORITY_PREEMPTION_THRESHOLD
                else "above the classes' span of ")
        notes.append("the priority predictions are vLLM's, which never preempts a running request for a waiting one: "
                     "SGLang does when the waiting one's priority is more than --priority-scheduling-preemption-threshold "
                     f"(default {SGLANG_PRIORITY_PREEMPTION_THRESHOLD}; {kept}{span}) better; and under KV pressure it "
                     "retracts by length unless --retraction-policy priority (recent releases)")
    return {"framework": "sglang", "trial": trial, "model": model, "gpu": d.gpu, "replicas": d.replicas,
            "num_nodes": record.num_nodes, "instances": instances, "routers": routers, "notes": notes,
            "deployment": d.model_dump(mode="json"), "metrics": metrics or {}}


def render_sglang(plan: dict[str, Any]) -> str:
    """The SGLang plan as a commented shell script."""
    lines = [comment(f"# servopt export for SGLang: trial {plan['trial']}, {plan['replicas']} replica(s) on "
             f"{sum(i['gpus'] for i in plan['instances'])} x {plan['gpu']} ({plan['num_nodes']} node(s))")]
    lines += [comment(f"# NOTE: {note}") for note in plan["notes"]]
    node = None
    for inst in plan["instances"]:
        if inst["node"] != node:
            node = inst["node"]
            lines.append(f"# --- node {node} ---")
        lines.append(inst["command"] + " &")
    for router in plan["routers"]:
        lines += [f"# router of replica {router['replica']}", router["command"] + " &"]
    lines.append("wait")
    return "\n".join(lines) + "\n"


# Parses each server's flags with SGLang's own ServerArgs parser, in the interpreter that has SGLang.
_CHECK_SCRIPT = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
problems = []
for args in json.load(sys.stdin):
    parser = argparse.ArgumentParser(exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    try:
        parser.parse_args(args)
    except (argparse.ArgumentError, SystemExit) as err:
        problems.append(f"{err}: {' '.join(args)}")
print(json.dumps(problems))
"""


def check_with_sglang(plan: dict[str, Any], python: str) -> list[str]:
    """Problems SGLang's argument parser finds in each server's flags, parsed by ``python`` (an
    interpreter with SGLang installed; it needs no GPU). Raises ImportError when SGLang is missing there."""
    import json
    import subprocess

    servers = [inst["args"] for inst in plan["instances"]]
    done = subprocess.run([python, "-c", _CHECK_SCRIPT], input=json.dumps(servers), capture_output=True, text=True,
                          timeout=600)
    if done.returncode != 0:
        raise ImportError(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "SGLang check failed")
    return json.loads(done.stdout.strip().splitlines()[-1])


# The Python whose SGLang parses the commands under --check (default: this one).
SGLANG_PYTHON_ENV = "SERVOPT_SGLANG_PYTHON"


class SglangCommands(ExportFormat):
    """``python -m sglang.launch_server`` commands of the point, printed as one script."""

    name = "sglang"
    help = ("print `python -m sglang.launch_server` commands (with --check: parsed by SGLang's parser, from SGLang "
            f"importable or ${SGLANG_PYTHON_ENV})")

    def export(self, request: ExportRequest) -> Exported:
        point = request.point
        plan = sglang_plan(point.deployment, trial=point.trial, classes=request.classes, metrics=point.metrics)
        return Exported(point.trial, render_sglang(plan), plan=plan)

    def check(self, exported: Exported, request: ExportRequest) -> str:
        python = request.python or os.environ.get(SGLANG_PYTHON_ENV) or sys.executable
        try:
            problems = check_with_sglang(exported.plan, python)
        except (ImportError, OSError) as err:
            raise ParserMissing(f"--check --format sglang needs SGLang importable by {python} (pip install sglang, or "
                                f"set {SGLANG_PYTHON_ENV} to a Python that has it): {err}") from None
        if problems:
            raise InputError("SGLang rejects the exported flags: " + "; ".join(problems))
        return "# --check: SGLang's parser accepts every server's flags"
