"""Kubernetes manifests for a front point: the same ``vllm serve`` arguments as the launch scripts.

Built on the launch plan (:func:`~servopt.results._export.launch_plan`), so every container runs
exactly the engine arguments ``node-N.sh`` would, with one change: each pod has its own address, so
every instance listens on :data:`CONTAINER_PORT`. Per role of the compiled deployment (``replica``,
``prefill``, ``decode``):

- a ``Deployment`` whose pods each run one vLLM instance, or a ``LeaderWorkerSet``
  (kubernetes-sigs/lws, ``leaderworkerset.x-k8s.io/v1``) where one instance spans nodes: pipeline
  stages over nodes join the leader's Ray cluster as the launch scripts' ``node-N.sh`` do, and
  data-parallel ranks over nodes start headless with their first rank from ``LWS_WORKER_INDEX``;
- the GPUs as ``nvidia.com/gpu`` limits (``amd.com/gpu`` for AMD), a required node affinity on NVIDIA
  GPU feature discovery's ``nvidia.com/gpu.product`` label (:data:`GPU_NVML_NAMES`), or the
  user's own ``node_selector``;
- probes on vLLM's ``/health`` (``vllm/entrypoints/serve/instrumentator/health.py@v0.33.0``: 200 while
  the engine runs, 503 once it died; the API server binds its port only after the engine started,
  hence the startup probe's long budget), a memory-backed ``/dev/shm`` and CPU requests;
- a ``Service`` and a ``PodDisruptionBudget``: one instance may be evicted at a time when the job
  predicted the fleet with one replica down (N-1) and it did not saturate, none otherwise.

Several instances sit behind the vLLM Router (``vllm/vllm-router``), which finds the pods by their
labels (its Kubernetes service discovery, with a ``Role`` to list pods) and routes with the plan's
policies.

Every word from a user (model and checkpoint ids, local paths, draft models) is data: container
``command``/``args`` are lists (no shell) with ``$`` doubled so that Kubernetes' ``$(VAR)``
expansion cannot read the pod's variables into them; the few containers that need a shell (a Ray
leader, headless data-parallel ranks) quote every word with :func:`shlex.quote` first; YAML is
written by :func:`~servopt.costmodels.escaping.dump_yaml_all` (a value YAML 1.1 or 1.2 would read as a
number, boolean or null, such as a node label ``1e3``, is quoted), and comments are stripped of control characters.

Example:
    >>> from servopt.costmodels import Deployment, PerformanceProfile, get_gpu
    >>> from servopt.costmodels.architectures import resolve_model
    >>> from servopt.costmodels.serving import compile_deployment
    >>> from servopt.costmodels.weights import WeightsOption
    >>> from servopt.results import launch_plan
    >>> gpu, model = get_gpu("h100"), resolve_model("meta-llama/Llama-3.1-8B-Instruct").spec
    >>> d = Deployment(gpu="h100", tp=2, replicas=2, max_model_len=8192)
    >>> weights = WeightsOption.as_is(model, serve_id="meta-llama/Llama-3.1-8B-Instruct")
    >>> record = compile_deployment(model, d, gpu, PerformanceProfile.spec_default(gpu), weights=weights).record()
    >>> docs = kubernetes_manifests(launch_plan(record), KubernetesOptions(name="chat"))
    >>> [(d["kind"], d["metadata"]["name"]) for d in docs]  # doctest: +NORMALIZE_WHITESPACE
    [('Deployment', 'chat-replica'), ('Service', 'chat-replica'), ('PodDisruptionBudget', 'chat-replica'),
     ('ServiceAccount', 'chat-router'), ('Role', 'chat-router'), ('RoleBinding', 'chat-router'),
     ('Deployment', 'chat-router'), ('Service', 'chat-router')]
    >>> container = docs[0]["spec"]["template"]["spec"]["containers"][0]
    >>> container["command"], container["args"][:3], container["resources"]["limits"]
    (['vllm', 'serve'], ['meta-llama/Llama-3.1-8B-Instruct', '--port', '8000'], {'nvidia.com/gpu': 2})
"""

from __future__ import annotations

import gzip
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..costmodels.errors import InputError
from ..costmodels.escaping import dump_yaml_all, markdown_text
from ..costmodels.serving.compiled import DECODE, PREFILL, REPLICA, role_name
from ._export import (
    RAY_PORT, VLLM_VERSION, check_commands_with_vllm, comment, configs_checked, front_plan, served_configs, with_configs,
)
from ._format import Exported, ExportFormat, ExportRequest

