"""Job-folder writes: atomic, never through a planted link, and a broken job.json recovered."""

import json
import os

import pytest

from servopt.costmodels.errors import InputError
from servopt.costmodels.outfiles import read_text, write_text
from tests._optimizer_fixtures import TINY, serving  # noqa: F401


def test_write_is_atomic_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "job.json"
    write_text(target, "old")

    def killed(*_args):
        raise KeyboardInterrupt  # a kill between writing and renaming

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_text(target, "new content")
    monkeypatch.undo()
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["job.json"]


def test_a_planted_link_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    (tmp_path / "out").mkdir()
    os.symlink(victim, tmp_path / "out" / "report.md")
    write_text(tmp_path / "out" / "report.md", "# report")
    assert victim.read_text() == "keep me" and not (tmp_path / "out" / "report.md").is_symlink()


def test_reading_back_refuses_a_link(tmp_path):
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "job.json")
    (tmp_path / "elsewhere.json").write_text("{}")
    with pytest.raises(InputError, match="symbolic link"):
        read_text(tmp_path / "job.json", "job file")


def _tiny_job(tmp_path):
    from servopt.optimizer.job import Job
    from servopt.optimizer.workload import parse_workload

    workload = parse_workload({**TINY, "budget": {"trials": 4}}, "test")
    return Job(workload, tmp_path / "job", name="tiny")


def test_results_do_not_write_through_planted_links(tmp_path, serving):  # noqa: F811
    from servopt.results import write_results

    job = _tiny_job(tmp_path)
    job.run(progress=False)
    victim = tmp_path / "victim.md"
    victim.write_text("keep me")
    os.symlink(victim, job.out_dir / "report.md")
    write_results(job.out_dir, job.collect())
    assert victim.read_text() == "keep me" and (job.out_dir / "report.md").read_text().startswith("# servopt")


def test_truncated_job_file_is_recovered_by_rerun_report_and_export(tmp_path, serving, capsys):  # noqa: F811
    from servopt.optimizer.cli import main
    from servopt.optimizer.job import Job

    job = _tiny_job(tmp_path)
    job.run(progress=False)
    path = job.out_dir / "job.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2])  # what a kill mid-write used to leave
    recovered = Job.load(job.out_dir)  # report and export: rebuilt from the folder's study
    assert recovered.study_name == job.study_name and recovered.workload == job.workload
    assert json.loads(path.read_text())["study"] == job.study_name
    path.write_text(text[:10])
    outcome = _tiny_job(tmp_path).run(progress=False)  # optimize rerun: the study confirms the workload
    assert outcome.notes and "unreadable" in outcome.notes[0]
    assert json.loads(path.read_text())["workload"] == job.workload.model_dump(mode="json")
    path.write_text("{")
    (job.out_dir / "study.journal").unlink()
    assert main(["report", str(job.out_dir)]) == 2
    assert "no study.journal to rebuild it from" in capsys.readouterr().err
