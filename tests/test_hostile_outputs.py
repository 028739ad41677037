"""Issue 30: no write outside the job, no markup or escape code from a user string, no resumed study
that mixes two jobs, and the misreads and tracebacks the issue lists.

One test per class of the issue, each on inputs of its own (the fuzzer, benchmarks/bench_input_fuzz.py,
makes the classes anew from a seed: kinds markdown, terminal, storage_links, resume, config_extremes,
yaml_spellings, seed_job and misread).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path

import pytest
import yaml

from _optimizer_fixtures import write_workload
from servopt.calibration.vllm_bench import read_bench_result
from servopt.costmodels.architectures import spec_from_hf_config
from servopt.costmodels.checkpoints import checkpoint_format
from servopt.costmodels.deployment import Deployment
from servopt.costmodels.errors import InputError
from servopt.costmodels.escaping import dump_yaml, markdown_text, shell_word, terminal_text
from servopt.costmodels.serving.compiled import num_nodes, place
from servopt.optimizer.cli import main

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
MODELS = ROOT / "costmodels" / "data" / "models"
QUICK = {
    "model": "llama-3.1-8b",
    "traffic": {"arrival": {"kind": "poisson", "rate_per_s": 6.0},
                "input_tokens": {"kind": "fixed", "value": 512}, "output_tokens": {"kind": "fixed", "value": 64}},
    "slo": {"p99_ttft_s": 2.0, "p99_tpot_s": 0.1},
    "gpus": ["h100"],
    "space": {"mode": "aggregated", "speculation": "off", "quantization": ["bf16"], "max_num_seqs": [64],
              "max_num_batched_tokens": [8192], "tp": [1]},
    "budget": {"trials": 2},
    "fidelity": {"search_requests": 50, "final_requests": 50},
}
HOSTILE = "<script>alert(1)</script> [x](javascript:alert(1)) \x1b[31m\nFORGED"


def run(capsys, *argv) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = stop.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def refused(capsys, *argv) -> str:
    """The CLI must exit 2 with one line on stderr."""
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def local_model(folder: Path, source: str = "meta-llama--Llama-3.2-1B-Instruct.json", **changes) -> Path:
    config = json.loads((MODELS / source).read_text())
    config.pop("_servopt")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder


@pytest.fixture(scope="module")
def job(tmp_path_factory) -> Path:
    """A finished quick job (copied by the tests that change it)."""
    folder = tmp_path_factory.mktemp("job")
    write_workload(folder / "w.yaml", QUICK)
    assert main(["optimize", str(folder / "w.yaml"), "--out", str(folder / "job"), "--no-progress"]) == 0
    return folder / "job"


def copied(job: Path, tmp_path: Path) -> Path:
    """A copy of the job whose job.json names the copy's own journal."""
    out = tmp_path / "job"
    shutil.copytree(job, out)
    data = json.loads((out / "job.json").read_text())
    (out / "job.json").write_text(json.dumps({**data, "storage": f"journal://{out / 'study.journal'}"}))
    return out


# --- no write outside the job -----------------------------------------------------------------------
@pytest.mark.parametrize("planted", ["study.db", "study.db-wal", "sub"])
def test_a_sqlite_storage_through_a_planted_link_is_refused_and_its_target_untouched(capsys, tmp_path, planted):
    out, victim, elsewhere = tmp_path / "out", tmp_path / "victim.txt", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    victim.write_bytes(b"")  # an empty file became a 159 KB SQLite database
    if planted == "study.db-wal":
        (out / "study.db").write_bytes(b"")
    os.symlink(elsewhere if planted == "sub" else victim, out / planted)
    if planted == "sub":
        (out / "study.journal").write_bytes(b"")  # a job folder's marker: the storage is what refuses
    url = f"sqlite:///{out}/{'sub/' if planted == 'sub' else ''}study.db"
    write_workload(tmp_path / "w.yaml", QUICK)
    assert "symbolic link" in refused(capsys, "optimize", tmp_path / "w.yaml", "--out", out, "--storage", url,
                                      "--no-progress")
    assert victim.read_bytes() == b"" and not list(elsewhere.iterdir())


@pytest.mark.parametrize("storage", ["journal:{tmp}/other.journal", "sqlite:///{tmp}/new.db",
                                     "postgresql+psycopg2://servopt@127.0.0.1:1/studies"])