# vLLM's published image (docker/Dockerfile's vllm-openai target); its entrypoint is not relied on:
# every container names its command.
VLLM_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}.0"
# The vLLM Router's release images are vllm/vllm-router:vX.Y.Z (vllm-project/router
# .buildkite/README.md@15d5b11); 0.1.17 is the release `pip install vllm-router` gives now.
ROUTER_IMAGE = "vllm/vllm-router:v0.1.17"
CONTAINER_PORT = 8000
ROUTER_SERVICE_PORT = 8000
# The vLLM production-stack chart's /dev/shm for tensor-parallel pods
# (helm/templates/deployment-vllm-multi.yaml@vllm-stack-0.1.12: sizeLimit default "20Gi").
SHM_SIZE = "20Gi"
# Model download, weight loading and CUDA-graph capture happen before the API server binds its
# port; vLLM itself waits up to 1,800 s for a multi-node placement group
# (vllm/v1/executor/ray_utils.py@v0.33.0, PG_WAIT_TIMEOUT), the budget given here to start.
STARTUP_BUDGET_S = 1800
PROBE_PERIOD_S = 10
LWS_API = "leaderworkerset.x-k8s.io/v1"
# Labels and variables the LWS controller sets (api/leaderworkerset/v1/leaderworkerset_types.go@v0.10.0).
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
# What NVML calls each catalog GPU (nvidia-smi's name; torch.cuda.get_device_name gives the same),
# from the `device` column of aiconfigurator-core 0.12.0's kernel tables where it has the GPU
# (calibration/measured/kernel, ../shared/data/measured/kernel), else the name GPU feature discovery
# labels such nodes with in public manifests. GPU feature discovery turns it into the node label
# value (:func:`gpu_product_label`). A GPU not listed needs node_selector.
GPU_NVML_NAMES = {
    "h100": "NVIDIA H100 80GB HBM3",
    "h100-pcie": "NVIDIA H100 PCIe",
    "h200": "NVIDIA H200",
    "b200": "NVIDIA B200",
    "a100-80gb": "NVIDIA A100-SXM4-80GB",
    "a100-40gb": "NVIDIA A100-SXM4-40GB",
    "l40s": "NVIDIA L40S",
    "l4": "NVIDIA L4",
    "a10g": "NVIDIA A10G",
    "rtx4090": "NVIDIA GeForce RTX 4090",
}
GPU_RESOURCES = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                        r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$")
# An image reference: [registry[:port]/]path[:tag][@digest], no spaces or shell characters.
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
NAME_MAX = 40  # room for "-prefill" and the pod suffixes LWS and Deployments add, under 63


