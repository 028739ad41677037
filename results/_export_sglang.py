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

Example:
    >>> point = {"trial": 3, "model": "llama-3.1-8b", "serve_id": "meta-llama/Llama-3.1-8B-Instruct", "deployment": {
    ...     "gpu": "h100", "tp": 2, "pp": 1, "replicas": 1, "quantization": "fp8", "kv_cache_dtype": "fp8",
    ...     "max_num_seqs": 96, "max_num_batched_tokens": 4096, "enable_chunked_prefill": True,
    ...     "enable_prefix_caching": True, "gpu_memory_utilization": 0.92, "max_model_len": 8192,
    ...     "speculative": None, "disaggregation": None},
    ...     "roles": [{"role": "replica", "instances_per_replica": 1, "tp": 2, "pp": 1, "data_parallel_size": 1,
    ...                "max_num_seqs": 96, "max_num_batched_tokens": 4096, "weights_bytes_per_gpu": 4.6e9,
    ...                "kv_cache_bytes_per_gpu": 73.5e9, "gpu_memory_bytes": 85.9e9}]}
    >>> plan = sglang_plan(point)
    >>> print(plan["instances"][0]["command"])  # doctest: +NORMALIZE_WHITESPACE
    CUDA_VISIBLE_DEVICES=0,1 python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct
    --port 8000 --tp-size 2 --quantization fp8 --kv-cache-dtype fp8_e4m3 --max-running-requests 96
    --chunked-prefill-size 4096 --context-length 8192 --mem-fraction-static 0.909
