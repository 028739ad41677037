"""report.html in headless Chromium at 1,280 px: console errors, plots drawn, anything cut off, and a
screenshot of the whole page to look at.

    python benchmarks/bench_report_browser.py [DIR] [--width 1280] [--screenshot report-1280.png]

Without DIR it runs the built-in job with a 150-trial budget first. Needs Debian's chromium.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from bench_optimizer_setup import default_job_file, run

from servopt.results._browser import check_page


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", nargs="?", help="a job folder (default: run the built-in job)")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--screenshot", default="report-1280.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.dir) if args.dir else Path(tmp) / "default"
        if not args.dir:
            job = default_job_file(tmp, 150)
            proc = run(["optimize", str(job), "--out", str(folder), "--study", "default", "--no-progress"])
            if proc.returncode not in (0, 2):
                raise SystemExit(proc.stderr)
        page = folder / "report.html"
        seen = check_page(page, width=args.width, screenshot=args.screenshot)
        size_mb = page.stat().st_size / 1e6
    plots = ", ".join(f"{p['id']} {p['points']} points {p['width']:.0f}x{p['height']:.0f} px" for p in seen.plots)
    ok = not seen.errors and seen.plotly_loaded and all(p["drawn"] and p["points"] for p in seen.plots) \
        and not seen.cut_off
    print(f"{seen.browser} at {seen.viewport_width} px: report.html {size_mb:.1f} MB, {len(seen.errors)} console "
          f"errors{': ' + '; '.join(seen.errors) if seen.errors else ''}; plots: {plots}; front table "
          f"{seen.tables[0]['rows'] if seen.tables else 0} rows (header, then each point and its why); page "
          f"{seen.page_width}x{seen.page_height} px; cut off: "
          f"{', '.join(seen.cut_off) or 'nothing'}; screenshot {args.screenshot}: {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