def gpu_product_label(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GPU feature discovery gives a node with this GPU: the
    NVML name without characters outside ``[A-Za-z0-9-_. ]``, its words joined by ``-``
    (NVIDIA/k8s-device-plugin ``internal/lm/resource.go@v0.19.3``, ``sanitise`` and
    ``getProductName``; time-sliced GPUs get ``-SHARED`` appended, and are not asked for here).

    >>> gpu_product_label("NVIDIA H100 80GB HBM3"), gpu_product_label("NVIDIA A100-SXM4-80GB")
    ('NVIDIA-H100-80GB-HBM3', 'NVIDIA-A100-SXM4-80GB')
    """
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", nvml_name).split())


def safe_name(text: str) -> str:
    """A DNS-1123 label made from ``text`` (a study name, say), at most :data:`NAME_MAX` long.

    >>> safe_name("My Study_2!"), safe_name("42")
    ('my-study-2', 'servopt-42')
    """
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"servopt-{name}".strip("-")
    return name[:NAME_MAX].rstrip("-")


@dataclass(frozen=True)
class KubernetesOptions:
    """What the manifests need beyond the plan (all checked by :meth:`check`)."""

    name: str = "servopt"
    namespace: str = "default"
    image: str = VLLM_IMAGE
    router_image: str = ROUTER_IMAGE
    node_selector: dict[str, str] | None = None  # replaces the GPU product affinity
    hf_token_secret: str = "hf-token"
    shm_size: str = SHM_SIZE
    model_cache_pvc: str | None = None
    labels: dict[str, str] = field(default_factory=dict)

    def check(self) -> KubernetesOptions:
        """Refuse, naming the option, anything Kubernetes would refuse or misread."""
        for flag, value in (("--name", self.name), ("--namespace", self.namespace),
                            ("--hf-token-secret", self.hf_token_secret), ("--model-cache-pvc", self.model_cache_pvc)):
            if value is not None and not (_DNS_LABEL.match(value) and len(value) <= 63):
                raise InputError(f"{flag}: '{comment(value)}' is not a DNS-1123 label (lower-case letters, digits and "
                                 "'-', starting with a letter)")
        if len(self.name) > NAME_MAX:
            raise InputError(f"--name: at most {NAME_MAX} characters (the role and pod suffixes must fit 63)")
        for flag, value in (("--image", self.image), ("--router-image", self.router_image)):
            if not _IMAGE.match(value):
                raise InputError(f"--{flag.strip('-')}: '{comment(value)}' is not an image reference")
        if not _QUANTITY.match(self.shm_size):
            raise InputError(f"--shm-size: '{comment(self.shm_size)}' is not a Kubernetes quantity (e.g. 20Gi)")
        for key, value in (self.node_selector or {}).items():
            if not (_LABEL_KEY.match(key) and _LABEL_VALUE.match(value) and len(value) <= 63):
                raise InputError(f"--node-selector: '{comment(key)}={comment(value)}' is not a label key=value")
        return self


def _escape(word: str) -> str:
    """A word Kubernetes passes on unchanged: ``$$`` is its escape for ``$``, so no ``$(VAR)`` in a
    user's string is replaced by a variable of the pod."""
    return word.replace("$", "$$")


def _group(plan: dict[str, Any]) -> dict[str, list[list[dict[str, Any]]]]:
    """The plan's instances by role; each instance as its per-node parts (data parallelism over
    nodes writes one entry per node, all on the instance's port)."""
    by_port: dict[int, list[dict[str, Any]]] = {}
    for inst in plan["instances"]:
        by_port.setdefault(inst["port"], []).append(inst)
    roles: dict[str, list[list[dict[str, Any]]]] = {}
    for parts in by_port.values():
        roles.setdefault(parts[0]["role"], []).append(parts)
    return roles


def _args(inst: dict[str, Any]) -> list[str]:
    """The instance's ``vllm serve`` words after the program, listening on :data:`CONTAINER_PORT`."""
    args = list(inst["args"])
    at = args.index("--port")
    args[at + 1] = str(CONTAINER_PORT)
    return [inst["model"], *args]


def _pod_gpus(parts: list[dict[str, Any]], gpus_per_node: int) -> list[int]:
    """GPUs of each pod of one instance: one pod per node it spans."""
    if len(parts) > 1:  # data-parallel ranks over nodes: each part is one node's ranks
        return [p["tp"] * p["pp"] * p["dp"] for p in parts]
    inst = parts[0]
    left, pods = inst["tp"] * inst["pp"] * inst["dp"], []
    for _ in inst["nodes"]:
        pods.append(min(left, gpus_per_node))
        left -= pods[-1]
    return pods


@dataclass
class _Context:
    plan: dict[str, Any]
    options: KubernetesOptions
    gpu_resource: str
    affinity: dict[str, Any] | None
    redundant: bool

    def labels(self, role: str) -> dict[str, str]:
        return {"app.kubernetes.io/name": "vllm", "app.kubernetes.io/instance": self.options.name,
                "app.kubernetes.io/component": role, "app.kubernetes.io/managed-by": "servopt", **self.options.labels}

    def metadata(self, name: str, role: str) -> dict[str, Any]:
        annotations = {"servopt/trial": str(self.plan["trial"]), "servopt/model": self.plan["model"],
                       "servopt/vllm-version": self.plan["vllm_version"]}
        return {"name": name, "namespace": self.options.namespace, "labels": self.labels(role),
                "annotations": annotations}


def _node_placement(plan: dict[str, Any], options: KubernetesOptions, vendor: str | None) -> dict[str, Any] | None:
    """The pods' affinity to nodes with the plan's GPU (None when ``node_selector`` replaces it)."""
    if options.node_selector:
        return None
    gpu = plan["gpu"]
    if gpu not in GPU_NVML_NAMES or vendor not in (None, "nvidia"):
        raise InputError(f"--node-selector: servopt knows no GPU feature discovery label for {comment(gpu)}; name the "
                         "label of its nodes, e.g. --node-selector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
    term = {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                  "values": [gpu_product_label(GPU_NVML_NAMES[gpu])]}]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}


def _n_minus_1_holds(metrics: dict[str, Any]) -> bool:
    """Whether the job predicted the fleet with one replica down and it did not saturate."""
    value = metrics.get("n_minus_1_saturated")
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return not bool(value)


