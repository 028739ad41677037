"""Storage URLs: passwords never printed or saved, one-line errors, and a real PostgreSQL shared by
two workers that finish exactly the trial budget."""

import importlib.util
import json
import subprocess
import sys

import pytest
from _optimizer_fixtures import TINY, run_cli_process, serving, write_workload  # noqa: F401
from _postgres import PASSWORD, free_port

from servopt.optimizer._storage import STORAGE_ENV, masked_url
from servopt.optimizer.study import DEPLOYMENT_ATTR, SAME_AS_ATTR
from servopt.optimizer.cli import main


def files_text(folder):
    return {path.name: path.read_bytes().decode(errors="replace") for path in folder.rglob("*") if path.is_file()}


def test_masked_url():
    assert masked_url("postgresql+psycopg2://u:p%40ss@h:5432/db") == "postgresql+psycopg2://u:***@h:5432/db"
    assert masked_url("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    assert masked_url("postgresql://u:pw@h:notaport/db") == "postgresql://u:***@h:notaport/db"  # unparseable too


@pytest.mark.parametrize("url, expected", [
    ("not a url", "is not a SQLAlchemy URL"),
    ("postgresql+psycopg2://servopt:{pw}@127.0.0.1:notaport/db", "is not a SQLAlchemy URL"),
    ("nosuchdb://servopt:{pw}@127.0.0.1/db", "knows no database 'nosuchdb'"),
    ("postgresql+pg8000://servopt:{pw}@127.0.0.1/db", "driver 'pg8000' is not installed (pip install 'pg8000')"),
])
def test_bad_storage_is_one_line_without_the_password(tmp_path, capsys, url, expected):
    if "pg8000" in url and importlib.util.find_spec("pg8000"):
        pytest.skip("pg8000 is installed here")
    workload = write_workload(tmp_path / "w.yaml", TINY)
    code = main(["optimize", str(workload), "--out", str(tmp_path / "out"), "--no-progress",
                 "--storage", url.format(pw=PASSWORD)])
    out, err = capsys.readouterr()
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1
    assert PASSWORD not in out + err
    assert not (tmp_path / "out" / "job.json").exists()


def test_unreachable_postgres_exits_2_without_printing_or_saving_the_password(tmp_path):
    pytest.importorskip("psycopg2")
    workload = write_workload(tmp_path / "w.yaml", TINY)
    url = f"postgresql+psycopg2://servopt:{PASSWORD}@127.0.0.1:{free_port()}/studies"  # nothing listens there
    result = run_cli_process(["optimize", str(workload), "--out", str(tmp_path / "out"), "--storage", url], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]  # one line, no traceback
    assert "cannot be opened" in result.stderr and "servopt:***@127.0.0.1" in result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    assert all(PASSWORD not in text for text in files_text(tmp_path).values())


def test_report_asks_for_a_hidden_password_again(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "job.json").write_text(json.dumps({"study": "s", "storage": "postgresql+psycopg2://u:***@h/db",
                                              "workload": TINY}))
    assert main(["report", str(out)]) == 2
    assert f"--storage URL or set {STORAGE_ENV}" in capsys.readouterr().err
    assert main(["report", str(out), "--storage", "postgresql+psycopg2://u:pw@other/db"]) == 2
    assert "is not this job's" in capsys.readouterr().err


def test_version_and_a_closed_pipe(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("servopt 0.")
    # `servopt gpus | head`: the reader is gone before servopt writes.
    proc = subprocess.Popen([sys.executable, "-m", "servopt.optimizer", "gpus"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


# --- PostgreSQL ---------------------------------------------------------------------------------
def test_two_workers_on_postgres_finish_the_budget_exactly(tmp_path, postgres_url):
    budget = 20
    workload = write_workload(tmp_path / "w.yaml", {**TINY, "budget": {"trials": budget}})
    procs = [run_cli_process(["optimize", str(workload), "--study", "shared", "--storage", postgres_url, "--out",
                              str(tmp_path / f"out{i}"), "--no-progress", "--json"], tmp_path, wait=False)
             for i in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    reports = [json.loads(out) for out, _ in results]
    ran = [r["new_trials"] for r in reports]
    print("trials per worker:", ran)
    assert sum(ran) == budget and all(r["trials"] == budget for r in reports)
    assert all(r["workers"][0]["trials"] == n for r, n in zip(reports, ran, strict=True))
    for out, err in results:
        assert PASSWORD not in out + err
    for i in range(2):
        assert all(PASSWORD not in text for text in files_text(tmp_path / f"out{i}").values())
        saved = json.loads((tmp_path / f"out{i}" / "job.json").read_text())
        assert saved["storage"] == masked_url(postgres_url) and ":***@" in saved["storage"]

    import optuna

    study = optuna.load_study(study_name="shared", storage=postgres_url)
    finished = [t for t in study.trials if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)]
    assert len(finished) == budget
    # A trial that lost the race for the last slot is failed without running; never a 21st result. The
    # two processes draw the same proposals (one seed): a trial whose deployment the other drew first
    # takes that trial's outcome, never scoring it again.
    assert len(study.trials) - len(finished) <= 1
    scored = [t.system_attrs[DEPLOYMENT_ATTR] for t in finished if SAME_AS_ATTR not in t.user_attrs]
    assert len(set(scored)) == len(scored)
    assert PASSWORD not in json.dumps(study.user_attrs)

    # A later command gets the URL again from --storage or the environment, never from disk.
    without = run_cli_process(["report", str(tmp_path / "out0")], tmp_path)
    assert without.returncode == 2 and STORAGE_ENV in without.stderr and PASSWORD not in without.stderr
    assert run_cli_process(["report", str(tmp_path / "out0")], tmp_path, env={STORAGE_ENV: postgres_url}).returncode == 0
    assert run_cli_process(["report", str(tmp_path / "out1"), "--storage", postgres_url], tmp_path).returncode == 0
    assert all(PASSWORD not in text for text in files_text(tmp_path / "out0").values())
