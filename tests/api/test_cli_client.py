"""The CLI's client verbs against a live API: output, exit codes and one-line errors."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN_TOKEN, READ_TOKEN, api_settings, seed_task
from tests.api.live import serve

DAG_YAML = """\
dag_id: etl
schedule: null
tasks:
  - id: extract
    image: python:3.12-slim
    command: ["true"]
  - id: load
    image: python:3.12-slim
    command: ["true"]
    depends_on: [extract]
---
dag_id: report
tasks:
  - id: build
    image: python:3.12-slim
    command: ["true"]
"""


@pytest.fixture
def api_url(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        yield url


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_dag_and_run_verbs(api_url: str, database_url: str, tmp_path: Path,
                           capsys: pytest.CaptureFixture[str]) -> None:
    specs = tmp_path / "dags.yaml"
    specs.write_text(DAG_YAML)
    code, out, _ = run_cli(capsys, "dags", "apply", str(specs))
    assert code == 0
    assert out.splitlines() == ["etl: applied (version 1)", "report: applied (version 1)"]
    assert run_cli(capsys, "dags", "apply", str(specs))[1].splitlines()[0] == "etl: unchanged (version 1)"

    code, out, _ = run_cli(capsys, "dags", "pause", "report")
    assert (code, out.strip()) == (0, "report: paused")
    code, out, _ = run_cli(capsys, "dags", "list")
    lines = out.splitlines()
    assert lines[0].split() == ["DAG", "PAUSED", "SCHEDULE", "VERSION", "LAST", "RUN", "NEXT", "RUN", "SOURCE"]
    assert lines[1].split()[-1] == "-"  # applied by hand: no sync source
    assert lines[1].split()[:2] == ["etl", "no"] and lines[2].split()[:2] == ["report", "yes"]
    assert run_cli(capsys, "dags", "unpause", "report")[1].strip() == "report: unpaused"

    code, out, _ = run_cli(capsys, "runs", "trigger", "etl", "--run-id", "r1", "--conf", '{"day": 1}')
    assert (code, out.strip()) == (0, "etl: triggered run r1")
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"log": "hello from extract\n"}])
    code, out, _ = run_cli(capsys, "runs", "list", "etl")
    assert code == 0 and out.splitlines()[1].split()[:3] == ["r1", "queued", "manual"]
    code, out, _ = run_cli(capsys, "runs", "show", "etl", "r1")
    assert code == 0 and "state:    queued" in out and '{"day": 1}' in out
    assert any(line.split()[:3] == ["extract", "success", "1/3"] for line in out.splitlines())
    code, out, _ = run_cli(capsys, "tasks", "logs", "etl", "r1", "extract")
    assert (code, out) == (0, "hello from extract\n")


def test_errors_are_one_line_and_exit_1(api_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(DAG_YAML.replace("depends_on: [extract]", "depends_on: [extrct]"))
    code, _, err = run_cli(capsys, "dags", "apply", str(bad))
    assert code == 1
    # file:line:column of the value, the document (the file holds two), the path, the problem.
    assert err.strip().splitlines()[0] == \
        f"leoflow: error: {bad}:10:18: document 0: tasks[1].depends_on[0]: unknown task 'extrct'"

    broken = tmp_path / "broken.yaml"
    broken.write_text("dag_id: [unclosed")
    code, _, err = run_cli(capsys, "dags", "apply", str(broken), str(tmp_path / "missing.yaml"))
    assert code == 1 and "invalid YAML" in err and "cannot read" in err and "Traceback" not in err

    code, _, err = run_cli(capsys, "runs", "show", "nope", "r1")
    assert code == 1 and err.count("\n") == 1 and "not found" in err

    monkeypatch.setenv("LEOFLOW_TOKEN", "wrong-token-123456")
    code, _, err = run_cli(capsys, "dags", "list")
    assert code == 1 and "unauthorized" in err and "LEOFLOW_TOKEN" in err and "wrong-token" not in err
    monkeypatch.setenv("LEOFLOW_TOKEN", READ_TOKEN)
    code, _, err = run_cli(capsys, "dags", "pause", "etl")
    assert code == 1 and "forbidden" in err

    monkeypatch.setenv("LEOFLOW_URL", "http://127.0.0.1:9")
    code, _, err = run_cli(capsys, "dags", "list")
    assert code == 1 and "connection refused" in err and "LEOFLOW_URL" in err and err.count("\n") == 1


def test_trigger_wait_follows_the_run_and_exits_1_when_it_fails(
        api_url: str, database_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    specs = tmp_path / "dags.yaml"
    specs.write_text(DAG_YAML)
    run_cli(capsys, "dags", "apply", str(specs))

    def play_the_scheduler() -> None:
        # Wait for the trigger, then move the run through states as a leader would.
        deadline = time.monotonic() + 60
        with psycopg.connect(database_url, autocommit=True) as conn:
            while not conn.execute("SELECT 1 FROM dag_runs WHERE run_id = 'w1'").fetchone():
                assert time.monotonic() < deadline
                time.sleep(0.05)
            conn.execute("UPDATE dag_runs SET state = 'running' WHERE run_id = 'w1'")
        seed_task(database_url, "etl", "w1", "extract", state="running")
        seed_task(database_url, "etl", "w1", "load", state="pending")
        time.sleep(1.0)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE task_instances SET state = 'failed' WHERE task_id = 'extract'")
            conn.execute("UPDATE task_instances SET state = 'upstream_failed' WHERE task_id = 'load'")
            conn.execute("UPDATE dag_runs SET state = 'failed' WHERE run_id = 'w1'")

    scheduler = threading.Thread(target=play_the_scheduler)
    scheduler.start()
    code, out, err = run_cli(capsys, "runs", "trigger", "etl", "--run-id", "w1", "--wait")
    scheduler.join()
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "etl: triggered run w1"
    assert "run w1: running (2 tasks: 1 running, 1 pending)" in lines
    assert lines[-1] == "run w1: failed (2 tasks: 1 failed, 1 upstream_failed)"
    # Each task under the state it ended in: load never ran, it is upstream_failed, not failed.
    assert err.strip() == "leoflow: run w1 failed; failed tasks: extract; upstream_failed tasks: load"


def test_conf_must_be_a_json_object(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["runs", "trigger", "etl", "--conf", json.dumps([1])])
    assert exited.value.code == 2
    assert "--conf must be a JSON object" in capsys.readouterr().err