def _env(ctx: _Context, inst: dict[str, Any], multi_node: bool) -> list[dict[str, Any]]:
    env = [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": ctx.options.hf_token_secret, "key": "token",
                                                                "optional": True}}}]
    pod_ip = {"valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    if multi_node:  # Ray and vLLM name each node by the address the others reach it at
        env.append({"name": "VLLM_HOST_IP", **pod_ip})
    if inst["role"] in (PREFILL, DECODE):
        # NixlConnector's side channel: vLLM's default host is localhost (vllm/envs.py@v0.33.0), which a
        # decode pod cannot reach; the port stays the plan's.
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", **pod_ip})
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": inst["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"]})
    return env


def _probes() -> dict[str, Any]:
    def probe(**extra: int) -> dict[str, Any]:
        return {"httpGet": {"path": "/health", "port": "http"}, "periodSeconds": PROBE_PERIOD_S, **extra}

    return {"startupProbe": probe(failureThreshold=STARTUP_BUDGET_S // PROBE_PERIOD_S),
            "readinessProbe": probe(failureThreshold=3, timeoutSeconds=5),
            "livenessProbe": probe(failureThreshold=6, timeoutSeconds=10)}


def _container(ctx: _Context, name: str, inst: dict[str, Any], gpus: int, command: list[str], args: list[str],
               serves: bool, multi_node: bool) -> dict[str, Any]:
    # One core for each vLLM process: the API server, the engine core and a worker per GPU.
    cpu = gpus + 2
    container: dict[str, Any] = {
        "name": name, "image": ctx.options.image, "command": command, "args": args,
        "env": _env(ctx, inst, multi_node),
        # /dev/shm is memory-backed and counts against the pod's memory, so the request covers it.
        "resources": {"requests": {"cpu": str(cpu), "memory": ctx.options.shm_size},
                      "limits": {ctx.gpu_resource: gpus}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"},
                         {"name": "model-cache", "mountPath": "/root/.cache/huggingface"}],
    }
    if serves:
        container["ports"] = [{"name": "http", "containerPort": CONTAINER_PORT}]
        container.update(_probes())
    return container


def _pod_spec(ctx: _Context, containers: list[dict[str, Any]]) -> dict[str, Any]:
    cache = ({"persistentVolumeClaim": {"claimName": ctx.options.model_cache_pvc}} if ctx.options.model_cache_pvc
             else {"emptyDir": {}})
    spec: dict[str, Any] = {
        "containers": containers,
        "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": ctx.options.shm_size}},
                    {"name": "model-cache", **cache}],
        "terminationGracePeriodSeconds": 60,
    }
    if ctx.affinity:
        spec["affinity"] = ctx.affinity
    if ctx.options.node_selector:
        spec["nodeSelector"] = dict(ctx.options.node_selector)
    return spec


def _deployment(ctx: _Context, role: str, instances: list[list[dict[str, Any]]], gpus: int) -> dict[str, Any]:
    name = f"{ctx.options.name}-{role}"
    inst = instances[0][0]
    container = _container(ctx, "vllm", inst, gpus, ["vllm", "serve"], [_escape(w) for w in _args(inst)],
                           serves=True, multi_node=False)
    labels = ctx.labels(role)
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": ctx.metadata(name, role),
            "spec": {"replicas": len(instances), "selector": {"matchLabels": labels},
                     # Start a new pod before the old one stops only if GPUs allow; never lose two.
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                     "template": {"metadata": {"labels": labels}, "spec": _pod_spec(ctx, [container])}}}