"""

from __future__ import annotations

from typing import Any

from ..costmodels.architectures import resolve_model
from ..costmodels.errors import InputError
from ._export import BASE_PORT, _weights, comment, compiled_roles, priority_note, shell_command

ROUTER_PORT = 8192
KV_DTYPES = {"auto": "auto", "fp8": "fp8_e4m3"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
SPECULATIVE_ALGORITHMS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "EAGLE", "ngram": "NGRAM",
                          "draft_model": "STANDALONE"}


def _memory_fraction(role: dict[str, Any]) -> float | None:
    """Share of GPU memory for the weights plus the KV pool of the compiled role's memory plan (None
    when the trial did not record it)."""
    if "gpu_memory_bytes" not in role:
        return None
    return round((role["weights_bytes_per_gpu"] + role["kv_cache_bytes_per_gpu"]) / role["gpu_memory_bytes"], 3)


# SGLang's default --priority-scheduling-preemption-threshold: a waiting request whose priority is
# more than this above a running one's preempts it.
SGLANG_PRIORITY_PREEMPTION_THRESHOLD = 10


def sglang_args(point: dict[str, Any], d: dict[str, Any], role: dict[str, Any], moe: bool,
                priority_span: int = 0) -> list[str]:
    """SGLang's server flags for one instance of a compiled ``role`` (after ``--model-path`` and
    ``--port``), in a fixed order (``priority_span``: the largest difference between the classes'
    priorities)."""
    tp, dp = role["tp"], role["data_parallel_size"]
    ep = d.get("enable_expert_parallel", False) and moe
    if moe and dp > 1:
        args = ["--tp-size", str(tp * dp), "--dp-size", str(dp), "--enable-dp-attention"]
    else:
        args = ["--tp-size", str(tp)] + (["--dp-size", str(dp)] if dp > 1 else [])
    if ep:
        args += ["--ep-size", str(tp * dp)]
    if role["pp"] > 1:
        args += ["--pp-size", str(role["pp"])]
    scheme = d["quantization"]
    if scheme == "fp8" and (point.get("weights") or {}).get("serve_id", point["serve_id"]) == point["serve_id"]:
        args += ["--quantization", "fp8"]  # a 16-bit checkpoint quantized at load
    elif scheme in DTYPES:
        args += ["--dtype", DTYPES[scheme]]
    args += ["--kv-cache-dtype", KV_DTYPES[d["kv_cache_dtype"]], "--max-running-requests", str(role["max_num_seqs"]),
             "--chunked-prefill-size", str(role["max_num_batched_tokens"] if d["enable_chunked_prefill"] else -1),
             "--context-length", str(d["max_model_len"])]
    fraction = _memory_fraction(role)
    args += ["--mem-fraction-static", f"{fraction if fraction is not None else d['gpu_memory_utilization']:g}"]
    if not d["enable_prefix_caching"]:
        args.append("--disable-radix-cache")
    if d.get("scheduling_policy") == "priority":
        args += ["--enable-priority-scheduling", "--schedule-low-priority-values-first"]
        if priority_span >= SGLANG_PRIORITY_PREEMPTION_THRESHOLD:  # vLLM never preempts for a waiting request
            args += ["--priority-scheduling-preemption-threshold", str(priority_span + 1)]
    spec = d.get("speculative")
    if spec:
        g = spec["num_speculative_tokens"]
        args += ["--speculative-algorithm", SPECULATIVE_ALGORITHMS[spec["method"]], "--speculative-num-steps", str(g),
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(g + 1)]
        if spec.get("draft_model"):
            args += ["--speculative-draft-model-path", spec["draft_model"]]
    return args


def sglang_plan(point: dict[str, Any], gpus_per_node: int = 8, classes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """Every SGLang server to start (with its command), the PD router, and notes, as plain data
    (``classes``: the workload's tenant classes, for priority scheduling)."""
    d = point["deployment"]
    priorities = [c.get("priority", 0) for c in classes or []]
    span = max(priorities) - min(priorities) if priorities else 0
    model = _weights(point)[0]
    try:
        moe = resolve_model(point.get("model") or point["serve_id"]).spec.moe is not None
    except InputError:
        moe = False
    dis = d.get("disaggregation")
    instances, routers, notes = [], [], []
    node, next_gpu, port = 0, 0, BASE_PORT
    for replica in range(d["replicas"]):
        urls: dict[str, list[str]] = {"prefill": [], "decode": []}
        for label, role in compiled_roles(point).items():
            gpus = role["tp"] * role["pp"] * role["data_parallel_size"]
            if gpus > gpus_per_node:
                raise InputError(f"trial {point['trial']}: {gpus} GPUs per SGLang server span nodes; export it for "
                                 "vLLM (servopt export --format vllm), whose multi-node commands servopt writes")
            for _ in range(role["instances_per_replica"]):
                if next_gpu + gpus > gpus_per_node:
                    node, next_gpu = node + 1, 0
                env = {"CUDA_VISIBLE_DEVICES": ",".join(str(next_gpu + i) for i in range(gpus))}
                next_gpu += gpus
                args = ["--model-path", model, "--port", str(port),
                        *sglang_args(point, d, role, moe, span)]
                if label != "serve":
                    args += ["--disaggregation-mode", label, "--disaggregation-transfer-backend", "nixl"]
                    urls[label].append(f"http://node{node}:{port}")
                instances.append({"replica": replica, "role": label, "node": node, "port": port, "gpus": gpus,
                                  "env": env, "args": args,
                                  "command": shell_command(env, ["python", "-m", "sglang.launch_server"], args)})
                port += 1
        if dis:
            router = ["--pd-disaggregation", *[a for url in urls["prefill"] for a in ("--prefill", url)],
                      *[a for url in urls["decode"] for a in ("--decode", url)], "--port", str(ROUTER_PORT + replica)]
            routers.append({"replica": replica, "args": router,
                            "command": shell_command({}, ["python", "-m", "sglang_router.launch_router"], router)})
    notes.append("latencies were predicted for vLLM; SGLang's kernels and scheduler differ, so measure before relying "
                 "on them")
    if dis:
        notes.append("nodeN in the router commands stands for the host of node N (pip install sglang-router).")
    if d["replicas"] > 1:
        notes.append(f"{d['replicas']} replicas: put a load balancer in front of the "
                     + ("routers." if dis else "servers' ports."))
    if d.get("scheduling_policy") == "priority":
        notes.append(priority_note(classes, "--enable-priority-scheduling --schedule-low-priority-values-first",
                                   "without --enable-priority-scheduling SGLang ignores it"))
        kept = ("raised here above the classes' span of " if span >= SGLANG_PRIORITY_PREEMPTION_THRESHOLD
                else "above the classes' span of ")
        notes.append("the priority predictions are vLLM's, which never preempts a running request for a waiting one: "
                     "SGLang does when the waiting one's priority is more than --priority-scheduling-preemption-threshold "
                     f"(default {SGLANG_PRIORITY_PREEMPTION_THRESHOLD}; {kept}{span}) better; and under KV pressure it "
                     "retracts by length unless --retraction-policy priority (recent releases)")
    return {"framework": "sglang", "trial": point["trial"], "model": model, "gpu": d["gpu"],
            "replicas": d["replicas"], "num_nodes": node + 1, "instances": instances, "routers": routers,
            "notes": notes, "deployment": d, "metrics": point.get("metrics", {})}


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
