"""Kubernetes export: the shell export's vLLM flags, valid manifests, and no user string that runs or expands."""

import json
import os
import shlex
import subprocess

import pytest
import yaml
from test_export import DIS, PAYLOADS, _stub_path, old_point, record

from servopt.costmodels.errors import InputError
from servopt.results import find_vllm_python, launch_plan
from servopt.results._export_kubernetes import (
    KubernetesOptions, check_manifests, container_words, gpu_product_label, kubernetes_manifests, render_kubernetes, serve_argvs,
)

OPTIONS = KubernetesOptions(name="chat", namespace="serving")


def by_kind(docs, kind):
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def pod_templates(doc):
    if doc["kind"] == "Deployment":
        return [doc["spec"]["template"]]
    lwt = doc["spec"]["leaderWorkerTemplate"]
    return [lwt["leaderTemplate"], lwt["workerTemplate"]]


def test_each_role_runs_the_shell_exports_flags_on_one_port():
    for p in (record(replicas=3), record(disaggregation=DIS, replicas=2)):
        plan = launch_plan(p)
        docs = kubernetes_manifests(plan, OPTIONS)
        deployments = by_kind(docs, "Deployment")
        for inst in plan["instances"]:
            role = {"serve": "replica"}.get(inst["role"], inst["role"])
            container = deployments[f"chat-{role}"]["spec"]["template"]["spec"]["containers"][0]
            shell = shlex.split(inst["command"])
            words = shell[shell.index("vllm"):]
            words[words.index("--port") + 1] = "8000"
            assert container["command"] + container["args"] == words
        replicas = {name: d["spec"]["replicas"] for name, d in deployments.items() if name != "chat-router"}
        expected = ({"chat-replica": 3} if not p.spec.disaggregation
                    else {"chat-prefill": 2, "chat-decode": 4})
        assert replicas == expected


def test_gpus_affinity_probes_and_shared_memory():
    docs = kubernetes_manifests(launch_plan(record(replicas=1)), OPTIONS)
    pod = by_kind(docs, "Deployment")["chat-replica"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0] == {"key": "nvidia.com/gpu.product", "operator": "In",
                                                "values": ["NVIDIA-H100-80GB-HBM3"]}
    assert {container[p]["httpGet"]["path"] for p in ("startupProbe", "readinessProbe", "livenessProbe")} == {"/health"}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "20Gi"}} in pod["volumes"]
    assert "router" not in json.dumps(docs)  # one instance: its Service is the entry point
    selector = KubernetesOptions(name="chat", node_selector={"pool": "gpu-a"})
    pod = kubernetes_manifests(launch_plan(record(replicas=1)), selector)[0]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "gpu-a"} and "affinity" not in pod