def _leader_worker_set(ctx: _Context, role: str, instances: list[list[dict[str, Any]]],
                       gpus: list[int]) -> dict[str, Any]:
    name = f"{ctx.options.name}-{role}"
    parts = instances[0]
    head = parts[0]
    if len(set(gpus[1:])) > 1:
        raise InputError(f"trial {ctx.plan['trial']}: the {role} instance's nodes hold {gpus} GPUs; a LeaderWorkerSet "
                         "gives every worker the same pod: export it with --format vllm")
    words = _args(head)
    if len(parts) > 1:  # data-parallel ranks over nodes
        local = parts[0]["dp"]
        leader_args = [_escape(w) if w != "${head_address}" else "$(LWS_LEADER_ADDRESS)" for w in words]
        leader = _container(ctx, "vllm", head, gpus[0], ["vllm", "serve"], leader_args, serves=True, multi_node=True)
        worker_words = [shlex.quote(w) if w != "${head_address}" else '"$LWS_LEADER_ADDRESS"' for w in words]
        script = ("exec vllm serve " + " ".join(worker_words) + ' --headless --data-parallel-start-rank '
                  f'"$((LWS_WORKER_INDEX * {local}))"')
    else:  # pipeline stages over nodes join the leader's Ray cluster
        script_words = " ".join(shlex.quote(w) for w in ["vllm", "serve", *words])
        leader = _container(ctx, "vllm", head, gpus[0], ["/bin/sh", "-c"],
                            [_escape(f"ray start --head --port={RAY_PORT} && exec {script_words}")],
                            serves=True, multi_node=True)
        script = (f'until ray start --address="$LWS_LEADER_ADDRESS:{RAY_PORT}" --block; '
                  "do echo waiting for the Ray head; sleep 5; done")
    worker = _container(ctx, "vllm-worker", head, gpus[-1], ["/bin/sh", "-c"], [_escape(script)],
                        serves=False, multi_node=True)
    labels = ctx.labels(role)
    return {"apiVersion": LWS_API, "kind": "LeaderWorkerSet", "metadata": ctx.metadata(name, role),
            "spec": {"replicas": len(instances),
                     "leaderWorkerTemplate": {
                         "size": len(gpus), "restartPolicy": "RecreateGroupOnPodRestart",
                         "leaderTemplate": {"metadata": {"labels": labels}, "spec": _pod_spec(ctx, [leader])},
                         "workerTemplate": {"metadata": {"labels": labels}, "spec": _pod_spec(ctx, [worker])}}}}


def _service(ctx: _Context, role: str, port: int, target: str, leaders_only: bool) -> dict[str, Any]:
    selector = ctx.labels(role)
    if leaders_only:  # only a LeaderWorkerSet's leader pods serve
        selector = {**selector, LWS_WORKER_INDEX_LABEL: "0"}
    return {"apiVersion": "v1", "kind": "Service", "metadata": ctx.metadata(f"{ctx.options.name}-{role}", role),
            "spec": {"type": "ClusterIP", "selector": selector,
                     "ports": [{"name": "http", "port": port, "targetPort": target, "protocol": "TCP"}]}}


def _disruption_budget(ctx: _Context, role: str) -> dict[str, Any]:
    # One instance down is what the job predicted (N-1); without that prediction none may be evicted.
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": ctx.metadata(f"{ctx.options.name}-{role}", role),
            "spec": {"maxUnavailable": 1 if ctx.redundant else 0, "selector": {"matchLabels": ctx.labels(role)}}}


def router_args(plan: dict[str, Any], options: KubernetesOptions) -> list[str]:
    """The plan's router flags with its worker URLs replaced by the router's discovery of the pods by
    their labels (vllm-project/router docs/cli_reference.md, "Kubernetes service discovery")."""
    args, skip = [], False
    for word in plan["router"]["args"]:
        if word in ("--worker-urls", "--prefill", "--decode", "--host", "--port"):
            skip = True
            continue
        if skip and not word.startswith("--"):
            continue
        skip = False
        args.append(word)

    def selector(role: str) -> list[str]:
        return [f"app.kubernetes.io/instance={options.name}", f"app.kubernetes.io/component={role}"]

    discovery = ["--service-discovery", "--service-discovery-namespace", options.namespace,
                 "--service-discovery-port", str(CONTAINER_PORT)]
    if "--vllm-pd-disaggregation" in args:
        discovery += ["--prefill-selector", *selector(PREFILL), "--decode-selector", *selector(DECODE)]
    else:
        discovery += ["--selector", *selector(REPLICA)]
    return ["vllm-router", *args, *discovery, "--host", "0.0.0.0", "--port", str(CONTAINER_PORT)]


def _router(ctx: _Context) -> list[dict[str, Any]]:
    name, role = f"{ctx.options.name}-router", "router"
    meta = ctx.metadata(name, role)
    rules = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    labels = ctx.labels(role)

    def probe(path: str) -> dict[str, Any]:  # the router's /liveness and /readiness (src/server.rs)
        return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": PROBE_PERIOD_S}

    container = {"name": "router", "image": ctx.options.router_image,
                 "command": [_escape(w) for w in router_args(ctx.plan, ctx.options)],
                 "ports": [{"name": "http", "containerPort": CONTAINER_PORT}],
                 "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                 "readinessProbe": probe("/readiness"), "livenessProbe": probe("/liveness")}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": meta,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.options.namespace}]},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
         "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                  "template": {"metadata": {"labels": labels},
                               "spec": {"serviceAccountName": name, "containers": [container]}}}},
        _service(ctx, role, ROUTER_SERVICE_PORT, "http", leaders_only=False),
    ]


