"""Launch commands for a front point, for vLLM 0.33 (``vllm serve``).

Every searched value is written as chosen, never left to vLLM's per-GPU defaults: tensor,
pipeline and data parallelism with expert parallelism, weights (``--quantization``, or the pre-quantized checkpoint it needs),
``--kv-cache-dtype``, ``--max-num-seqs``, ``--max-num-batched-tokens``, chunked prefill on or off,
``--max-model-len``, ``--gpu-memory-utilization``, prefix caching, ``--speculative-config`` and,
for prefill/decode disaggregation, ``--kv-transfer-config`` (NixlConnector) with one command per
role plus the proxy. Replicas are packed onto nodes by ``CUDA_VISIBLE_DEVICES``; data-parallel ranks
beyond one node get one command per node (the first serves, the others run ``--headless``).

Example:
    >>> point = {"trial": 3, "serve_id": "meta-llama/Llama-3.1-8B-Instruct", "deployment": {
    ...     "gpu": "h100", "tp": 2, "pp": 1, "replicas": 1, "quantization": "fp8", "kv_cache_dtype": "fp8",
    ...     "max_num_seqs": 96, "max_num_batched_tokens": 4096, "enable_chunked_prefill": True,
    ...     "enable_prefix_caching": True, "gpu_memory_utilization": 0.92, "max_model_len": 8192,
    ...     "speculative": None, "disaggregation": None}}
    >>> plan = launch_plan(point, {})
    >>> print(plan["instances"][0]["command"])  # doctest: +NORMALIZE_WHITESPACE
    CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000 --tensor-parallel-size 2
    --quantization fp8 --kv-cache-dtype fp8 --max-num-seqs 96 --max-num-batched-tokens 4096
    --enable-chunked-prefill --max-model-len 8192 --gpu-memory-utilization 0.92 --enable-prefix-caching
"""

from __future__ import annotations

import json
import shlex
from typing import Any

