"""Issue 21: every bad input refused in one line, no write through a link, no secret or formula in what we write.

One test per class of the issue, each on inputs of its own (the fuzzer, benchmarks/bench_input_fuzz.py,
makes the classes anew from a seed).
"""

from __future__ import annotations

import bz2
import csv
import gzip
import json
import lzma
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from _optimizer_fixtures import TINY, run_cli_process, write_workload
from servopt.calibration.prometheus import parse_vllm_metrics
from servopt.calibration.registry import load_profile
from servopt.calibration.vllm_bench import read_bench_result
from servopt.costmodels import userfiles
from servopt.costmodels.errors import InputError
from servopt.costmodels.hardware import builtin_catalog, get_gpu
from servopt.costmodels.model_sources import check_model_id
from servopt.costmodels.outfiles import check_output_file, output_folder, spreadsheet_safe, write_csv
from servopt.costmodels.serving.traces import read_trace
from servopt.costmodels.userfiles import parse_json, parse_yaml, read_csv_table, read_text
from servopt.optimizer._lifeline import exit_with_parent
from servopt.optimizer._storage import has_hidden_password, journal_url, masked_url, open_storage
from servopt.optimizer.cli import main
from servopt.optimizer.study import AlreadyScored, claim_deployment
from servopt.optimizer.workload import load_workload
from servopt.results import export_command

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"


