"""Reports: the files a job writes, and `servopt report DIR` regenerating them."""

import re

import pandas as pd
import pytest
from _optimizer_fixtures import TINY, serving, write_workload  # noqa: F401

from servopt.optimizer.cli import main


@pytest.fixture
def job_dir(tmp_path, serving):  # noqa: F811
    workload = write_workload(tmp_path / "chat.yaml", {**TINY, "budget": {"trials": 16}})
    assert main(["optimize", str(workload), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    return tmp_path / "out"


def test_files_and_columns(job_dir):
    trials = pd.read_csv(job_dir / "trials.csv")
    assert len(trials) == 16
    for col in ("trial", "feasible", "fidelity", "reason", "gpu", "tp", "quantization", "kv_cache_dtype",
                "max_num_seqs", "max_num_batched_tokens", "cost_usd_per_hour", "p99_ttft_s", "p99_e2e_s",
                "accuracy_drop_pct"):
        assert col in trials
    pareto = pd.read_csv(job_dir / "pareto.csv")
    assert len(pareto) >= 1
    for col in ("gpu", "num_gpus", "quantization", "kv_cache_dtype", "tp", "max_num_seqs", "max_num_batched_tokens",
                "pd_split", "speculation", "cost_usd_per_hour", "cost_usd_per_output_mtoken",
                "cost_usd_per_total_mtoken", "gpus_rented", "model", "profile_calibrated", "p99_ttft_s", "p99_tpot_s",
                "p99_e2e_s", "output_tokens_per_s", "accuracy_drop_pct", "memory_headroom_gib", "why"):
        assert col in pareto
    assert pareto["cost_usd_per_hour"].is_monotonic_increasing
    assert pareto["p99_e2e_s"].is_monotonic_decreasing  # a front: paying more buys latency


def test_html_is_self_contained(job_dir):
    html = (job_dir / "report.html").read_text()
    assert "Plotly.newPlot" in html and "Pareto front" in html
    # Nothing is fetched from anywhere: the one script it loads is plotly.js, written beside it.
    assert re.findall(r"""<(?:script|link|img)[^>]*(?:src|href)=['"]([^'"]*)""", html) == ["plotly.min.js"]
    assert (job_dir / "plotly.min.js").stat().st_size > 1_000_000 and len(html) < 1_000_000


def test_report_flags_uncalibrated_gpus(job_dir):
    from servopt.calibration.registry import shipped_profile

    md = (job_dir / "report.md").read_text()
    for gpu in ("h100", "a100-80gb"):
        line = next(line for line in md.splitlines() if line.startswith(f"- {gpu} ("))
        assert ("UNCALIBRATED" in line) == (shipped_profile(gpu) is None or not shipped_profile(gpu).calibrated)


def test_report_states_profiles(job_dir):
    md = (job_dir / "report.md").read_text()
    assert "## Calibration profiles" in md and "- h100" in md and "- a100-80gb" in md


def test_report_command_regenerates(job_dir, capsys):
    for name in ("report.md", "report.html", "pareto.csv", "trials.csv", "front.json"):
        (job_dir / name).unlink()
    assert main(["report", str(job_dir)]) == 0
    assert (job_dir / "report.html").exists() and (job_dir / "front.json").exists()


def test_report_of_a_folder_without_a_job(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "not an optimize job folder" in capsys.readouterr().err


def test_front_rows_on_uncalibrated_gpus_are_marked(tmp_path, serving):  # noqa: F811
    """L4 has no calibration profile: its front rows, the report and the export header say so."""
    workload = write_workload(tmp_path / "l4.yaml", {**TINY, "gpus": ["l4"], "budget": {"trials": 8}})
    assert main(["optimize", str(workload), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and "| l4 " in line]
    assert rows and all("l4 (UNCALIBRATED)" in row for row in rows)
    assert "l4 (UNCALIBRATED)" in (tmp_path / "out" / "report.html").read_text()
    assert main(["export", str(tmp_path / "out"), "--out", str(tmp_path / "export")]) == 0
    assert "# UNCALIBRATED" in (tmp_path / "export" / "node-0.sh").read_text()


def test_unservable_load_names_the_capacity_not_the_slo(tmp_path, capsys):
    """Most trials saturating is a capacity problem: the explanation says what each GPU sustains and
    how many GPUs the asked rate needs, not only which SLO failed."""
    from _optimizer_fixtures import TINY, write_workload

    from servopt.optimizer.cli import main

    data = {**TINY, "traffic": {**TINY["traffic"], "arrival": {"kind": "poisson", "rate_per_s": 400}},
            "gpus": ["a100-80gb"], "limits": {"max_gpus": 2}, "budget": {"trials": 10}}
    assert main(["optimize", str(write_workload(tmp_path / "w.yaml", data)), "--out", str(tmp_path / "out"),
                 "--no-progress"]) == 2
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.strip().startswith("- a100-80gb"))
    assert "at most" in line and "400 requests/s would need about" in line
    assert "Lower traffic.arrival.rate_per_s" in out and "inf s" not in out