def test_report_opens_no_storage_its_job_json_names_outside_the_folder(capsys, tmp_path, job, storage):
    out = copied(job, tmp_path)
    data = json.loads((out / "job.json").read_text())
    (out / "job.json").write_text(json.dumps({**data, "storage": storage.format(tmp=tmp_path)}))
    assert "outside the job folder" in refused(capsys, "report", out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job"]  # nothing created beside it
    # Given again by the user, it is the user's word: the folder's own study is read.
    own = f"journal://{out / 'study.journal'}"
    (out / "job.json").write_text(json.dumps({**data, "storage": own}))
    assert run(capsys, "report", out, "--storage", own)[0] == 0


def test_an_export_folder_that_is_a_planted_link_is_refused_and_a_reexport_clears_only_servopts_files(
        capsys, tmp_path, job):
    out = copied(job, tmp_path)
    trial = json.loads((out / "front.json").read_text())["points"][0]["trial"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, out / f"export-trial-{trial}")
    assert "symbolic link" in refused(capsys, "export", out, "--pick", trial)
    assert not list(elsewhere.iterdir())
    (out / f"export-trial-{trial}").unlink()
    folder = out / f"export-trial-{trial}"
    folder.mkdir()
    head = "#!/usr/bin/env bash\n# servopt export for vLLM 0.33: trial {}, 6 replica(s) on 48 x h100 (6 node(s)); node 1\n"
    (folder / "node-1.sh").write_text(head.format(trial + 1))  # an earlier 6-node export's
    (folder / "node-5.sh").write_text("#!/bin/sh\necho mine\n")  # a person's, of the same name pattern
    (folder / "plan.json").write_text("{}")
    assert run(capsys, "export", out, "--pick", trial)[0] == 0
    assert sorted(p.name for p in folder.iterdir()) == ["README.md", "node-0.sh", "node-5.sh", "plan.json"]


# --- escaping, one function per medium ---------------------------------------------------------------
def test_markdown_text_shows_a_users_string_as_text():
    text = markdown_text(HOSTILE)
    assert "\n" not in text and "\x1b" not in text
    assert not re.search(r"(?<!\\)<[A-Za-z/!?]", text) and not re.search(r"(?<!\\)\]\(", text)
    assert markdown_text("p99_ttft_s <= 0.5 & more") == "p99_ttft_s <= 0.5 & more"  # left as written
    assert markdown_text("a`b", code=True) == "``a`b``"
    markdown = pytest.importorskip("markdown")
    html = markdown.markdown(f"| x |\n|---|\n| {text.replace('|', chr(92) + '|')} |", extensions=["tables"])
    assert not re.search(r"<(script|a|img)\b", html)


def test_reports_show_hostile_study_class_and_folder_names_as_text(capsys, tmp_path, monkeypatch):
    workload = {**QUICK, "model": "./<img src=x onerror=alert(1)>",
                "traffic": {**QUICK["traffic"], "classes": [
                    {"name": "<script>alert(1)</script>", "share": 0.5, "slo": {"p99_ttft_s": 1.0, "n_minus_1": False}},
                    {"name": "[x](javascript:alert(1))", "share": 0.5}]}}
    local_model(tmp_path / "<img src=x onerror=alert(1)>")
    write_workload(tmp_path / "w.yaml", workload)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, "optimize", "w.yaml", "--out", "out", "--study", "s\x1b[31m\n# FORGED",
                         "--no-progress")
    assert code in (0, 2) and "\x1b" not in out + err and "\n# FORGED" not in out
    report = (tmp_path / "out" / "report.md").read_text()
    assert not re.search(r"(?<!\\)<[A-Za-z/!?]", report) and not re.search(r"(?<!\\)\]\(", report)
    assert "\x1b" not in report and not any(line.startswith("# FORGED") for line in report.splitlines())
    assert "NUS" not in report  # slo.n_minus_1 is no P99 target ("P99 NUS <= 0 s")