VLLM_VERSION = "0.33"
# vLLM's names for the weight schemes; int8 W8A8 is only served from compressed-tensors checkpoints.
VLLM_QUANTIZATION = {"fp8": "fp8", "int8": "compressed-tensors", "awq": "awq_marlin", "gptq": "gptq_marlin"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
NEEDS_CHECKPOINT = ("int8", "awq", "gptq")
BASE_PORT = 8000
NIXL_SIDE_CHANNEL_BASE_PORT = 5600
DP_RPC_PORT = 13345
PROXY_PORT = 8192
# The proxy is a script in vLLM's source tree (not in the wheel), as in vLLM's NixlConnector docs.
PROXY_SCRIPT = "tests/v1/kv_connector/nixl_integration/toy_proxy_server.py"


def _checkpoint_note(scheme: str, serve_id: str, checkpoints: dict[str, str | None]) -> tuple[str, str | None]:
    """The model argument and, when a checkpoint is missing, the note saying so plainly."""
    given = checkpoints.get(scheme)
    if given:
        return given, None
    if scheme in NEEDS_CHECKPOINT and scheme not in serve_id.lower() and not (scheme == "int8" and "w8a8" in serve_id.lower()):
        variable = f"SERVOPT_{scheme.upper()}_CHECKPOINT"
        what = {"int8": "an INT8 W8A8 (compressed-tensors)", "awq": "an AWQ INT4", "gptq": "a GPTQ INT4"}[scheme]
        note = (f"{scheme} weights need a pre-quantized checkpoint: vLLM cannot quantize to {scheme} at launch. "
                f"Set {variable} to {what} checkpoint of {serve_id} (or set checkpoints.{scheme} in the workload).")
        return f"${{{variable}:?set {variable} to {what} checkpoint of {serve_id}}}", note
    return serve_id, None


def speculative_config(spec: dict[str, Any]) -> dict[str, Any]:
    """The JSON of ``--speculative-config`` for vLLM 0.33."""
    config: dict[str, Any] = {"method": spec["method"], "num_speculative_tokens": spec["num_speculative_tokens"]}
    if spec["method"] == "ngram":
        config["prompt_lookup_max"] = max(spec["num_speculative_tokens"], 4)
    if spec.get("draft_model"):
        config["model"] = spec["draft_model"]
    if spec.get("draft_tp"):
        config["draft_tensor_parallel_size"] = spec["draft_tp"]
    return config


def engine_args(d: dict[str, Any], tp: int, max_num_seqs: int, max_num_batched_tokens: int) -> list[str]:
    """The engine flags of one instance, in a fixed order."""
    args = ["--tensor-parallel-size", str(tp)]
    if d["pp"] > 1:
        args += ["--pipeline-parallel-size", str(d["pp"])]
    if d.get("data_parallel_size", 1) > 1:
        args += ["--data-parallel-size", str(d["data_parallel_size"])]
    if d.get("enable_expert_parallel"):
        args.append("--enable-expert-parallel")
    if d.get("all2all_backend"):
        args += ["--all2all-backend", d["all2all_backend"]]
    scheme = d["quantization"]
    if scheme in VLLM_QUANTIZATION:
        args += ["--quantization", VLLM_QUANTIZATION[scheme]]
    elif scheme in DTYPES:
        args += ["--dtype", DTYPES[scheme]]
    args += ["--kv-cache-dtype", d["kv_cache_dtype"], "--max-num-seqs", str(max_num_seqs),
             "--max-num-batched-tokens", str(max_num_batched_tokens)]
    args.append("--enable-chunked-prefill" if d["enable_chunked_prefill"] else "--no-enable-chunked-prefill")
    args += ["--max-model-len", str(d["max_model_len"]), "--gpu-memory-utilization", f"{d['gpu_memory_utilization']:g}"]
    args.append("--enable-prefix-caching" if d["enable_prefix_caching"] else "--no-enable-prefix-caching")
    if d.get("speculative"):
        args += ["--speculative-config", json.dumps(speculative_config(d["speculative"]), separators=(",", ":"))]
    return args


def data_parallel_nodes(dp: int, tp: int, gpus_per_node: int, head_node: int) -> list[list[str]]:
    """Extra flags per node of one instance whose data-parallel ranks fill more than a node (else one
    empty list): vLLM's multi-node data parallelism, the head node serving and the others headless."""
    local = max(gpus_per_node // tp, 1)
    if dp <= local:
        return [[]]
    common = ["--data-parallel-size-local", str(local), "--data-parallel-address", f"node{head_node}",
              "--data-parallel-rpc-port", str(DP_RPC_PORT)]
    return [common + ([] if k == 0 else ["--headless", "--data-parallel-start-rank", str(k * local)])
            for k in range(-(-dp // local))]


def _shell(env: dict[str, str], model: str, args: list[str]) -> str:
    # The model may be a ${VAR:?...} expansion, which must stay unquoted-expandable.
    model_text = f'"{model}"' if model.startswith("${") else shlex.quote(model)
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (prefix + " " if prefix else "") + "vllm serve " + model_text + " " + " ".join(shlex.quote(a) for a in args)


def instance_roles(d: dict[str, Any]) -> list[tuple[str, int, int, int, int]]:
    """(role, instances per replica, tp, max_num_seqs, max_num_batched_tokens) of each kind of server."""
    dis = d.get("disaggregation")
    if not dis:
        return [("serve", 1, d["tp"], d["max_num_seqs"], d["max_num_batched_tokens"])]
    return [(role, dis[f"{role}_instances"], dis[f"{role}_tp"], dis.get(f"{role}_max_num_seqs") or d["max_num_seqs"],
             dis.get(f"{role}_max_num_batched_tokens") or d["max_num_batched_tokens"]) for role in ("prefill", "decode")]


def commands_by_node(instances: list[dict[str, Any]]) -> list[str]:
    """Each server's command in the background, under a comment per node."""
    lines, node = [], None
    for inst in instances:
        if inst["node"] != node:
            node = inst["node"]
            lines.append(f"# --- node {node} ---")
        lines.append(inst["command"] + " &")
    return lines


def launch_plan(point: dict[str, Any], checkpoints: dict[str, str | None], gpus_per_node: int = 8) -> dict[str, Any]:
    """Every instance to start (with its command), the proxy, and notes, as plain data."""
    d = point["deployment"]
    model, note = _checkpoint_note(d["quantization"], point["serve_id"], checkpoints)
    dis = d.get("disaggregation")
    roles = [(*role, kv_role) for role, kv_role in zip(instance_roles(d), ("kv_producer", "kv_consumer") if dis else (None,))]
    instances, proxies = [], []
    node, next_gpu, port, side_port = 0, 0, BASE_PORT, NIXL_SIDE_CHANNEL_BASE_PORT
    for replica in range(d["replicas"]):
        group: dict[str, list[tuple[int, int]]] = {"prefill": [], "decode": []}
        for role, count, tp, seqs, tokens, kv_role in roles:
            dp = d.get("data_parallel_size", 1) if role == "serve" else 1
            gpus = tp * d["pp"] * dp
            for _ in range(count):
                if next_gpu + min(gpus, gpus_per_node) > gpus_per_node:
                    node, next_gpu = node + 1, 0
                host_node = node
                devices = ",".join(str(next_gpu + i) for i in range(min(gpus, gpus_per_node)))
                if gpus >= gpus_per_node:  # whole nodes; pipeline stages span the next ones
                    node, next_gpu = node + -(-gpus // gpus_per_node), 0
                else:
                    next_gpu += gpus
                env = {"CUDA_VISIBLE_DEVICES": devices}
                args = ["--port", str(port), *engine_args(d, tp, seqs, tokens)]
                if kv_role:
                    env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side_port)
                    side_port += 1
                    transfer = {"kv_connector": "NixlConnector", "kv_role": kv_role}
                    args += ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))]
                    group[role].append((host_node, port))
                parts = data_parallel_nodes(dp, tp, gpus_per_node, host_node)
                for k, extra in enumerate(parts):
                    instances.append({"replica": replica, "role": role, "node": host_node + k, "port": port, "tp": tp,
                                      "pp": d["pp"], "dp": dp // len(parts), "env": env, "model": model,
                                      "args": args + extra, "command": _shell(env, model, args + extra)})
                port += 1
        if dis:
            proxy_args = ["--port", str(PROXY_PORT + replica),
                          "--prefiller-hosts", *[f"node{n}" for n, _ in group["prefill"]],
                          "--prefiller-ports", *[str(p) for _, p in group["prefill"]],
                          "--decoder-hosts", *[f"node{n}" for n, _ in group["decode"]],
                          "--decoder-ports", *[str(p) for _, p in group["decode"]]]
            proxies.append({"replica": replica, "args": proxy_args,
                            "command": "python " + PROXY_SCRIPT + " " + " ".join(shlex.quote(a) for a in proxy_args)})
    notes = [note] if note else []
    if d["pp"] > 1:
        notes.append(f"pp={d['pp']} spans {d['pp']} nodes per instance: start a Ray cluster over them first and run "
                     "the command on its head node (vLLM's multi-node serving docs).")
    if dis:
        notes.append("nodeN in the proxy commands stands for the host of node N; across hosts also set "
                     "VLLM_NIXL_SIDE_CHANNEL_HOST on each instance. The proxy script is in vLLM's source tree.")
    if any("--headless" in i["args"] for i in instances):
        notes.append("data-parallel ranks span nodes: nodeN in --data-parallel-address stands for the host of node N "
                     "(vLLM's multi-node data-parallel docs); only the first node of an instance serves requests.")
    if d["replicas"] > 1 or sum("--headless" not in i["args"] for i in instances) > 1:
        notes.append(f"{d['replicas']} replicas: put a load balancer in front of the "
                     + ("proxies." if dis else "instances' ports."))
    return {"vllm_version": VLLM_VERSION, "trial": point["trial"], "model": model, "gpu": d["gpu"],
            "replicas": d["replicas"], "num_nodes": node + (1 if next_gpu else 0), "instances": instances,
            "proxies": proxies, "notes": notes, "deployment": d, "metrics": point.get("metrics", {})}


def render_shell(plan: dict[str, Any]) -> str:
    """The plan as a commented shell script."""
    m = plan["metrics"]
    lines = [
        f"# servopt export for vLLM {plan['vllm_version']}: trial {plan['trial']}, {plan['replicas']} replica(s) on "
        f"{sum(i['tp'] * i['pp'] * i.get('dp', 1) for i in plan['instances'])} x {plan['gpu']} ({plan['num_nodes']} node(s))",
    ]
    if m:
        lines.append(f"# predicted: ${m['cost_usd_per_hour']:.2f}/hour, P99 TTFT {m['p99_ttft_s']:.3g} s, "
                     f"TPOT {m['p99_tpot_s']:.3g} s, e2e {m['p99_e2e_s']:.3g} s")
    lines += [f"# NOTE: {note}" for note in plan["notes"]]
    lines += commands_by_node(plan["instances"])
    for proxy in plan["proxies"]:
        lines.append(f"# proxy of replica {proxy['replica']}")
        lines.append(proxy["command"] + " &")
    lines.append("wait")
    return "\n".join(lines) + "\n"


def check_with_vllm(plan: dict[str, Any]) -> list[str]:
    """Parse each instance's flags with vLLM's own EngineArgs parser; returns the problems found.

    Raises ImportError when vLLM is not installed. Without a GPU, vLLM imports only as a CPU
    build, so ``VLLM_TARGET_DEVICE=cpu`` is set unless the caller set it.
    """
    import os
    import shutil

    if not shutil.which("nvidia-smi"):
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.engine.arg_utils import EngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM <= 0.11
        from vllm.utils import FlexibleArgumentParser
    problems = []
    for inst in plan["instances"]:
        args = [a for a in inst["args"]]
        port = args.index("--port")
        del args[port:port + 2]  # server flags, not engine flags
        args = [a for a in args if a != "--headless"]
        model = inst["model"] if not inst["model"].startswith("${") else "placeholder/pre-quantized-checkpoint"
        parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
        try:
            namespace = parser.parse_args(["--model", model, *args])
            EngineArgs.from_cli_args(namespace)
        except SystemExit:
            problems.append(f"{inst['role']} instance on port {inst['port']}: vLLM's parser rejected: {' '.join(args)}")
        except (TypeError, ValueError) as err:
            problems.append(f"{inst['role']} instance on port {inst['port']}: {err}")
        problems += _deep_checks(inst)
    return problems


def _deep_checks(inst: dict[str, Any]) -> list[str]:
    """What argparse accepts but vLLM rejects later: unknown quantization methods, connectors, keys."""
    problems = []
    args = inst["args"]
    if "--quantization" in args:
        from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

        method = args[args.index("--quantization") + 1]
        if method not in QUANTIZATION_METHODS:
            problems.append(f"--quantization {method} is not one of vLLM's methods")
    if "--kv-transfer-config" in args:
        from vllm.config import KVTransferConfig

        try:
            KVTransferConfig(**json.loads(args[args.index("--kv-transfer-config") + 1]))
        except (TypeError, ValueError) as err:
            problems.append(f"--kv-transfer-config: {err}")
    return problems