def kubernetes_manifests(plan: dict[str, Any], options: KubernetesOptions | None = None, gpus_per_node: int = 8,
                         vendor: str | None = None) -> list[dict[str, Any]]:
    """Every object to apply for the plan (placed on nodes of ``gpus_per_node`` GPUs), in the order
    to apply them (``vendor``: the GPU's, from the job; None means NVIDIA)."""
    options = (options or KubernetesOptions()).check()
    ctx = _Context(plan, options, GPU_RESOURCES.get(vendor or "nvidia", "nvidia.com/gpu"),
                   _node_placement(plan, options, vendor), _n_minus_1_holds(plan.get("metrics") or {}))
    docs: list[dict[str, Any]] = []
    for label, instances in _group(plan).items():
        role = role_name(label)  # plan.json of older exports named an aggregated instance 'serve'
        shapes = {tuple(_args(parts[0])) for parts in instances}
        if len(shapes) != 1:
            raise InputError(f"trial {plan['trial']}: the {role} instances run different flags; export with --format vllm")
        gpus = _pod_gpus(instances[0], gpus_per_node)
        if len(gpus) == 1:
            docs.append(_deployment(ctx, role, instances, gpus[0]))
        else:
            docs.append(_leader_worker_set(ctx, role, instances, gpus))
        docs.append(_service(ctx, role, CONTAINER_PORT, "http", leaders_only=len(gpus) > 1))
        docs.append(_disruption_budget(ctx, role))
    if plan["router"]:
        docs += _router(ctx)
    return docs


def render_kubernetes(plan: dict[str, Any], docs: list[dict[str, Any]]) -> str:
    """The manifests as one YAML stream, after comment lines saying what they are."""
    m = plan.get("metrics") or {}
    head = [f"# servopt export for Kubernetes (vLLM {plan['vllm_version']}): trial {plan['trial']}, {plan['model']} "
            f"on {plan['gpu']}"]
    if m:
        head.append(f"# predicted: ${m['cost_usd_per_hour']:.2f}/hour, P99 TTFT {m['p99_ttft_s']:.3g} s, "
                    f"TPOT {m['p99_tpot_s']:.3g} s, e2e {m['p99_e2e_s']:.3g} s")
    head += [f"# NOTE: {note}" for note in plan["notes"]]
    if any(d["kind"] == "LeaderWorkerSet" for d in docs):
        head.append("# needs the LeaderWorkerSet controller (kubernetes-sigs/lws) installed in the cluster")
    body = dump_yaml_all(docs, default_flow_style=False, width=2**16)
    return "\n".join(comment(line) for line in head) + "\n---\n" + body


# The variables a LeaderWorkerSet's pods get, with a worker's values, for checking its commands.
LWS_EXAMPLE_ENV = {"LWS_LEADER_ADDRESS": "10.0.0.1", "LWS_WORKER_INDEX": "1", "LWS_GROUP_SIZE": "2"}


def kubelet_expand(word: str, env: dict[str, str]) -> str:
    """A command word as the kubelet passes it: ``$$`` becomes ``$`` and ``$(NAME)`` the variable's
    value where the container sets it (Kubernetes' dependent-variable expansion).

    >>> kubelet_expand("$$(HOME) $(A) $(B)", {"A": "1"})
    '$(HOME) 1 $(B)'
    """
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), word)


def container_words(container: dict[str, Any], env: dict[str, str]) -> list[str]:
    """What the container's process is started with."""
    return [kubelet_expand(w, env) for w in container.get("command", []) + container.get("args", [])]


def serve_argvs(docs: list[dict[str, Any]], env: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Each vLLM container's ``vllm serve`` command as it will run (a shell's words read as the shell
    reads them; ``env``: the pod's variables, by default a LeaderWorkerSet worker's), for vLLM's parser."""
    env = env or LWS_EXAMPLE_ENV
    out = []
    for doc in docs:
        for where, template in _templates(doc):
            for container in template["spec"]["containers"]:
                words = container_words(container, env)
                if words[:2] == ["/bin/sh", "-c"]:
                    script = re.sub(r'"\$\(\(LWS_WORKER_INDEX \* (\d+)\)\)"',
                                    lambda m: str(int(env["LWS_WORKER_INDEX"]) * int(m.group(1))), words[2])
                    words = shlex.split(script.replace('"$LWS_LEADER_ADDRESS', '"' + env["LWS_LEADER_ADDRESS"]))
                    words = words[words.index("vllm"):] if "vllm" in words else []
                    words = words[:words.index("&&")] if "&&" in words else words
                if words[:2] == ["vllm", "serve"]:
                    out.append({"label": f"{doc['kind']} {doc['metadata']['name']} {where}", "argv": words})
    return out