def test_printed_lines_carry_no_escape_code_from_a_hardware_file(capsys, tmp_path):
    (tmp_path / "hw.yaml").write_text(yaml.safe_dump({"gpus": {"lab-gpu": {
        "base": "h100", "price_source": "a\x1b[2Jb\nFORGED: line", "notes": "n\x1b]0;title\x07", "interconnect": "x\ry"}}}))
    code, out, _ = run(capsys, "gpus", "--hardware", tmp_path / "hw.yaml")
    assert code == 0 and not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", out)
    assert not any(line.startswith("FORGED") for line in out.splitlines())
    code, out, _ = run(capsys, "gpus", "--json")
    assert code == 0 and "NaN" not in out and json.loads(out, parse_constant=lambda c: pytest.fail(c))
    local_model(tmp_path / "m", _name_or_path="x\nFORGED: line \x1b[31m")  # a config.json names its model
    code, out, _ = run(capsys, "plan", "--model", tmp_path / "m", "--gpu", "h100")
    assert code == 0 and "\x1b" not in out and not any(line.startswith("FORGED") for line in out.splitlines())
    assert terminal_text("a\x1bb\nc\rd") == "a\\x1bb\nc\\rd"
    assert shell_word("runs/a\nb") == "$'runs/a\\nb'"


@pytest.mark.parametrize("value", ["1e3", "0o17", "0x1F", "yes", "Y", "n", "Off", "null", "~", "1_000", "1:20", ".5",
                                   "+1", ".inf", ".NaN", "2001-12-14", "012", "1e-3"])
def test_yaml_scalars_a_yaml_1_1_or_1_2_reader_would_not_read_as_text_are_quoted(value):
    text = dump_yaml({"nodeSelector": {"gpu": value}, value: "key"})
    assert yaml.safe_load(text) == {"nodeSelector": {"gpu": value}, value: "key"}
    assert f"gpu: {value}\n" not in text and f"\n{value}: key" not in text


def test_kubernetes_node_selectors_and_images_are_quoted(capsys, tmp_path, job):
    out = copied(job, tmp_path)
    code, text, _ = run(capsys, "export", out, "--format", "kubernetes", "--node-selector", "gpu=1e3",
                        "--node-selector", "zone=0o17", "--image", "1e3", "--out", tmp_path / "k8s")
    assert code == 0 and "gpu: '1e3'" in text and "zone: '0o17'" in text and "image: '1e3'" in text


# --- a study records what it was started from ----------------------------------------------------------
def test_a_resumed_study_refuses_inputs_that_changed_and_starts_afresh_when_asked(capsys, tmp_path):
    local_model(tmp_path / "lm", "meta-llama--Llama-3.1-8B.json")
    write_workload(tmp_path / "w.yaml", {**QUICK, "model": str(tmp_path / "lm"), "gpus": ["l40s"]})
    (tmp_path / "hw.yaml").write_text("gpus:\n  l40s: {price_per_gpu_hour: 1.0}\n")
    argv = ["optimize", tmp_path / "w.yaml", "--out", tmp_path / "out", "--hardware", tmp_path / "hw.yaml",
            "--no-progress"]
    assert run(capsys, *argv)[0] in (0, 2)
    (tmp_path / "hw.yaml").write_text("gpus:\n  l40s: {price_per_gpu_hour: 1.86}\n")
    assert "GPU l40s (price $1.00 -> $1.86/GPU-hour)" in refused(capsys, *argv)
    (tmp_path / "hw.yaml").write_text("gpus:\n  l40s: {price_per_gpu_hour: 1.0}\n")
    local_model(tmp_path / "lm70", "meta-llama--Llama-3.1-70B.json")
    shutil.copy(tmp_path / "lm70" / "config.json", tmp_path / "lm" / "config.json")
    assert "num_layers 32 -> 80" in refused(capsys, *argv)
    assert "num_layers 32 -> 80" in refused(capsys, "report", tmp_path / "out")  # nor read into a report
    code, out, _ = run(capsys, *argv, "--restart")
    assert code in (0, 2) and "--restart: the 2 trial(s)" in out
    assert run(capsys, *argv)[0] in (0, 2)  # the new inputs are the study's now


# --- a --seed-job folder never loses a file servopt did not write ----------------------------------------
def test_a_seed_job_folder_keeps_a_hand_written_workload(capsys, tmp_path):
    bench = DATA / "diagnose" / "dennislee22_qwen2_7b_n1"
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "workload.yaml").write_text("model: my-model  # hand-written\n")
    argv = ["diagnose", f"{bench}.json", "--deployment", f"{bench}.deployment.yaml", "--seed-job", seed, "--json"]
    assert "did not write" in refused(capsys, *argv)
    assert (seed / "workload.yaml").read_text() == "model: my-model  # hand-written\n"
    (seed / "workload.yaml").unlink()
    assert run(capsys, *argv)[0] == 0
    assert run(capsys, *argv)[0] == 0  # servopt's own seed is replaced


