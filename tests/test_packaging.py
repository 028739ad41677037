"""servopt must install under its own namespace only (PyPI has costmodels, optimizer, results)."""

import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import servopt.costmodels
import servopt.optimizer
import servopt.results

CARD_FOLDERS = ("costmodels", "calibration", "search_spaces", "optimizer", "results")


def test_wheel_installs_only_the_servopt_namespace(tmp_path):
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(root), "-w", str(tmp_path)],
                   check=True, capture_output=True)
    (wheel,) = tmp_path.glob("servopt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"servopt"}
    # Shipped data travels with the code.
    assert "servopt/costmodels/data/gpus.yaml" in names
    assert any(name.startswith("servopt/costmodels/data/models/") for name in names)


def test_subpackages_resolve_to_the_card_folders():
    root = Path(__file__).resolve().parents[1]
    for module in (servopt.costmodels, servopt.optimizer, servopt.results):
        assert Path(module.__file__).resolve().parent.parent == root


def test_console_script_is_declared():
    scripts = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts.get("servopt") == "servopt.optimizer.cli:main"