def _templates(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    if doc["kind"] == "Deployment":
        return [("pod", doc["spec"]["template"])]
    if doc["kind"] == "LeaderWorkerSet":
        lwt = doc["spec"]["leaderWorkerTemplate"]
        return [("leader", lwt["leaderTemplate"]), ("worker", lwt["workerTemplate"])]
    return []


# --- checking against the Kubernetes schemas ----------------------------------------------------

KUBERNETES_VERSION = "1.33"
LWS_SCHEMA = Path(__file__).with_name("data") / "leaderworkerset_v1.schema.json.gz"


def check_manifests(docs: list[dict[str, Any]], version: str = KUBERNETES_VERSION) -> list[str]:
    """Validate every object offline: built-in kinds against Kubernetes' own schemas (PyPI
    ``kubernetes-validate``, strict: an unknown field is an error), a LeaderWorkerSet against the CRD
    schema LWS publishes (:data:`LWS_SCHEMA`, from ``scripts/build_lws_schema.py``) and its pod
    templates, strictly, as Kubernetes ``PodTemplate`` objects. Returns one line per problem."""
    try:
        import kubernetes_validate
    except ImportError:
        raise InputError("--check needs kubernetes-validate for the manifests: pip install kubernetes-validate "
                         '(or pip install -e ".[test]")') from None
    problems = []
    for doc in docs:
        label = f"{doc['kind']} {doc['metadata']['name']}"
        checks = [(label, doc)]
        if doc["kind"] == "LeaderWorkerSet":
            problems += [f"{label}: {p}" for p in _check_custom(doc, LWS_SCHEMA)]
            checks = [(f"{label} {where}", {"apiVersion": "v1", "kind": "PodTemplate",
                                            "metadata": {"name": doc["metadata"]["name"]}, "template": template})
                      for where, template in _templates(doc)]
        for what, obj in checks:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                problems.append(f"{what}: {err.message} (at {'.'.join(map(str, err.absolute_path)) or 'top'})")
    return problems


def _check_custom(doc: dict[str, Any], schema_path: Path) -> list[str]:
    import jsonschema

    schema = json.loads(gzip.decompress(schema_path.read_bytes()))
    validator = jsonschema.Draft7Validator(schema)
    return [f"{e.message} (at {'.'.join(map(str, e.absolute_path)) or 'top'})" for e in validator.iter_errors(doc)]


def render_kubernetes_readme(plan: dict[str, Any], docs: list[dict[str, Any]], options: KubernetesOptions) -> str:
    """What the cluster needs, the order to apply, how to reach the deployment, what the budget allows."""
    ns, name = options.namespace, options.name
    kinds = [d["kind"] for d in docs]
    entry = next(d for d in reversed(docs) if d["kind"] == "Service")
    port = entry["spec"]["ports"][0]["port"]
    md = markdown_text
    gpu_label = (f"nodes labelled {', '.join(md(f'{k}={v}') for k, v in options.node_selector.items())}"
                 if options.node_selector else "GPU feature discovery's nvidia.com/gpu.product labels on the GPU "
                 "nodes (the NVIDIA GPU Operator installs it with the device plugin)")
    budget = next((d["spec"]["maxUnavailable"] for d in docs if d["kind"] == "PodDisruptionBudget"), 0)
    lines = [f"# Kubernetes manifests: trial {plan['trial']} ({md(plan['model'])} on {md(plan['gpu'])})", "",
             f"vLLM {plan['vllm_version']} ({md(options.image)}); {len(plan['instances'])} vLLM instance(s) on "
             f"{plan['num_nodes']} node(s) of {md(plan['gpu'])}.", "",
             "The cluster needs:", "",
             f"- the GPU device plugin ({', '.join(sorted({str(k) for d in docs for k in _gpu_keys(d)}))} "
             f"resources) and {gpu_label};"]
    if "LeaderWorkerSet" in kinds:
        lines.append("- the LeaderWorkerSet controller (kubernetes-sigs/lws, v0.10 or later; `kubectl apply "
                     "--server-side -f` its release manifests) for instances that span nodes;")
    lines += [f"- for gated models, the token: `kubectl -n {ns} create secret generic {options.hf_token_secret} "
              "--from-literal=token=YOUR_HF_TOKEN` (the pods start without it).", "",
              "Apply and wait:", "",
              f"1. `kubectl apply -f kubernetes.yaml`",
              f"2. `kubectl -n {ns} get pods -l app.kubernetes.io/instance={name} -w` until every pod is Ready "
              f"(the startup probe allows {STARTUP_BUDGET_S // 60} minutes for the download and loading).",
              f"3. `kubectl -n {ns} port-forward svc/{entry['metadata']['name']} {port}:{port}`; clients talk to "
              f"http://localhost:{port}/v1 (inside the cluster: http://{entry['metadata']['name']}.{ns}.svc:{port}/v1).",
              "", "Disruptions:", ""]
    if budget:
        lines.append("- Each PodDisruptionBudget lets one pod of its role be evicted at a time (a node drain): the job "
                     "predicted the fleet with one replica down and it did not saturate.")
    else:
        lines.append("- The PodDisruptionBudgets allow no voluntary eviction: the job did not predict this fleet with "
                     "one replica down (set redundancy or slo.n_minus_1 in the workload to size for it), so scale up "
                     "before draining a node.")
    if plan["notes"]:
        lines += ["", "Notes:", ""] + [f"- {md(note)}" for note in plan["notes"]]
    return "\n".join(lines) + "\n"


def _gpu_keys(doc: dict[str, Any]) -> list[str]:
    return [key for _, template in _templates(doc) for c in template["spec"]["containers"]
            for key in c.get("resources", {}).get("limits", {})]


def options_from(values: dict[str, Any], default_name: str) -> KubernetesOptions:
    """The options ``servopt export --format kubernetes`` was given (by option name; None or absent:
    the default; ``node_selector`` as ``KEY=VALUE`` items), checked."""
    given = {key: value for key, value in values.items() if value is not None}
    selector = None
    if given.get("node_selector"):
        pairs = [item.partition("=") for item in given["node_selector"]]
        if any(not sep for _, sep, _ in pairs):
            raise InputError("--node-selector: expected KEY=VALUE, e.g. nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
        selector = {key: value for key, _, value in pairs}
    fields = ("namespace", "image", "router_image", "hf_token_secret", "shm_size", "model_cache_pvc")
    return KubernetesOptions(name=given.get("name") or default_name, node_selector=selector,
                             **{key: given[key] for key in fields if key in given}).check()


class KubernetesManifests(ExportFormat):
    """Kubernetes manifests of the vLLM launch plan: kubernetes.yaml and README-kubernetes.md."""

    name = "kubernetes"
    help = "Kubernetes manifests (kubernetes.yaml, also printed: pipe it to kubectl apply -f -)"
    marker = "kubernetes.yaml"
    file_names = re.compile(r"kubernetes\.yaml|README-kubernetes\.md")
    heads = (re.compile(r"^# servopt export for Kubernetes [^:\n]*: trial ([0-9]+)"),
             re.compile(r"^# Kubernetes manifests: trial ([0-9]+) "))
    takes_vllm_python = True

    def export(self, request: ExportRequest) -> Exported:
        plan = front_plan(request)
        options = options_from(request.options, safe_name(f"{request.front.get('study', 'servopt')}-t{plan['trial']}"))
        vendor = (request.front.get("gpus", {}).get(plan["gpu"]) or {}).get("vendor")
        docs = kubernetes_manifests(plan, options, gpus_per_node=request.point.deployment.gpus_per_node, vendor=vendor)
        text = render_kubernetes(plan, docs)
        files = {"kubernetes.yaml": text, "README-kubernetes.md": render_kubernetes_readme(plan, docs, options)}
        return Exported(plan["trial"], text, files, plan=plan, parts=docs)

    def check(self, exported: Exported, request: ExportRequest) -> str:
        plan, docs = exported.plan, exported.parts
        problems = check_manifests(docs)
        if problems:
            raise InputError("the manifests break the Kubernetes schemas: " + "; ".join(problems))
        configs = served_configs(plan)
        commands = with_configs(serve_argvs(docs), configs)
        version, problems = check_commands_with_vllm(commands, request.python)
        if problems:
            raise InputError("vLLM rejects the exported flags: " + "; ".join(problems))
        return (f"# --check: {len(docs)} objects valid against the Kubernetes {KUBERNETES_VERSION} schemas; vLLM "
                f"{version}'s `vllm serve` parser accepts all {len(commands)} container command(s); "
                f"{configs_checked(plan, configs)}")