# --- misreads --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("change", "problem"), [
    ({"gpus": {"h100": {"price_per_gpu_hour": 2.0}, "h100-sxm": {"price_per_gpu_hour": 9.0}}}, "listed already"),
    ({"gpus": {"h100": {}, "H100": {}}}, "listed already"),
    ({"alternatives": [{"model": "llama-3.2-3b", "accuracy_drop_pct": 4.0},
                       {"model": "meta-llama/Llama-3.2-3B-Instruct", "accuracy_drop_pct": 9.0}]}, "lists already"),
    ({"checkpoints": {"fp8": "nvidia/Llama-3.1-70B-Instruct-FP8"}}, "not a checkpoint of llama-3.1-8b"),
    ({"alternatives": [{"model": "llama-3.2-3b", "accuracy_drop_pct": 5.0,
                        "checkpoint": "nvidia/Llama-3.1-70B-Instruct-FP8"}]}, "not a checkpoint of llama-3.2-3b"),
])
def test_a_name_given_twice_or_a_checkpoint_of_another_model_is_refused(capsys, tmp_path, change, problem):
    write_workload(tmp_path / "w.yaml", {**QUICK, **change})
    assert problem in refused(capsys, "optimize", tmp_path / "w.yaml", "--out", tmp_path / "out", "--no-progress")


def test_a_hardware_file_naming_one_gpu_twice_is_refused(capsys, tmp_path):
    (tmp_path / "hw.yaml").write_text("gpus:\n  h100: {price_per_gpu_hour: 1.0}\n  h100-sxm: {price_per_gpu_hour: 5.0}\n")
    assert "name the same GPU" in refused(capsys, "gpus", "--hardware", tmp_path / "hw.yaml")


@pytest.mark.parametrize(("quant", "problem"), [
    ({"quant_method": "gptq", "bits": 0}, "bits 0"), ({"quant_method": "awq", "group_size": -128}, "group_size -128"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 0}, "group_size 0"), ({"quant_method": "awq", "w_bit": "4"}, "w_bit"),
])
def test_quantization_metadata_is_read_as_written(quant, problem):
    with pytest.raises(InputError, match=problem):
        checkpoint_format(quant)
    assert checkpoint_format({"quant_method": "gptq", "bits": 4, "group_size": -1}).group_size is None  # per channel


def test_bench_results_whose_counts_or_ttft_describe_no_run_are_refused(tmp_path):
    base = {"model_id": "m", "num_prompts": 100, "request_rate": 4.0, "burstiness": 1.0, "max_concurrency": None,
            "duration": 30.0, "completed": 100, "total_input_tokens": 102_200, "total_output_tokens": 100_100,
            "mean_ttft_ms": 40.0, "median_tpot_ms": 9.0}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(base))
    assert read_bench_result(path).mean_input_tokens == 1022
    for changes, problem in (({"completed": 558}, "num_prompts"), ({"mean_ttft_ms": float("nan")}, "NaN"),
                             ({"failed": 3}, "num_prompts")):
        path.write_text(json.dumps({**base, **changes}))
        with pytest.raises(InputError, match=problem):
            read_bench_result(path)
    path.write_text(json.dumps({**base, "mean_tpot_ms": float("nan")}))  # one-token outputs have no TPOT
    assert "mean_tpot_ms" not in read_bench_result(path).stats_ms


@pytest.mark.parametrize(("model", "gpu", "gib"), [("llama-3.1-70b", "l40s", 4.0), ("llama-3.1-8b", "h100", 1000.0)])
def test_a_kv_cache_the_gpu_cannot_hold_beside_the_weights_is_refused(capsys, tmp_path, model, gpu, gib):
    write_workload(tmp_path / "w.yaml", {**QUICK, "model": model})
    (tmp_path / "d.yaml").write_text(yaml.safe_dump({"gpu": gpu, "kv_cache_memory_gib": gib, "max_model_len": 4096}))
    assert "kv_cache_memory_gib" in refused(capsys, "predict", tmp_path / "w.yaml", "--deployment", tmp_path / "d.yaml",
                                            "--analytic")


