"""Launch scripts for a front point, for vLLM 0.33 (``vllm serve``): one per node, plus a router.

Every searched value is written as chosen, never left to vLLM's per-GPU defaults: tensor and
pipeline parallelism, the weights (the checkpoint vLLM loads and its ``--quantization`` method, or
``--dtype``), ``--kv-cache-dtype``, ``--max-num-seqs``, ``--max-num-batched-tokens``, chunked
prefill on or off, ``--max-model-len``, ``--gpu-memory-utilization``, prefix caching,
``--speculative-config``, ``--scheduling-policy priority`` when the point schedules by priority
(its notes say how clients set each request's ``priority``) and, for prefill/decode disaggregation,
``--kv-transfer-config`` (NixlConnector). A point whose weights need a checkpoint that is not known is refused: an export
never holds a placeholder or a variable the user must set.

Instances are packed onto nodes by ``CUDA_VISIBLE_DEVICES``; each node gets its own script
(``node-N.sh``). Several replicas, or prefill and decode instances, sit behind the vLLM Router
(``pip install vllm-router``; vLLM's production router, with ``--vllm-pd-disaggregation`` for
NixlConnector P/D) started by ``router.sh`` with the policy the point was simulated with
(``--policy round_robin`` by default; :data:`ROUTER_POLICIES`). ``README.md`` gives the order to start them.

Everything that comes from a user (model and checkpoint ids, local paths, draft models, GPU names
of a hardware file) is passed through :func:`shlex.quote` in commands and stripped of control
characters in comments, so nothing in a workload can run as shell code.

Everything comes from the compiled deployment's record
(:class:`~servopt.costmodels.serving.compiled.DeploymentRecord`): the weights served, each role's
parallelism and limits (vLLM's defaults filled in where the deployment left a limit out) and where
each instance runs; the export derives none of them again.

Example:
    >>> from servopt.costmodels import Deployment, PerformanceProfile, get_gpu, get_model
    >>> from servopt.costmodels.serving import compile_deployment
    >>> gpu = get_gpu("h100")
    >>> d = Deployment(gpu="h100", tp=2, quantization="fp8", kv_cache_dtype="fp8", max_num_seqs=96,
    ...                max_num_batched_tokens=4096, max_model_len=8192)
    >>> record = compile_deployment(get_model("llama-3.1-8b"), d, gpu, PerformanceProfile.spec_default(gpu)).record()
    >>> print(launch_plan(record, trial=3)["instances"][0]["command"])  # doctest: +NORMALIZE_WHITESPACE
    CUDA_VISIBLE_DEVICES=0,1 vllm serve meta-llama/Llama-3.1-8B --port 8000 --tensor-parallel-size 2
    --quantization fp8 --kv-cache-dtype fp8 --max-num-seqs 96 --max-num-batched-tokens 4096
    --enable-chunked-prefill --max-model-len 8192 --gpu-memory-utilization 0.92 --enable-prefix-caching
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

from ..costmodels.architectures import config_files
from ..costmodels.engines.vllm import CURRENT_VLLM, DTYPES, parse_vllm_version
from ..costmodels.errors import InputError
from ..costmodels.escaping import dump_yaml, markdown_text
from ..costmodels.serving.compiled import (
    DECODE, PREFILL, REPLICA, DeploymentRecord, Placement, RoleRecord, WeightsRecord,
)
from ._format import Exported, ExportFormat, ExportRequest, ParserMissing

# The vLLM release the scripts are written for: the one servopt's defaults describe.
VLLM_VERSION = "{}.{}".format(*parse_vllm_version(CURRENT_VLLM)[:2])
BASE_PORT = 8000
NIXL_SIDE_CHANNEL_BASE_PORT = 5600
ROUTER_PORT = 8192
RAY_PORT = 6379
DP_RPC_PORT = 13345
ROUTER_INSTALL = "pip install vllm-router"


def comment(text: Any) -> str:
    """Text safe inside a ``#`` comment line: control characters (newlines first) become spaces."""
    return "".join(" " if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") else ch for ch in str(text))


def served_weights(record: DeploymentRecord, trial: int | None = None) -> WeightsRecord:
    """The weights a record serves; InputError for a record of an old job that named no checkpoint
    for a pre-quantized scheme."""
    if record.weights is None:
        scheme = record.quantization
        raise InputError(f"trial {trial} serves {scheme} weights but its record names no {scheme} checkpoint; "
                         "rerun servopt optimize (or servopt report) on the job to record it")
    return record.weights


def engine_args(record: DeploymentRecord, role: RoleRecord) -> list[str]:
    """The engine flags of one instance of a compiled ``role`` of ``record``, in a fixed order
    (the record's serving engine's :meth:`~servopt.costmodels.engines.EngineRules.launch_args`)."""
    served_weights(record)
    return record.spec.serving_engine.launch_args(record, role)


def shell_command(env: dict[str, str], program: list[str], args: list[str]) -> str:
    """One shell command line: every word quoted, so no value can be read as shell syntax."""
    words = [f"{k}={shlex.quote(v)}" for k, v in env.items()] + [shlex.quote(w) for w in [*program, *args]]
    return " ".join(words)


def data_parallel_nodes(dp: int, tp: int, gpus_per_node: int) -> list[list[str]]:
    """Extra flags per node of one instance whose data-parallel ranks fill more than a node (else one
    empty list): vLLM's multi-node data parallelism, the first node serving and the others headless.
    ``${head_address}`` is the first node's address, an argument of each node's script."""
    local = max(gpus_per_node // tp, 1)
    if dp <= local:
        return [[]]
    common = ["--data-parallel-size-local", str(local), "--data-parallel-address", "${head_address}",
              "--data-parallel-rpc-port", str(DP_RPC_PORT)]
    return [common + ([] if k == 0 else ["--headless", "--data-parallel-start-rank", str(k * local)])
            for k in range(-(-dp // local))]


# vLLM's --kv-transfer-config kv_role of each P/D role (NixlConnector).
KV_ROLES = {PREFILL: "kv_producer", DECODE: "kv_consumer"}


def compiled_instances(record: DeploymentRecord, trial: int | None = None) -> list[tuple[RoleRecord, Placement]]:
    """(role, placement) of every instance to start, in the fleet's order; InputError for a record
    of an old job that kept no compiled roles."""
    if not record.roles:
        raise InputError(f"trial {trial}: front.json has no compiled roles (it was written by an older "
                         "servopt); run servopt report on the job folder to write it again")
    return record.instances()


def priority_note(classes: list[dict[str, Any]] | None, flag: str = "--scheduling-policy priority",
                  otherwise: str = "under the default fcfs policy vLLM refuses any priority but 0") -> str:
    """How clients mark each request's priority when the server schedules by priority (``flag``),
    and what the server does with it ``otherwise``; names each tenant class's priority."""
    who = ""
    if classes:
        who = " As predicted, the workload's classes send: " + ", ".join(
            f"{c['name']} priority {c.get('priority', 0)}" for c in classes) + "."
    return (f"{flag}: each request carries its priority in the JSON body of /v1/completions and /v1/chat/completions "
            "as the integer field \"priority\" (lower is served first; default 0; with the OpenAI Python client: "
            f"extra_body={{\"priority\": 1}}); {otherwise}." + who)


def launch_plan(record: DeploymentRecord, *, trial: int | None = None, calibrated: bool = True,
                max_model_len_basis: str | None = None, classes: list[dict[str, Any]] | None = None,
                metrics: dict[str, float] | None = None, class_metrics: dict[str, float] | None = None) -> dict[str, Any]:
    """Every instance to start (with its node, ports and command), the router, and notes, as data.

    ``trial`` and ``metrics`` (the predicted costs and P99s, ``class_metrics`` per tenant class) are
    quoted in the scripts' headers; ``max_model_len_basis`` says where ``--max-model-len`` comes
    from; ``classes`` (the workload's tenant classes) are named in the priority note;
    ``calibrated`` False adds the UNCALIBRATED warning.
    """
    d = record.spec
    weights = served_weights(record, trial)
    model, kv_auto = weights.serve_id, weights.kv_cache_auto
    instances = []
    port, side_port = BASE_PORT, NIXL_SIDE_CHANNEL_BASE_PORT
    for role, place in compiled_instances(record, trial):
        tp, dp, kv_role = role.tp, role.data_parallel_size, KV_ROLES.get(role.role)
        env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, place.devices))}
        args = ["--port", str(port), *engine_args(record, role)]
        if kv_role:
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side_port)
            side_port += 1
            transfer = {"kv_connector": "NixlConnector", "kv_role": kv_role}
            args += ["--kv-transfer-config", json.dumps(transfer, separators=(",", ":"))]
        parts = data_parallel_nodes(dp, tp, place.gpus_per_node)
        for k, extra in enumerate(parts):
            nodes = [place.node + k] if len(parts) > 1 else place.nodes
            instances.append({"replica": place.replica, "role": role.role, "node": place.node + k, "nodes": nodes,
                              "port": port, "tp": tp, "pp": role.pp, "dp": dp // len(parts), "env": env,
                              "model": model, "args": args + extra,
                              "command": shell_command(env, ["vllm", "serve", model], args + extra)})
        port += 1
    simulated_router = d.router
    router = _router([i for i in instances if "--headless" not in i["args"]], d.disaggregation is not None,
                     record.num_nodes, simulated_router)
    notes = []
    if router and ROUTER_POLICIES[simulated_router] != simulated_router:
        notes.append(f"the latencies were predicted behind a {simulated_router} router, which the vLLM Router does not "
                     f"offer; router.sh starts its {router['policy']} policy (the less loaded of two replicas drawn "
                     "at random), whose tails may differ: predict again with router: power_of_two")
    if d.kv_cache_dtype == "auto" and kv_auto != "auto":
        notes.append(f"--kv-cache-dtype auto: {model} carries {kv_auto.upper()} KV-cache scales, so vLLM stores an "
                     f"{kv_auto} KV cache (as predicted)")
    if weights.config_source:
        notes.append(f"{model}: model config: {weights.config_source}")
    if max_model_len_basis:
        notes.append(f"--max-model-len {record.max_model_len}: {max_model_len_basis}")
    if d.scheduling_policy == "priority":
        notes.append(priority_note(classes))
    if not calibrated:
        notes.append(f"UNCALIBRATED: {d.gpu} has no calibration profile; its predictions rest on datasheet "
                     "defaults. Measure before relying on them (servopt calibrate run on that GPU).")
    return {"vllm_version": VLLM_VERSION, "trial": trial, "model": model, "gpu": d.gpu,
            "calibrated": calibrated, "replicas": d.replicas, "num_nodes": record.num_nodes, "instances": instances,
            "router": router, "notes": notes, "deployment": d.model_dump(mode="json"),
            "weights": weights.model_dump(mode="json"), "metrics": metrics or {},
            "class_metrics": class_metrics or {}}


# The vLLM Router's policy for each simulated router (costmodels/serving/router.py); least_outstanding
# has none, and the nearest (the less loaded of two) stands in for it, with a note.
ROUTER_POLICIES = {"round_robin": "round_robin", "power_of_two": "power_of_two", "least_outstanding": "power_of_two"}


def _router(instances: list[dict], disaggregated: bool, num_nodes: int, router: str) -> dict[str, Any] | None:
    """The vLLM Router in front of the instances (None for a single aggregated instance), with the
    policy the deployment was simulated with (``router``)."""
    if len(instances) == 1:
        return None
    # Multi-node deployments name each node's address on the router's command line ($1, $2, ...).
    def url(inst: dict) -> str:
        host = "127.0.0.1" if num_nodes == 1 else f"${{node{inst['node']}}}"
        return f"http://{host}:{inst['port']}"

    policy = ROUTER_POLICIES[router]
    if disaggregated:
        args = ["--vllm-pd-disaggregation"]
        for inst in instances:
            args += ["--prefill" if inst["role"] == PREFILL else "--decode", url(inst)]
        args += ["--prefill-policy", policy, "--decode-policy", policy]
    else:
        args = ["--worker-urls", *[url(inst) for inst in instances], "--policy", policy]
    args += ["--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    return {"program": "vllm-router", "args": args, "port": ROUTER_PORT, "install": ROUTER_INSTALL, "policy": policy}


# --- rendering ---------------------------------------------------------------------------------

def _header(plan: dict[str, Any], title: str) -> list[str]:
    m = plan["metrics"]
    gpus = sum(i["tp"] * i["pp"] * i.get("dp", 1) for i in plan["instances"])
    lines = ["#!/usr/bin/env bash",
             comment(f"# servopt export for vLLM {plan['vllm_version']}: trial {plan['trial']}, {plan['replicas']} "
                     f"replica(s) on {gpus} x {plan['gpu']} ({plan['num_nodes']} node(s)); {title}")]
    if not plan["calibrated"]:
        lines.append(comment(f"# UNCALIBRATED: no calibration profile for {plan['gpu']}; predictions rest on datasheet defaults"))
    if m:
        lines.append(f"# predicted: ${m['cost_usd_per_hour']:.2f}/hour, P99 TTFT {m['p99_ttft_s']:.3g} s, "
                     f"TPOT {m['p99_tpot_s']:.3g} s, e2e {m['p99_e2e_s']:.3g} s")
    by_class = plan.get("class_metrics") or {}
    if by_class:  # columns p99_<metric>_s[<class>]
        lines.append(comment("# predicted per class: " + ", ".join(
            f"{key.split('[', 1)[1][:-1]} P99 {key.split('_')[1].upper()} {value:.3g} s" for key, value in by_class.items())))
    lines += [comment(f"# NOTE: {note}") for note in plan["notes"]]
    lines += ["set -euo pipefail", 'cd -- "$(dirname -- "$0")"']
    return lines


def _usage(script: str, names: list[str]) -> list[str]:
    usage = comment(f"usage: {script} {' '.join(names)}")
    check = [f'if [ "$#" -ne {len(names)} ]; then echo {shlex.quote(usage)} >&2; exit 2; fi']
    return check + [f'{name.lower()}="${i + 1}"' for i, name in enumerate(names)]


def node_scripts(plan: dict[str, Any]) -> dict[str, str]:
    """``node-N.sh`` for every node, and ``router.sh`` when there is a router."""
    multi_node = plan["num_nodes"] > 1
    pd_multi_node = multi_node and any(i["role"] != REPLICA for i in plan["instances"])
    scripts = {}
    for node in range(plan["num_nodes"]):
        name = f"node-{node}.sh"
        here = [i for i in plan["instances"] if i["node"] == node]
        stage_of = [i for i in plan["instances"] if node in i["nodes"] and i["node"] != node]
        lines = _header(plan, f"node {node} of {plan['num_nodes']}")
        if stage_of:  # a pipeline stage of an instance whose head runs on an earlier node
            lines += _usage(name, ["HEAD_ADDRESS"])
            lines += [comment(f"# pipeline stage of the instance on node {stage_of[0]['node']} (port {stage_of[0]['port']}): "
                              "join its Ray cluster and wait"),
                      f'exec ray start --address="$head_address:{RAY_PORT}" --block']
            scripts[name] = "\n".join(lines) + "\n"
            continue
        if pd_multi_node:
            lines += _usage(name, ["NODE_ADDRESS"])
        data_parallel = any("--data-parallel-address" in i["args"] for i in here)
        if data_parallel:  # data-parallel ranks over nodes: every node names the first one
            lines += _usage(name, ["HEAD_ADDRESS"])
        if any(i["pp"] > 1 for i in here):
            lines.append(f"ray start --head --port={RAY_PORT}")
        lines.append("trap 'kill $(jobs -p) 2>/dev/null || true' EXIT")
        for inst in here:
            what = "" if inst["role"] == REPLICA else f", {inst['role']} instance"
            lines.append(comment(f"# replica {inst['replica']}{what}, port {inst['port']}"))
            prefix = 'VLLM_NIXL_SIDE_CHANNEL_HOST="$node_address" ' if pd_multi_node and inst["role"] != REPLICA else ""
            command = inst["command"].replace("'${head_address}'", '"$head_address"') if data_parallel else inst["command"]
            lines.append(f"{prefix}{command} > vllm-{inst['port']}.log 2>&1 &")
        lines += ['echo "started $(jobs -p | wc -l) vLLM instance(s); logs in $PWD/vllm-*.log"', "wait"]
        scripts[name] = "\n".join(lines) + "\n"
    router = plan["router"]
    if router:
        lines = _header(plan, f"the vLLM Router ({router['install']})")
        words = [shlex.quote(w) for w in [router["program"], *router["args"]]]
        if multi_node:
            lines += _usage("router.sh", [f"NODE{n}" for n in range(plan["num_nodes"])])
            # Node addresses come in as arguments; they are expanded inside double quotes only.
            words = [w if "${node" not in w else '"' + w.strip("'") + '"' for w in words]
        lines.append("exec " + " ".join(words))
        scripts["router.sh"] = "\n".join(lines) + "\n"
    return scripts


def render_readme(plan: dict[str, Any], scripts: dict[str, str]) -> str:
    """The order to start the scripts, and what each one needs."""
    d, weights = plan["deployment"], plan["weights"]
    md = markdown_text
    lines = [f"# vLLM launch scripts: trial {plan['trial']} ({md(plan['model'])} on {md(plan['gpu'])})", ""]
    if not plan["calibrated"]:
        lines += [f"**UNCALIBRATED**: no calibration profile for {md(plan['gpu'])}; the predictions behind this "
                  "deployment rest on datasheet defaults.", ""]
    lines += [f"vLLM {plan['vllm_version']}; {plan['replicas']} replica(s), {len(plan['instances'])} instance(s) on "
              f"{plan['num_nodes']} node(s) of {md(plan['gpu'])}; weights: {md(weights['scheme'])}, KV cache "
              f"{md(d['kv_cache_dtype'])}.",
              "", "Start order:", ""]
    step = 1
    multi_node = plan["num_nodes"] > 1
    for name in sorted(s for s in scripts if s.startswith("node-")):
        node = int(name.split("-")[1].split(".")[0])
        args, why = "", ""
        if "HEAD_ADDRESS" in scripts[name]:
            args, why = " HEAD_ADDRESS", (" (HEAD_ADDRESS: the address of the instance's first node)"
                                          if "--data-parallel-address" in scripts[name]
                                          else " (HEAD_ADDRESS: the address of the node running the stage's head)")
        elif "NODE_ADDRESS" in scripts[name]:
            args, why = " NODE_ADDRESS", " (NODE_ADDRESS: this node's address, reachable by the others for the KV transfer)"
        where = f"on node {node}" if multi_node else "on the GPU machine"
        lines.append(f"{step}. `bash {name}{args}` {where}{why}.")
        step += 1
    if "router.sh" in scripts:
        nodes = "".join(f" NODE{n}" for n in range(plan["num_nodes"])) if multi_node else ""
        lines.append(f"{step}. When every instance answers on /health, `bash router.sh{nodes}` (needs "
                     f"`{ROUTER_INSTALL}`; NODEn: the address of node n); clients talk to port {ROUTER_PORT}.")
    else:
        lines.append(f"Clients talk to port {plan['instances'][0]['port']}.")
    lines += ["", "Notes:", ""] + [f"- {md(note)}" for note in plan["notes"]] if plan["notes"] else []
    return "\n".join(lines) + "\n"


def render_shell(plan: dict[str, Any]) -> str:
    """A single-node plan as one script (what ``servopt export`` prints); multi-node plans have
    one script per node (:func:`node_scripts`)."""
    scripts = node_scripts(plan)
    if plan["num_nodes"] != 1 or "router.sh" in scripts:
        raise InputError("this deployment needs several scripts (nodes or a router); write them with --out")
    return scripts["node-0.sh"]


# --- checking with vLLM's own parser -----------------------------------------------------------

VLLM_PYTHON_ENV = "SERVOPT_VLLM_PYTHON"
_CHECKER = Path(__file__).with_name("_vllm_check.py")


def serve_commands(scripts: dict[str, str], configs: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The ``vllm serve`` commands of the scripts, as the shell will split them (environment
    assignments and redirections dropped), for :func:`check_with_vllm`, with the config files of
    the models they serve (:func:`with_configs`)."""
    commands = []
    for name, text in scripts.items():
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("#") or "vllm serve" not in line:
                continue
            words = shlex.split(line, comments=True)
            start = words.index("vllm")
            argv = []
            for word in words[start:]:
                if word in ("&", ">", "2>&1") or word.startswith(("vllm-", ">")) and word.endswith(".log"):
                    break
                argv.append(word)
            commands.append({"label": f"{name} line {number}", "argv": argv})
    return with_configs(commands, configs)


def with_configs(commands: list[dict[str, Any]], configs: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Each command with the config files of the model it serves when ``configs`` (model id ->
    ``ConfigFiles``) has them, so the checker reads them as vLLM does."""
    out = []
    for command in commands:
        argv = command["argv"]
        files = (configs or {}).get(argv[2]) if len(argv) > 2 else None
        if files is not None:
            command = {**command, "config": files.config, "hf_quant_config": files.hf_quant_config,
                       "quantization_from": files.quantization_from}
        out.append(command)
    return out


def find_vllm_python(explicit: str | None = None) -> str | None:
    """A Python that can import vLLM: ``explicit``, ``$SERVOPT_VLLM_PYTHON``, this interpreter,
    or the ``.vllm-venv`` of the working directory or of this checkout."""
    candidates = [explicit, os.environ.get(VLLM_PYTHON_ENV)]
    if importlib.util.find_spec("vllm") is not None:
        candidates.append(sys.executable)
    for root in (Path.cwd(), Path(__file__).resolve().parents[1]):
        candidates.append(str(root / ".vllm-venv" / "bin" / "python"))
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def check_with_vllm(scripts: dict[str, str], python: str | None = None, timeout_s: float = 600,
                    configs: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """Parse every ``vllm serve`` command of the scripts with vLLM's own ``vllm serve`` parser, in
    the Python ``find_vllm_python`` finds, and check the ``--max-model-len`` and ``--quantization``
    of each command whose model's config files ``configs`` holds against vLLM's reading of them
    (``_vllm_check.py``); returns (vLLM version, problems). Raises InputError when no Python with
    vLLM is found."""
    return check_commands_with_vllm(serve_commands(scripts, configs), python, timeout_s)


def check_commands_with_vllm(commands: list[dict[str, Any]], python: str | None = None,
                             timeout_s: float = 600) -> tuple[str, list[str]]:
    """:func:`check_with_vllm` for commands already split into words (``{"label", "argv"}``, and
    ``config`` with ``hf_quant_config`` and ``quantization_from`` where known)."""
    interpreter = find_vllm_python(python)
    if interpreter is None:
        raise ParserMissing(f"--check needs vLLM: install it in a separate environment (python3 -m venv .vllm-venv && "
                         f"VLLM_TARGET_DEVICE=cpu .vllm-venv/bin/pip install vllm=={VLLM_VERSION}.0) or name its "
                         f"Python with --vllm-python or {VLLM_PYTHON_ENV}")
    try:
        done = subprocess.run([interpreter, str(_CHECKER)], input=json.dumps(commands),
                              capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise InputError(f"--check: vLLM's parser did not answer within {timeout_s:.0f} s ({interpreter})") from None
    try:
        result = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InputError(f"--check: {interpreter} could not run vLLM's parser: {last}") from None
    return result["vllm_version"], result["problems"]


# --- the formats of vLLM's launch plan -----------------------------------------------------------

def front_plan(request: ExportRequest) -> dict[str, Any]:
    """The launch plan of the request's front point (calibration, ``--max-model-len`` basis and
    the tenant classes as front.json records them)."""
    front, point = request.front, request.point
    gpu = point.deployment.spec.gpu
    calibrated = bool(front.get("gpus", {}).get(gpu, {}).get("calibrated", point.profile_calibrated))
    basis = (front.get("max_model_len") or {}).get(point.model, {}).get("basis")
    return launch_plan(point.deployment, trial=point.trial, calibrated=calibrated, max_model_len_basis=basis,
                       classes=request.classes, metrics=point.metrics, class_metrics=point.class_metrics)


def served_configs(plan: dict) -> dict:
    """Model id -> the config files vLLM would read for it (``config_files``), for each model the plan serves."""
    served = {instance["model"] for instance in plan["instances"]}
    return {model: files for model in served if (files := config_files(model)) is not None}


def configs_checked(plan: dict, configs: dict) -> str:
    """What ``--check`` compared with vLLM's own reading of the served models' configs."""
    served = {instance["model"] for instance in plan["instances"]}
    by = {kind: [m for m, files in configs.items() if files.quantization_from == kind] for kind in ("config", "card")}
    return (f"--max-model-len checked against vLLM's reading of the config of {len(configs)}/{len(served)} model(s), "
            f"--quantization against the method vLLM picks for {len(by['config'])} checkpoint(s) by their own "
            f"metadata and {len(by['card'])} by the metadata their cards state")


class VllmScripts(ExportFormat):
    """``vllm serve`` launch scripts: node-N.sh per node, router.sh, README.md and plan.json."""

    name = "vllm"
    help = "vllm serve launch scripts, one per node, with README.md and plan.json (the default)"
    marker = "plan.json"
    file_names = re.compile(r"node-[0-9]+\.sh|router\.sh|README\.md|plan\.json")
    heads = (re.compile(r"^#!/usr/bin/env bash\n# servopt export for vLLM [^:\n]*: trial ([0-9]+)"),
             re.compile(r"^# vLLM launch scripts: trial ([0-9]+) "),
             re.compile(r'^\{\n  "vllm_version": "[^"\n]*",\n  "trial": ([0-9]+),'))
    takes_vllm_python = True

    def export(self, request: ExportRequest) -> Exported:
        plan = front_plan(request)
        scripts = node_scripts(plan)
        readme = render_readme(plan, scripts)
        files = {name: scripts[name] for name in sorted(scripts)}
        files.update({"README.md": readme, "plan.json": PlanJson.render(plan)})
        shown = scripts["node-0.sh"] if list(scripts) == ["node-0.sh"] else readme
        return Exported(plan["trial"], shown, files, frozenset(scripts), plan, scripts)

    def check(self, exported: Exported, request: ExportRequest) -> str:
        plan, scripts = exported.plan, exported.parts
        configs = served_configs(plan)
        version, problems = check_with_vllm(scripts, request.python, configs=configs)
        if problems:
            raise InputError("vLLM rejects the exported flags: " + "; ".join(problems))
        count = sum(text.count("vllm serve") for text in scripts.values())
        return (f"# --check: vLLM {version}'s `vllm serve` parser accepts all {count} command(s); "
                f"{configs_checked(plan, configs)}")


class PlanJson(VllmScripts):
    """The launch plan as JSON, printed (``--check`` parses its commands as the scripts' are)."""

    name = "json"
    help = "print the launch plan as JSON"
    marker = file_names = None
    heads = ()
    takes_vllm_python = False

    @staticmethod
    def render(plan: dict[str, Any]) -> str:
        return json.dumps(plan, indent=2) + "\n"

    def export(self, request: ExportRequest) -> Exported:
        plan = front_plan(request)
        return Exported(plan["trial"], self.render(plan), plan=plan, parts=node_scripts(plan))


class PlanYaml(PlanJson):
    """The launch plan as YAML, printed."""

    name = "yaml"
    help = "print the launch plan as YAML"

    @staticmethod
    def render(plan: dict[str, Any]) -> str:
        return dump_yaml(plan)