def test_product_label_follows_gpu_feature_discovery():
    assert gpu_product_label("NVIDIA H200") == "NVIDIA-H200"
    assert gpu_product_label("NVIDIA  GeForce RTX 4090 (x)") == "NVIDIA-GeForce-RTX-4090-x"
    with pytest.raises(InputError, match="--node-selector"):
        kubernetes_manifests(launch_plan(record(gpu="mi300x", replicas=1)), OPTIONS, vendor="amd")
    amd = KubernetesOptions(name="chat", node_selector={"amd.com/gpu.product-name": "MI300X"})
    docs = kubernetes_manifests(launch_plan(record(gpu="mi300x", replicas=1)), amd, vendor="amd")
    assert docs[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {"amd.com/gpu": 2}


def test_instances_over_nodes_are_leader_worker_sets():
    pipeline = kubernetes_manifests(launch_plan(record(tp=8, pp=2, replicas=2, quantization="bf16")), OPTIONS)
    lws = by_kind(pipeline, "LeaderWorkerSet")["chat-replica"]["spec"]
    assert lws["replicas"] == 2 and lws["leaderWorkerTemplate"]["size"] == 2
    leader, worker = (t["spec"]["containers"][0] for t in pod_templates({"kind": "LWS", "spec": lws}))
    assert leader["args"][0].startswith("ray start --head --port=6379 && exec vllm serve ")
    assert "ray start --address=" in worker["args"][0] and "startupProbe" not in worker
    assert leader["resources"]["limits"] == worker["resources"]["limits"] == {"nvidia.com/gpu": 8}
    service = by_kind(pipeline, "Service")["chat-replica"]
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"

    ranks = kubernetes_manifests(launch_plan(record(tp=1, data_parallel_size=16, replicas=1)), OPTIONS)
    argvs = serve_argvs(ranks)
    leader, worker = (c["argv"] for c in argvs)
    assert leader[leader.index("--data-parallel-address") + 1] == "10.0.0.1"
    assert "--headless" in worker and worker[worker.index("--data-parallel-start-rank") + 1] == "8"


def test_disruption_budget_allows_one_down_only_when_n_minus_1_was_predicted():
    plan = launch_plan(record(replicas=3))
    assert by_kind(kubernetes_manifests(plan, OPTIONS), "PodDisruptionBudget")["chat-replica"]["spec"]["maxUnavailable"] == 0
    for saturated, allowed in ((False, 1), (True, 0)):
        plan["metrics"] = {"n_minus_1_saturated": saturated, "n_minus_1_p99_ttft_s": 0.3}
        budget = by_kind(kubernetes_manifests(plan, OPTIONS), "PodDisruptionBudget")["chat-replica"]
        assert budget["spec"]["maxUnavailable"] == allowed


def test_router_discovers_the_pods_with_the_plans_policies():
    plan = launch_plan(record(disaggregation=DIS, replicas=1))
    docs = kubernetes_manifests(plan, OPTIONS)
    router = by_kind(docs, "Deployment")["chat-router"]["spec"]["template"]["spec"]
    command = router["containers"][0]["command"]
    assert command[:2] == ["vllm-router", "--vllm-pd-disaggregation"] and "--prefill" not in command
    policy = plan["router"]["args"]
    assert command[command.index("--prefill-policy") + 1] == policy[policy.index("--prefill-policy") + 1]
    assert command[command.index("--prefill-selector") + 2] == "app.kubernetes.io/component=prefill"
    assert command[command.index("--service-discovery-namespace") + 1] == "serving"
    assert by_kind(docs, "RoleBinding")["chat-router"]["subjects"][0]["name"] == router["serviceAccountName"]


def test_bad_options_are_refused_naming_the_flag():
    for options, flag in ((KubernetesOptions(name="Bad_Name"), "--name"), (KubernetesOptions(namespace="a b"), "--namespace"),
                          (KubernetesOptions(image="x;rm -rf /"), "--image"), (KubernetesOptions(shm_size="lots"), "--shm-size"),
                          (KubernetesOptions(node_selector={"a b": "c"}), "--node-selector")):
        with pytest.raises(InputError, match=flag):
            options.check()


def _all_plans():
    spec = {"method": "ngram", "num_speculative_tokens": 3, "draft_model": None, "acceptance_rate": None, "draft_tp": None}
    return [launch_plan(p) for p in (
        record(replicas=1, speculative=spec), record(replicas=3), record(disaggregation=DIS, replicas=2),
        record(tp=8, pp=2, replicas=2, quantization="bf16"), record(tp=1, data_parallel_size=16, replicas=1))]


def test_manifests_are_valid_against_the_kubernetes_schemas():
    pytest.importorskip("kubernetes_validate")
    for plan in _all_plans():
        docs = kubernetes_manifests(plan, OPTIONS)
        assert check_manifests(docs) == []
    bad = kubernetes_manifests(_all_plans()[3], OPTIONS)
    lws = by_kind(bad, "LeaderWorkerSet")["chat-replica"]
    lws["spec"]["leaderWorkerTemplate"]["size"] = "two"
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["gpus"] = 8
    service = {**by_kind(bad, "Service")["chat-replica"], "spec": {"ports": [{"port": "x"}]}}
    problems = check_manifests([*bad, service])
    assert any("'two' is not of type 'integer'" in p for p in problems)  # the LWS schema
    assert any("worker" in p and "gpus" in p for p in problems)  # its pod template, strictly
    assert any(p.startswith("Service chat-replica") for p in problems)  # Kubernetes' own schemas


@pytest.mark.skipif(find_vllm_python() is None, reason="vLLM is not installed (see test_export.py)")
def test_vllm_parser_accepts_every_container():
    from servopt.results import check_commands_with_vllm

    commands = [c for plan in _all_plans() for c in serve_argvs(kubernetes_manifests(plan, OPTIONS))]
    assert len(commands) == 7  # one per pod template that runs vllm serve (a Ray worker does not)
    version, problems = check_commands_with_vllm(commands)
    assert problems == [] and version.startswith("0.")


@pytest.mark.parametrize("payload", PAYLOADS)
def test_planted_strings_stay_data(tmp_path, payload):
    """A local checkpoint folder may be named anything: the YAML reads back as written, Kubernetes'
    $(VAR) expansion leaves it unchanged, and every shell a container runs (stubs first on PATH)
    passes it to vllm as one word and creates no marker file."""
    marker = tmp_path / "pwned"
    evil = str(tmp_path / payload.format(m=marker).replace("/", "_")) + "/$(HF_TOKEN)"
    stubs, log = _stub_path(tmp_path), tmp_path / "calls.log"
    env = {"LWS_LEADER_ADDRESS": "127.0.0.1", "LWS_WORKER_INDEX": "1", "HF_TOKEN": "secret"}
    for shape in ({"replicas": 2}, {"tp": 8, "pp": 2, "replicas": 1}, {"tp": 1, "data_parallel_size": 16, "replicas": 1}):
        r = record(**shape)
        plan = launch_plan(r.model_copy(update={"weights": r.weights.model_copy(update={"serve_id": evil})}))
        docs = kubernetes_manifests(plan, OPTIONS)
        text = render_kubernetes(plan, docs)
        assert list(yaml.safe_load_all(text)) == docs
        for doc in docs:
            for template in pod_templates(doc) if doc["kind"] in ("Deployment", "LeaderWorkerSet") else []:
                container = template["spec"]["containers"][0]
                words = container_words(container, env)
                if words[0] == "vllm":
                    assert words[2] == evil
                    continue
                run_env = {**os.environ, **env, "PATH": f"{stubs}:{os.environ['PATH']}", "STUB_LOG": str(log)}
                done = subprocess.run(words, env=run_env, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
    assert not marker.exists()
    calls = log.read_text()  # the stubs write one argument a line
    assert f"\n{evil}\n" in f"\n{calls}" and "secret" not in calls


def test_export_cli_writes_and_checks_manifests(tmp_path, capsys):
    from servopt.optimizer.cli import main

    front = {"study": "Chat Job", "workload": {"objective": {"cost": "usd_per_hour", "latency": "e2e"}},
             "gpus": {"h100": {"calibrated": True, "vendor": "nvidia"}},
             "points": [{**old_point(replicas=2), "trial": 4, "gpus_per_node": 8, "metrics": {
                 "cost_usd_per_hour": 5.0, "p99_e2e_s": 9.0, "p99_ttft_s": 1, "p99_tpot_s": 0.02}}]}
    (tmp_path / "front.json").write_text(json.dumps(front))
    assert main(["export", str(tmp_path), "--format", "kubernetes"]) == 0
    out = capsys.readouterr().out
    docs = list(yaml.safe_load_all(out))
    assert [d["metadata"]["name"] for d in docs][:2] == ["chat-job-t4-replica", "chat-job-t4-replica"]
    assert (tmp_path / "export-trial-4" / "kubernetes.yaml").read_text() in out
    assert "kubectl apply -f kubernetes.yaml" in (tmp_path / "export-trial-4" / "README-kubernetes.md").read_text()
    assert main(["export", str(tmp_path), "--format", "kubernetes", "--node-selector", "nokey"]) == 2
    assert "--node-selector" in capsys.readouterr().err
    assert main(["export", str(tmp_path), "--format", "kubernetes", "--namespace", "Prod"]) == 2
    assert "--namespace" in capsys.readouterr().err