@pytest.mark.parametrize("flag", ["--out", "--study", "--storage", "--hardware"])
def test_an_empty_path_or_name_is_refused_not_read_as_the_default(capsys, tmp_path, flag):
    write_workload(tmp_path / "w.yaml", QUICK)
    assert f"argument {flag}: is empty" in refused(capsys, "optimize", tmp_path / "w.yaml", flag, "")


# --- tracebacks ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "problem"), [('"num_attention_heads": 0', "num_attention_heads' must be at least 1"),
                                               ('"hidden_size": NaN', "every number in a config is finite"),
                                               ('"hidden_size": Infinity', "every number in a config is finite"),
                                               ('"rope_scaling": 7', "must be a mapping")])
def test_config_json_extremes_are_one_line_from_a_folder_or_the_hub_cache(capsys, tmp_path, monkeypatch, text, problem):
    config = json.loads((MODELS / "meta-llama--Llama-3.1-8B.json").read_text())
    config.pop("_servopt")
    key = text.split('"')[1]
    body = json.dumps({k: v for k, v in config.items() if k != key})[:-1] + f", {text}}}"
    local = tmp_path / "m"
    local.mkdir()
    (local / "config.json").write_text(body)
    snapshot = tmp_path / "hub" / "models--acme--m" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(body)
    (tmp_path / "hub" / "models--acme--m" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--m" / "refs" / "main").write_text("abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for model in (local, "acme/m"):
        assert problem in refused(capsys, "plan", "--model", model, "--gpu", "h100")


def test_config_json_values_of_every_kind_never_raise_anything_but_input_errors():
    rng = random.Random(30)
    for name in ("meta-llama--Llama-3.1-8B.json", "Qwen--Qwen3-VL-8B-Instruct.json", "google--gemma-3-27b-it.json",
                 "deepseek-ai--DeepSeek-V3.json", "moonshotai--Kimi-K2.5.json"):
        config = json.loads((MODELS / name).read_text())
        config.pop("_servopt")
        for key in rng.sample(sorted(config), min(12, len(config))):
            for value in (0, -1, "abc", [], {}, 1.5, 10**30, None, True):
                try:
                    spec_from_hf_config({**config, key: value}, "x")
                except InputError:
                    pass


# --- bounded cost when nothing can be simulated ----------------------------------------------------------------
def test_nodes_are_counted_without_placing_every_replica():
    rng = random.Random(7)
    for _ in range(300):
        d = Deployment(gpu="h100", tp=rng.choice([1, 2, 3, 4, 8, 16]), pp=rng.choice([1, 2]))
        d = d.model_copy(update={"replicas": rng.randint(1, 70)})
        nodes = rng.choice([1, 3, 4, 8])
        assert num_nodes(d, nodes) == place(d, nodes)[-1].nodes[-1] + 1
    huge = Deployment(gpu="h100", tp=2).model_copy(update={"replicas": 10**7})
    assert num_nodes(huge, 8) == 2_500_000  # in microseconds: the rate 1e6 fleet of issue 30


def test_a_fleet_beyond_what_servopt_simulates_is_not_placed(capsys, tmp_path):
    from servopt.costmodels import PerformanceProfile, get_gpu, resolve_model
    from servopt.costmodels.serving import compile_deployment

    gpu = get_gpu("h100")
    compiled = compile_deployment(resolve_model("llama-3.1-8b").spec, Deployment(gpu="h100"), gpu,
                                  PerformanceProfile.spec_default(gpu))
    assert len(compiled.with_replicas(4).roles[0].placements) == 4
    huge = compiled.with_replicas(10**6)  # what rate_per_s 1e6 asks for: placing it cost seconds and GBs a trial
    assert huge.deployment.num_gpus == 10**6 and huge.roles[0].placements == ()
    write_workload(tmp_path / "w.yaml", {**QUICK, "traffic": {**QUICK["traffic"], "arrival": {
        "kind": "poisson", "rate_per_s": 1e6}}, "gpus": ["h100", "l40s"], "budget": {"trials": 20},
        "space": {k: v for k, v in QUICK["space"].items() if k != "tp"}})
    code, out, _ = run(capsys, "optimize", tmp_path / "w.yaml", "--out", tmp_path / "out", "--no-progress")
    assert code == 2 and "None of the 20 trials" in out and "limits.max_gpus" in out