def one_line_exit_2(capsys, *argv) -> str:
    """Run the CLI; it must exit 2 with one line on stderr (argparse's errors raise SystemExit)."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err


# --- one bounded reader ---------------------------------------------------------------------------
def test_fifos_devices_and_folders_are_refused_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")  # no writer: opening it would block
    (tmp_path / "folder.csv").mkdir()
    start = time.perf_counter()
    for path, kind in ((tmp_path / "pipe.csv", "FIFO"), ("/dev/zero", "device"), (tmp_path / "folder.csv", "folder")):
        with pytest.raises(InputError, match=kind):
            read_csv_table(path, "trace")
        with pytest.raises(InputError, match=kind):
            read_text(path, "metrics file")
    assert time.perf_counter() - start < 5
    with open(tmp_path / "sparse.yaml", "wb") as stream:  # its size refuses it, unread
        stream.truncate(userfiles.MAX_SPEC_BYTES + 1)
    with pytest.raises(InputError, match="MiB"):
        read_text(tmp_path / "sparse.yaml", "workload file")


def test_compressed_files_are_what_their_names_say_and_bounded(tmp_path, monkeypatch):
    text = "arrival_s,input_tokens,output_tokens\n" + "".join(f"{i / 50},{100 + i},{10 + i}\n" for i in range(40))
    for suffix, compress in ((".gz", gzip.compress), (".bz2", bz2.compress), (".xz", lzma.compress)):
        (tmp_path / f"t.csv{suffix}").write_bytes(compress(text.encode()))
        assert len(read_trace(tmp_path / f"t.csv{suffix}")) == 40
        good = compress(text.encode())
        cases = {"named": text.encode(), "cut": good[: len(good) // 2],
                 "damaged": good[:20] + bytes(b ^ 0xFF for b in good[20:30]) + good[30:]}
        for name, data in cases.items():
            (tmp_path / f"{name}.csv{suffix}").write_bytes(data)
            with pytest.raises(InputError, match=rf"{name}\.csv\{suffix}'"):
                read_trace(tmp_path / f"{name}.csv{suffix}")
    (tmp_path / "hidden.csv").write_bytes(gzip.compress(text.encode()))
    with pytest.raises(InputError, match="gzip-compressed but its name does not end in .gz"):
        read_trace(tmp_path / "hidden.csv")
    monkeypatch.setattr(userfiles, "MIN_EXPANDED_BYTES", 2**20)
    bomb = text.splitlines(keepends=True)[0] + "0.5,100,10\n" * 500_000  # 5 MB of one row: 300 times its gzip
    (tmp_path / "bomb.csv.gz").write_bytes(gzip.compress(bomb.encode()))
    with pytest.raises(InputError, match="bomb.csv.gz' expands to more than 200 times its compressed size"):
        read_trace(tmp_path / "bomb.csv.gz")


# --- YAML 1.2, JSON integers -------------------------------------------------------------------------
@pytest.mark.parametrize("text, problem", [
    ("limits: {max_gpus: 012}", "limits.max_gpus: 012 is octal 10 in YAML 1.1"),
    ("values: [16, 0777]", "values.1: 0777 is octal 511"),
    ("think_s: 2:05", "think_s: 2:05 is base 60 in YAML 1.1 (125)"),
    ("timeout_s: 1:02:03.5", "base 60"),
    ("seed: 1" + "0" * 330, "seed: 1000"),
    ("trials: 0b110", "trials: 0b110 is binary 6 in YAML 1.1"),
    ("requests: 1_000", "requests: 1_000 is 1000 in YAML 1.1"),
    ("space: {speculation: off}", "space.speculation: off is false in YAML 1.1"),
    ("flags: [Yes]", "flags.0: Yes is true in YAML 1.1"),
])
def test_yaml_spellings_read_differently_by_1_1_and_1_2_are_refused_naming_the_field(text, problem):
    with pytest.raises(InputError, match="w.yaml line 1") as refused:
        parse_yaml(text, "w.yaml")
    assert problem in str(refused.value)


def test_yaml_spellings_both_versions_read_alike_are_read():
    assert parse_yaml("a: 0x1F\nb: +12\nc: 07\nd: '0100'\ne: 1e3\nf: 'off'\ng: True\nh: n", "w.yaml") == \
        {"a": 31, "b": 12, "c": 7, "d": "0100", "e": 1000.0, "f": "off", "g": True, "h": "n"}


def test_json_integers_beyond_every_float_are_refused_naming_the_key():
    with pytest.raises(InputError, match="r.json: runs.1.completed is a number of 400 digits"):
        parse_json('{"runs": [{"completed": 1}, {"completed": 1' + "0" * 399 + "}]}", "r.json")


# --- traces: units, columns, paths ------------------------------------------------------------------
def _trace(tmp_path: Path, name: str, header: str, rows: list[str]) -> Path:
    path = tmp_path / name
    path.write_text(header + "\n" + "\n".join(rows) + "\n")
    return path


def test_a_trace_unit_nothing_states_is_asked_for_however_few_the_rows(tmp_path):
    few_ms = _trace(tmp_path, "few.csv", "timestamp,input_tokens,output_tokens", [f"{i * 900},200,20" for i in range(5)])
    with pytest.raises(InputError, match=r"0.9 s \(milliseconds.*0.0009 s \(microseconds.*time_unit"):
        read_trace(few_ms)
    assert read_trace(few_ms, time_unit="ms").arrival_s[-1] == pytest.approx(3.6)
    # Mooncake's columns and its millisecond gaps of 1-60, without the hash_ids that name the format.
    mooncake = tmp_path / "m.jsonl"
    mooncake.write_text("".join(json.dumps({"timestamp": 25 * i, "input_length": 800, "output_length": 30}) + "\n"
                                for i in range(40)))
    with pytest.raises(InputError, match="more than one fits.*seconds.*milliseconds.*time_unit"):
        read_trace(mooncake)
    # Microseconds 40 ms apart fit milliseconds (40 s apart) too: both named, neither suggested alone.
    micro = _trace(tmp_path, "us.csv", "time,input_tokens,output_tokens", [f"{i * 40_000},200,20" for i in range(30)])
    with pytest.raises(InputError, match=r"more than one fits.*40 s \(milliseconds.*0.04 s \(microseconds"):
        read_trace(micro)
    assert read_trace(micro, time_unit="us").arrival_s[-1] == pytest.approx(29 * 0.04)
    # 40 requests/s: as milliseconds 25 us apart, no trace's gap; only seconds fit.
    fast = _trace(tmp_path, "fast.csv", "timestamp,input_tokens,output_tokens", [f"{i / 40},200,20" for i in range(30)])
    assert read_trace(fast).arrival_s[-1] == pytest.approx(29 / 40)


def test_trace_columns_that_could_hold_one_role_are_refused(tmp_path):
    rows = [f"{i / 40},200,20,200" for i in range(30)]
    for header in ("arrival_s,input_tokens,output_tokens,ARRIVAL_S", "arrival_s,input_tokens,output_tokens,prompt_tokens"):
        with pytest.raises(InputError, match="columns that could hold the"):
            read_trace(_trace(tmp_path, "t.csv", header, rows))


def test_a_relative_trace_path_is_beside_the_workload_and_nowhere_else(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    workload = {"model": "llama-3.1-8b", "traffic": {"arrival": {"kind": "trace", "path": "t.csv"}}}
    (tmp_path / "sub" / "w.yaml").write_text(yaml.safe_dump(workload))
    _trace(tmp_path, "t.csv", "arrival_s,input_tokens,output_tokens", ["0,100,10"])  # in the current folder only
    monkeypatch.chdir(tmp_path)
    loaded = load_workload("sub/w.yaml")
    assert loaded.traffic.arrival.path == str(tmp_path / "sub" / "t.csv")
    with pytest.raises(InputError, match="sub/t.csv' does not exist"):
        loaded.traffic.read_trace()


# --- profiles, catalog names --------------------------------------------------------------------------
def test_a_profile_fitted_for_another_gpu_is_refused():
    profile = ROOT / "calibration" / "profiles" / "a100-80gb.json"
    with pytest.raises(InputError, match="fitted for the GPU 'a100-80gb', not this deployment's h100"):
        load_profile(get_gpu("h100"), profile)
    assert load_profile(get_gpu("A100_80GB"), profile).gpu == "a100-80gb"  # any name of the same GPU


def test_a_workload_names_its_profiles_gpus_by_any_of_their_names_once():
    from servopt.optimizer._problem import build_problem
    from servopt.optimizer.workload import parse_workload

    h100 = str(ROOT / "calibration" / "profiles" / "h100.json")
    problem = build_problem(parse_workload({**TINY, "profiles": {"H100_SXM": h100}}, "w.yaml"))
    assert problem.ctx.profiles["h100"].gpu == "h100"
    with pytest.raises(InputError, match="profiles.H100-SXM: the GPU h100 has a profile already"):
        build_problem(parse_workload({**TINY, "profiles": {"h100": h100, "H100-SXM": h100}}, "w.yaml"))
    with pytest.raises(InputError, match="profiles.l40s: not one of the candidate GPUs"):
        build_problem(parse_workload({**TINY, "profiles": {"l40s": h100}}, "w.yaml"))


@pytest.mark.parametrize("gpus, problem", [
    ({"lab": {"base": "a100-80gb", "aliases": ["H100-SXM"]}}, "alias 'H100-SXM' is already the GPU h100"),
    ({"L40S": {"base": "h100"}}, "gpus.L40S is the GPU l40s already and gives a base"),
    ({"h200": {"aliases": ["b200"]}}, "alias 'b200' is already the GPU b200"),
    ({"a": {"base": "h100", "aliases": ["x"]}, "b": {"base": "h100", "aliases": ["x"]}}, "alias 'x' is already the GPU a"),
])
def test_a_hardware_file_cannot_take_over_a_catalog_name(gpus, problem):
    with pytest.raises(InputError, match="hw.yaml") as refused:
        builtin_catalog().with_overrides(gpus, "hw.yaml")
    assert problem in str(refused.value)
    assert builtin_catalog().with_overrides({"lab": {"base": "h100", "aliases": ["mine"]}}).get("MINE").name == "lab"


# --- Prometheus scrapes ------------------------------------------------------------------------------
SCRAPE = (DATA / "diagnose" / "metrics_vllm_0_25_1_idle.txt").read_text()


@pytest.mark.parametrize("extra, problem", [
    ('vllm:num_preemptions_total{model_name="opt-125m-tp2",engine="0"} 4.0', "repeats the series"),
    ('vllm:kv_cache_usage_perc{engine="1",model_name="opt-125m-tp2"} 1.5', "fraction from 0 to 1"),
    ('vllm:kv_cache_usage_perc{engine="1",model_name="opt-125m-tp2"} -0.5', "at least 0"),
    ('vllm:time_to_first_token_seconds_bucket{engine="1",le="1,5",model_name="m"} 3', "le='1,5'"),
    ('vllm:prompt_tokens_total{engine="1",model_name="m"} NaN', "finite"),
    ('vllm:time_to_first_token_seconds_bucket{engine="1",le="-0.5",model_name="m"} 3', "below 0"),
    ('vllm:num_requests_running{engine="1",model_name="m"} 2.5', "is 2.5, but it counts"),
    ('vllm:time_to_first_token_seconds_count{engine="1",model_name="m"} 0.5', "but it counts"),
    ('vllm:time_to_first_token_seconds_bucket{engine="0",le="0.0001",model_name="opt-125m-tp2"} 1e9',
     "not cumulative"),
])
def test_scrapes_with_a_series_twice_or_values_out_of_range_are_refused(extra, problem):
    with pytest.raises(InputError, match="line") as refused:
        parse_vllm_metrics(SCRAPE + extra + "\n", "m.txt")
    assert problem in str(refused.value)


def test_a_second_engine_is_summed_not_refused():
    line = next(l for l in SCRAPE.splitlines() if l.startswith("vllm:num_preemptions_total{"))
    one = parse_vllm_metrics(SCRAPE, "m.txt").preemptions
    two = parse_vllm_metrics(SCRAPE + line.replace('engine="0"', 'engine="1"') + "\n", "m.txt").preemptions
    assert two == 2 * one


# --- vllm bench serve results ------------------------------------------------------------------------
def _bench(tmp_path: Path, **changes) -> Path:
    data = {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "num_prompts": 3, "request_rate": 2.0, "duration": 3.0,
            "completed": 3, "total_input_tokens": 300, "total_output_tokens": 30, "input_lens": [100] * 3,
            "output_lens": [10] * 3, "ttfts": [0.02] * 3, "itls": [[0.01] * 9] * 3, "errors": [""] * 3}
    path = tmp_path / "r.json"
    path.write_text(json.dumps({**data, **changes}).replace('"HUGE"', "9" * 320))
    return path


@pytest.mark.parametrize("changes, problem", [
    ({"duration": "HUGE"}, "duration is a number of 320 digits"),
    ({"output_lens": [10, "HUGE", 10]}, "output_lens.1 is a number of 320 digits"),
    ({k: [] for k in ("input_lens", "output_lens", "ttfts", "itls", "errors")}, "input_lens has 0 entries"),
])
def test_bench_results_beyond_floats_or_cut_short_are_refused(tmp_path, changes, problem):
    with pytest.raises(InputError, match="r.json") as refused:
        read_bench_result(_bench(tmp_path, **changes))
    assert problem in str(refused.value)


def test_a_table_of_bench_results_with_a_number_beyond_floats_is_refused(capsys, tmp_path):
    with open(ROOT / "calibration" / "measured" / "e2e" / "vllm_bench_public.csv", newline="") as stream:
        header, cells = list(csv.reader(stream))[:2]
    cells[header.index("completed")] = "9" * 330
    with open(tmp_path / "runs.csv", "w", newline="") as stream:
        csv.writer(stream).writerows([header, cells])
    err = one_line_exit_2(capsys, "validate", "--e2e", tmp_path / "runs.csv")
    assert "line 2, column 'completed'" in err and "not a finite number" in err


# --- command-line numbers and argparse ------------------------------------------------------------------
@pytest.mark.parametrize("argv, flag", [
    (["predict", "w.yaml", "--deployment", "d.yaml", "--seed", "-1"], "--seed"),
    (["predict", "w.yaml", "--deployment", "d.yaml", "--requests", "1" + "0" * 40], "--requests"),
    (["diagnose", "r.json", "--deployment", "d.yaml", "--bench-seed", str(10**29)], "--bench-seed"),
    (["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--concurrency", str(10**12)], "--concurrency"),
    (["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--context", "²"], "--context"),
    (["optimize", "--jobs", "100000"], "--jobs"),
    (["optimize", "--time", "nan"], "--time"),
    (["calibrate", "fit", "t.csv", "--holdout-fraction", "2"], "--holdout-fraction"),
    (["export", "job", "--format", "docker"], "--format"),
    (["nosuch"], "COMMAND"),
])
def test_bad_flags_are_one_line_naming_the_flag(capsys, argv, flag):
    err = one_line_exit_2(capsys, *argv)
    assert err.startswith(f"servopt{' ' + argv[0] if argv[0] != 'nosuch' else ''}: error: ") and flag in err


def test_no_command_or_action_is_one_line_not_the_usage_block(capsys):
    assert "servopt: error: choose a command: plan, predict" in one_line_exit_2(capsys)
    assert "servopt calibrate: error: choose an action: run, fit, import" in one_line_exit_2(capsys, "calibrate")


def test_pick_takes_ascii_trial_numbers_only_and_front_json_is_checked(capsys, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    (job / "front.json").write_text(json.dumps({"workload": {"objective": {"cost": "usd_per_hour", "latency": "e2e"}},
                                                "points": [{"trial": 1, "serve_id": "m/x"}]}))
    assert "points.0.deployment: required key is missing" in one_line_exit_2(capsys, "export", job)
    (job / "front.json").write_text(json.dumps({"workload": {"objective": {"cost": "usd_per_hour", "latency": "e2e"}},
                                                "points": []}))
    (job / "front.json").write_text(json.dumps({"workload": {"objective": {"cost": "usd_per_hour", "latency": "e2e"}},
                                                "points": [{"trial": 1, "serve_id": "m/x", "deployment": {"gpu": "h100"},
                                                            "gpus_per_node": 8, "metrics": {"cost_usd_per_hour": 1.0,
                                                                                            "p99_e2e_s": 2.0}}]}))
    for pick in ("²", "٣", "-1", "1" * 40):
        assert "--pick: expected cheapest, fastest or a trial number" in \
            one_line_exit_2(capsys, "export", job, "--pick", pick)
    (job / "front.json").write_text("[1, 2]")
    assert "expected a mapping" in one_line_exit_2(capsys, "export", job)


# --- storage URLs and secrets -------------------------------------------------------------------------
@pytest.mark.parametrize("url, problem", [
    ("sqlite:///:memory:", "in-memory"), ("sqlite://", "in-memory"), ("sqlite:///file::memory:?cache=shared", "in-memory"),
    ("journal:///dev/null", "not a regular file"), ("postgresql://u:p@ss@127.0.0.1:1/db", "unencoded '@'"),
])
def test_storages_that_cannot_hold_a_study_are_refused(url, problem):
    with pytest.raises(InputError, match=problem):
        open_storage(url)


def test_a_refused_journal_path_gets_no_lock_file_beside_it(tmp_path):
    (tmp_path / "folder").mkdir()
    os.mkfifo(tmp_path / "pipe")
    os.symlink(tmp_path / "elsewhere", tmp_path / "link")
    for name, problem in (("folder", "is a folder"), ("pipe", "FIFO"), ("link", "symbolic link")):
        with pytest.raises(InputError, match=problem):
            open_storage(journal_url(tmp_path / name))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "link", "pipe"]


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:s3cret@h/db", "postgresql://u:***@h/db"),
    ("postgresql://u:s%40cr%2Fet@h:5432/db", "postgresql://u:***@h:5432/db"),
    ("postgresql://u@h/db?sslmode=require&password=s3cret", "postgresql://u@h/db?sslmode=require&password=***"),
    ("postgresql://h/db?user=u&PassW%6Frd=s3cret&sslpassword=k3y", "postgresql://h/db?user=u&PassW%6Frd=***&sslpassword=***"),
    ("mysql+pymysql://u:s3cret@h/db?passwd=s3cret", "mysql+pymysql://u:***@h/db?passwd=***"),
    ("postgresql://u:a@b@h/db", "postgresql://u:***@h/db"),
])
def test_passwords_are_masked_in_every_spelling(url, shown):
    assert masked_url(url) == shown and has_hidden_password(shown) and not has_hidden_password(url)


def test_a_password_never_reaches_output_or_files(capsys, tmp_path):
    write_workload(tmp_path / "w.yaml", {**TINY, "storage": "postgresql+psycopg2://u@127.0.0.1:1/db?password=Zq8xK2vv"})
    err = one_line_exit_2(capsys, "optimize", tmp_path / "w.yaml", "--out", tmp_path / "out", "--no-progress")
    assert "Zq8xK2vv" not in err and "password=***" in err
    assert all("Zq8xK2vv" not in p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file())


# --- what we write ----------------------------------------------------------------------------------
def test_output_folders_and_files_are_checked_before_any_work(capsys, tmp_path):
    with pytest.raises(InputError, match="root folder"):
        output_folder("/", "--out", ["job.json"])
    bench = DATA / "diagnose" / "dennislee22_qwen2_7b_n1"
    assert "--seed-job '/' is the file system's root folder" in one_line_exit_2(
        capsys, "diagnose", f"{bench}.json", "--deployment", f"{bench}.deployment.yaml", "--seed-job", "/")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.md").write_text("mine")
    with pytest.raises(InputError, match="'.*mine' holds other files \\(notes.md\\)"):
        output_folder(tmp_path / "mine", "--out", ["job.json"])
    os.mkfifo(tmp_path / "pipe.csv")
    for path, problem in ((tmp_path / "mine", "is a folder"), (tmp_path / "pipe.csv", "FIFO")):
        with pytest.raises(InputError, match=problem):
            check_output_file(path, "--out")
    start = time.perf_counter()
    err = one_line_exit_2(capsys, "calibrate", "run", "--device", "cpu", "--out", tmp_path / "mine")
    assert "mine' is a folder" in err and time.perf_counter() - start < 10  # before the sweep


def test_model_ids_that_begin_with_a_dash_are_refused_and_local_paths_are_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "--trust-remote-code").mkdir()
    with pytest.raises(InputError, match="begins with '-'"):
        check_model_id("--trust-remote-code", "model")
    assert check_model_id("./--trust-remote-code", "model") == str(tmp_path / "--trust-remote-code")
    # A local folder shaped like a Hub id is the folder (as the model is resolved), exported absolute.
    (tmp_path / "models" / "llama").mkdir(parents=True)
    assert check_model_id("models/llama", "model") == str(tmp_path / "models" / "llama")
    assert check_model_id("meta-llama/Llama-3.1-8B", "model") == "meta-llama/Llama-3.1-8B"


def test_csv_cells_a_spreadsheet_would_run_are_text(tmp_path):
    frame = spreadsheet_safe(__import__("pandas").DataFrame(
        {"gpu": ["=1+1", "+A1", "-cmd", "@SUM(A1)", "\tx", "h100"], "usd_per_hour": [-1.0, 2, 3, 4, 5, 6]}))
    assert frame["gpu"].tolist() == ["'=1+1", "'+A1", "'-cmd", "'@SUM(A1)", "'\tx", "h100"]
    assert frame["usd_per_hour"].tolist()[0] == -1.0  # numbers stay numbers
    assert write_csv(tmp_path / "t.csv", frame.assign(gpu=["=x"] * 6)).read_text().splitlines()[1].startswith("'=x")


def test_export_options_another_format_would_ignore_are_refused(capsys, tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    for argv, problem in ((["--format", "json", "--out", tmp_path / "x"], "--format json prints what it exports"),
                          (["--format", "sglang", "--out", tmp_path / "x"], "--format sglang prints"),
                          (["--namespace", "prod"], "--namespace is an option of --format kubernetes"),
                          (["--format", "yaml", "--image", "mine:1"], "--image is an option of --format kubernetes"),
                          (["--vllm-python", "/usr/bin/python3"], "--vllm-python names the vLLM that --check runs"),
                          (["--format", "sglang", "--check", "--vllm-python", "/usr/bin/python3"], "add --check")):
        assert problem in one_line_exit_2(capsys, "export", job, *argv)
    assert not (tmp_path / "x").exists()


def test_printed_export_hints_are_shell_quoted(tmp_path):
    hint = export_command(tmp_path / "o;touch x;#")
    subprocess.run(["bash", "-c", hint.replace("servopt", "true", 1)], cwd=tmp_path, check=True)
    assert not (tmp_path / "x").exists()
    # A relative folder named like an option is pasted as a path, not read as one.
    assert export_command("-o") == "servopt export ./-o --pick cheapest"


# --- journal safety ---------------------------------------------------------------------------------
def test_a_planted_journal_link_leaves_its_target_unchanged(capsys, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.symlink(victim, out / "study.journal")
    write_workload(tmp_path / "w.yaml", TINY)
    assert "symbolic link" in one_line_exit_2(capsys, "optimize", tmp_path / "w.yaml", "--out", out, "--no-progress")
    assert victim.read_text() == "keep me\n"


def _finished(journal: Path) -> dict[int, tuple | None]:
    storage = open_storage(journal_url(journal))
    study = optuna.load_study(study_name=optuna.get_all_study_summaries(storage)[0].study_name, storage=storage)
    return {t.number: tuple(t.values or ()) for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")}


def test_a_torn_last_line_is_cut_and_every_finished_trial_kept(tmp_path):
    journal = tmp_path / "study.journal"
    study = optuna.create_study(storage=open_storage(journal_url(journal)), study_name="s")
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=6)
    whole = journal.read_bytes()
    journal.write_bytes(whole + whole.splitlines()[-1][:17])  # what a kill mid-append leaves
    storage = open_storage(journal_url(journal))
    assert "cut short" in storage.repaired and journal.read_bytes() == whole
    again = optuna.load_study(study_name="s", storage=storage)
    again.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    assert len(_finished(journal)) == 8
    # An older servopt appended after a torn line: the torn part goes, the whole record after it stays.
    lines = journal.read_bytes().split(b"\n")
    lines[5] = lines[9][:23] + lines[5]
    journal.write_bytes(b"\n".join(lines))
    assert "torn mid-file" in open_storage(journal_url(journal)).repaired
    assert len(_finished(journal)) == 8
    # Blank lines (an editor's) hold nothing and go; a line that is no record is named, never guessed at.
    whole = journal.read_bytes()
    journal.write_bytes(whole.replace(b"\n", b"\n\n", 3))
    assert "3 blank line(s) are dropped" in open_storage(journal_url(journal)).repaired
    assert journal.read_bytes() == whole and len(_finished(journal)) == 8
    journal.write_bytes(whole.replace(b"\n", b'\n{"a": 1}\n', 1))
    with pytest.raises(InputError, match="line 2 is not an Optuna journal record"):
        open_storage(journal_url(journal))


def test_a_deployment_two_trials_drew_is_scored_by_the_lower_one_only(tmp_path):
    study = optuna.create_study(storage=open_storage(journal_url(tmp_path / "s.journal")),
                                directions=["minimize", "minimize"])
    first, second = study.ask(), study.ask()
    assert claim_deployment(first, "h100/tp2") is None  # the first to draw it scores it
    with pytest.raises(AlreadyScored):  # while it runs, the higher-numbered one waits (here: not at all)
        claim_deployment(second, "h100/tp2", wait_s=0.0)
    study.tell(first, [1.0, 2.0])
    assert claim_deployment(second, "h100/tp2").number == first.number  # then takes its outcome
    assert claim_deployment(study.ask(), "h100/tp4") is None


@pytest.mark.skipif(os.geteuid() != 0 or sys.platform != "linux", reason="mounting a small tmpfs needs root on Linux")
def test_a_full_disk_is_one_line_and_every_finished_trial_is_kept(capsys, tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    # 64 KiB: a few trials' records (about 12 KB each), then the disk is full in the middle of the search.
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True).returncode:
        pytest.skip("this machine lets root mount no tmpfs")
    try:
        workload = write_workload(tmp_path / "w.yaml", {**TINY, "budget": {"trials": 12},
                                                        "fidelity": {"search_requests": 60, "final_requests": 60}})
        # In a process of its own, as a user runs it: Optuna's log lines would show on its stderr.
        full = run_cli_process(["optimize", str(workload), "--out", str(disk / "job"), "--no-progress"], tmp_path)
        err = full.stderr
        assert full.returncode == 2 and err.count("\n") == 1, err
        assert "study.journal' could not be written: No space left on device" in err
        journal = disk / "job" / "study.journal"
        assert journal.read_bytes().endswith(b"\n")
        before = _finished(journal)
        assert before
        subprocess.run(["mount", "-o", "remount,size=20m", str(disk)], check=True)
        assert main(["optimize", str(workload), "--out", str(disk / "job"), "--no-progress"]) == 0
        after = _finished(journal)
        assert len(after) >= 12 and all(after[n] == v for n, v in before.items())
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_workers_end_when_their_parent_is_killed(tmp_path):
    # A parent whose child watches it (as --jobs workers do), killed with SIGKILL.
    script = ("import os, sys, time\n"
              "from servopt.optimizer._lifeline import exit_with_parent\n"
              "pid = os.fork()\n"
              "if pid == 0:\n"
              "    exit_with_parent()\n"
              "    print(os.getpid(), flush=True)\n"
              "    time.sleep(60)\n"
              "    os._exit(0)\n"
              "time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.time() + 10
    while time.time() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child)
    assert exit_with_parent() is None  # in this process, a no-op watcher of a live parent


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waits for its reaper: it runs no more
        return stat.read().split()[2] != "Z"
