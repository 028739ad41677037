"""report.html as a reader's browser shows it: load it in headless Chromium and measure.

The page is loaded from a copy with a small probe put first in its ``<head>``: the probe records
console errors, uncaught exceptions and resources that fail to load, and, once the page has loaded,
writes what it measured (plots drawn, points in them, widths) into the DOM, which Chromium's
``--dump-dom`` prints. A second run takes a screenshot as tall as the page. Used by the tests and
``benchmarks/bench_report_browser.py``; needs Debian's ``chromium`` (``apt-get install chromium``).

Example:
    >>> find_browser() is None or find_browser().endswith(("chromium", "chromium-browser", "google-chrome"))
    True
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

BROWSER_ENV = "SERVOPT_CHROMIUM"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# As root Chromium needs --no-sandbox; the rest keep it off the network (there is none to reach)
# and away from the first-run machinery.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--mute-audio")
# Virtual time Chromium gives the page's scripts before it dumps or shoots (not wall time).
SCRIPT_BUDGET_MS = 15000
TIMEOUT_S = 120
_ATTRIBUTE = "data-servopt-check"
_PROBE = """<script>
(function () {
  var errors = [];
  var original = console.error;
  console.error = function () {
    errors.push(Array.prototype.map.call(arguments, String).join(" "));
    return original.apply(console, arguments);
  };
  window.addEventListener("error", function (event) {
    var target = event.target || {};
    errors.push(event.message || ("failed to load " + (target.src || target.href || target.tagName)));
  }, true);
  window.addEventListener("unhandledrejection", function (event) { errors.push(String(event.reason)); });
  window.addEventListener("load", function () {
    setTimeout(function () {
      var width = window.innerWidth;
      var plots = Array.prototype.map.call(document.querySelectorAll(".js-plotly-plot"), function (el) {
        var box = el.getBoundingClientRect();
        return {id: el.id, drawn: !!el.querySelector("svg.main-svg"),
                points: el.querySelectorAll(".scatterlayer path.point").length,
                left: box.left, right: box.right, width: box.width, height: box.height};
      });
      var tables = Array.prototype.map.call(document.querySelectorAll("table"), function (el) {
        var box = el.getBoundingClientRect();
        return {left: box.left, right: box.right, rows: el.rows.length};
      });
      document.documentElement.setAttribute("%s", JSON.stringify({
        errors: errors, plots: plots, tables: tables, viewport_width: width,
        page_width: document.documentElement.scrollWidth, page_height: document.documentElement.scrollHeight,
        plotly: typeof Plotly !== "undefined"
      }));
    }, 0);
  });
})();
</script>""" % _ATTRIBUTE


@dataclass
class BrowserCheck:
    """What Chromium saw: errors, the plots and tables with their boxes, and the page's size."""

    browser: str
    errors: list[str]
    plots: list[dict]
    tables: list[dict]
    viewport_width: int
    page_width: int
    page_height: int
    plotly_loaded: bool

    @property
    def cut_off(self) -> list[str]:
        """What reaches past the window's right edge (a page wider than the window included)."""
        out = [f"plot {p['id']}" for p in self.plots if p["right"] > self.viewport_width + 0.5]
        out += [f"table {i}" for i, t in enumerate(self.tables) if t["right"] > self.viewport_width + 0.5]
        if self.page_width > self.viewport_width:
            out.append(f"the page ({self.page_width} px wide)")
        return out


def find_browser() -> str | None:
    """Chromium's path: ``$SERVOPT_CHROMIUM``, else the first of :data:`BROWSERS` on PATH."""
    explicit = os.environ.get(BROWSER_ENV)
    if explicit:
        return shutil.which(explicit)
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def _run(browser: str, profile: str, width: int, height: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}",
         f"--virtual-time-budget={SCRIPT_BUDGET_MS}", *args],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )


def check_page(page: str | Path, width: int = 1280, screenshot: str | Path | None = None,
               browser: str | None = None) -> BrowserCheck:
    """Load ``page`` at ``width`` px; with ``screenshot``, also write a PNG of the whole page."""
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError("no Chromium found: apt-get install chromium, or set " + BROWSER_ENV)
    text = Path(page).read_text()
    head = re.search(r"<head[^>]*>", text)
    if head is None:
        raise ValueError(f"{page} has no <head>")
    with tempfile.TemporaryDirectory() as tmp:
        probed = Path(tmp) / Path(page).name
        probed.write_text(text[:head.end()] + _PROBE + text[head.end():])
        # The files the page loads by a relative name (plotly.min.js) stay beside the copy.
        for name in re.findall(r"""<script[^>]*src=['"]([^'"/:]+)['"]""", text):
            if (Path(page).parent / name).is_file():
                (Path(tmp) / name).symlink_to((Path(page).parent / name).resolve())
        dump = _run(browser, str(Path(tmp) / "profile"), width, 900, "--dump-dom", probed.as_uri())
        found = re.search(f'{_ATTRIBUTE}="([^"]*)"', dump.stdout)
        if found is None:
            raise RuntimeError(f"{browser} did not finish loading {page} (exit {dump.returncode}): "
                               + (dump.stderr.strip().splitlines() or ["no output"])[-1])
        seen = json.loads(html.unescape(found.group(1)))
        if screenshot is not None:
            shot = _run(browser, str(Path(tmp) / "profile"), width, int(seen["page_height"]),
                        f"--screenshot={Path(screenshot).resolve()}", Path(page).resolve().as_uri())
            if not Path(screenshot).exists():
                raise RuntimeError(f"{browser} wrote no screenshot (exit {shot.returncode})")
    return BrowserCheck(browser=browser, errors=seen["errors"], plots=seen["plots"], tables=seen["tables"],
                        viewport_width=seen["viewport_width"], page_width=seen["page_width"],
                        page_height=seen["page_height"], plotly_loaded=seen["plotly"])
