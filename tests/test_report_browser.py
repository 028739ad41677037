"""report.html in a real headless browser (Debian's chromium): it loads without errors, the plots
render with their points, and nothing is cut off at 1,280 px. Skips where no Chromium is installed
(``.ci/run`` installs it)."""

import json
import re

import pytest
from _optimizer_fixtures import TINY, serving, write_workload  # noqa: F401

from servopt.optimizer.cli import main
from servopt.results._browser import check_page, find_browser

pytestmark = pytest.mark.skipif(find_browser() is None, reason="no Chromium (apt-get install chromium)")
# A study name is the user's text: were it markup, the page would load an image and run its handler.
HOSTILE = "chat</title><img src=x onerror=console.error('injected')>"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    data = {**TINY, "slo": {"p99_ttft_s": 0.5, "p99_tpot_s": 0.05, "p99_e2e_s": 20}, "budget": {"trials": 16}}
    workload = write_workload(tmp / "w.yaml", data)
    assert main(["optimize", str(workload), "--out", str(tmp / "out"), "--study", HOSTILE, "--no-progress"]) == 0
    return tmp / "out" / "report.html"


def test_loads_without_errors_and_draws_every_plot(report, tmp_path):
    seen = check_page(report, width=1280, screenshot=tmp_path / "report.png")
    assert seen.errors == [] and seen.plotly_loaded
    # The objective's latency, then the TTFT and TPOT panels of the workload's SLOs.
    assert [p["id"] for p in seen.plots] == ["plot-e2e", "plot-ttft", "plot-tpot"]
    assert all(p["drawn"] and p["points"] > 0 and p["height"] > 300 for p in seen.plots)
    assert seen.cut_off == []
    assert seen.tables and seen.tables[0]["rows"] > 2
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_narrow_window_scrolls_the_table_not_the_page(report):
    seen = check_page(report, width=800)
    assert seen.errors == [] and seen.page_width <= 800
    assert all(p["right"] <= 800 for p in seen.plots)


def test_user_text_stays_text(report):
    page = report.read_text()
    assert HOSTILE not in page and "&lt;img src=x" in page


def test_hover_shows_the_deployment_and_predictions(report):
    page = report.read_text()
    start = re.search(r'Plotly\.newPlot\(\s*"plot-e2e",\s*', page).end()
    traces, _ = json.JSONDecoder().raw_decode(page, start)
    texts = [t for trace in traces for t in trace.get("hovertext") or []]
    assert texts and all("max_num_seqs" in t and "P99 TTFT" in t and "/hour" in t for t in texts)
    front = [t for t in texts if "Pareto front" in t]
    assert front and all("GPUs used" in t and "rented" in t and "model meta-llama/" in t for t in front)


def test_the_probe_sees_errors(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><head></head><body><img src='missing.png'>"
                    "<script>console.error('boom'); notDefined();</script></body></html>")
    seen = check_page(page, width=1280)
    assert len(seen.errors) == 3 and "boom" in seen.errors[0] and not seen.plotly_loaded


def test_a_report_of_two_tenants_fits_1280_px_without_scrolling(tmp_path):
    # Issue 29 (7): a column per class and metric made the front table scroll sideways at 1,280 px.
    classes = [{"name": "chat", "share": 0.5, "slo": {"p99_ttft_s": 0.5}},
               {"name": "batch", "share": 0.5, "priority": 1, "slo": {"p99_e2e_s": 30}}]
    data = {**TINY, "traffic": {**TINY["traffic"], "classes": classes}, "budget": {"trials": 10},
            "space": {**TINY["space"], "scheduling_policy": ["fcfs", "priority"]}}
    workload = write_workload(tmp_path / "w.yaml", data)
    assert main(["optimize", str(workload), "--out", str(tmp_path / "out"), "--no-progress"]) == 0
    seen = check_page(tmp_path / "out" / "report.html", width=1280)
    assert seen.errors == [] and seen.cut_off == []
    assert seen.tables and seen.tables[0]["right"] <= 1280
