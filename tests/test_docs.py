"""The file reference in docs/ is generated from the models, and current."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _builder():
    spec = importlib.util.spec_from_file_location("build_schema_docs", ROOT / "scripts" / "build_schema_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_workload_reference_is_current():
    builder = _builder()
    assert (ROOT / "docs" / "workload.md").read_text() == builder.render(), (
        "docs/workload.md is out of date: run python scripts/build_schema_docs.py")


def test_reference_lists_every_key_and_every_length_distribution():
    from servopt.optimizer.workload import Workload

    text = (ROOT / "docs" / "workload.md").read_text()
    assert all(f"| `{key}` |" in text for key in Workload.model_fields)
    for kind in ("fixed", "uniform", "lognormal", "histogram", "dataset"):
        assert f"[{kind}](#{kind}length)" in text
    assert "| `max_drop_pct` | number | percent | `3.0` | >= 0, <= 100 |" in text


def test_reference_names_every_type_as_a_user_reads_it():
    # Issue 29 (9): a type defined further down its module printed as ForwardRef('ModelId').
    text = (ROOT / "docs" / "workload.md").read_text()
    assert "ForwardRef" not in text
    assert "| `model` | string |" in text and "| `checkpoint` | string or null |" in text


def test_readme_and_reference_say_what_a_user_needs_and_nothing_they_cannot_check():
    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11 or newer" in readme and "servopt plan --model" in readme
    reference = (ROOT / "docs" / "reference.md").read_text()
    # The seed is not a document users have; plotly.js is a file beside the report, not inlined.
    assert "seed 7.4" not in reference and "plotly.js inlined" not in reference
    assert "plotly.min.js" in reference
