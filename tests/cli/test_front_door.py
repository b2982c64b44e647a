"""The command line as a new user meets it (issue 38, "the front door").

Each test pins one thing that rubbed: a script learns the id of the run it triggered; ``| head``
ends quietly; ``dags show`` is short; ``tasks list`` follows the DAG; ``runs clear`` answers in
the CLI's words; a taken port names what chose it; every verb speaks table, JSON and YAML.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from leoflow.api.app import create_app
from leoflow.cli.dags import dag_order
from leoflow.cli.main import main
from leoflow.errors import SettingsError
from tests.api.conftest import ADMIN_TOKEN, api_settings, seed_task
from tests.api.live import serve

# Written with the downstream task first and named so that alphabetical order is the wrong one.
SPEC = """\
dag_id: etl
tasks:
  - id: b-load
    image: busybox
    command: ["true"]
    depends_on: [z-extract]
  - id: z-extract
    image: busybox
    command: ["echo", "hi"]
    retries: 2
  - id: a-report
    image: busybox
    command: ["true"]
    depends_on: [b-load]
"""


@pytest.fixture
def api_url(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        spec = tmp_path / "etl.yaml"
        spec.write_text(SPEC)
        assert main(["dags", "apply", str(spec)]) == 0
        yield url


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_runs_trigger_output_json_prints_the_new_run(api_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "runs", "trigger", "etl", "--output", "json")
    assert code == 0
    run = json.loads(out)  # stdout is the run alone; the human line went to stderr
    assert run["dag_id"] == "etl" and run["state"] == "queued" and run["run_id"]
    assert err.strip() == f"etl: triggered run {run['run_id']}"
    code, out, _ = cli(capsys, "runs", "show", "etl", run["run_id"], "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["run_id"] == run["run_id"]


def test_runs_list_without_a_dag_shows_every_dags_runs(api_url: str, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(SPEC.replace("dag_id: etl", "dag_id: other"))
    assert cli(capsys, "dags", "apply", str(other))[0] == 0
    for dag_id, run_id in (("etl", "e1"), ("other", "o1"), ("etl", "e2")):
        assert cli(capsys, "runs", "trigger", dag_id, "--run-id", run_id)[0] == 0
    assert cli(capsys, "runs", "cancel", "other", "o1")[0] == 0
    code, out, _ = cli(capsys, "runs", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:3] == ["DAG", "RUN", "STATE"]
    assert [line.split()[:3] for line in lines[1:]] == [["etl", "e2", "queued"], ["other", "o1", "cancelled"],
                                                       ["etl", "e1", "queued"]]
    code, out, _ = cli(capsys, "runs", "list", "--state", "cancelled", "-o", "json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == ["o1"]
    code, out, _ = cli(capsys, "runs", "list", "--since", "2999-01-01", "-o", "json")
    assert code == 0 and json.loads(out) == []
    code, out, _ = cli(capsys, "runs", "list", "etl", "--since", "2000-01-01", "-o", "json")
    assert code == 0 and [r["run_id"] for r in json.loads(out)] == ["e2", "e1"]


def test_every_kind_of_verb_answers_in_json_and_yaml(api_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "dags", "list", "-o", "yaml")
    assert code == 0 and [d["dag_id"] for d in yaml.safe_load(out)] == ["etl"]
    code, out, _ = cli(capsys, "dags", "pause", "etl", "-o", "json")
    assert code == 0 and json.loads(out)["paused"] is True
    code, out, _ = cli(capsys, "pools", "create", "gpu", "--slots", "2", "-o", "json")
    assert code == 0 and json.loads(out)["slots"] == 2
    code, out, _ = cli(capsys, "pools", "delete", "gpu", "-o", "json")
    assert code == 0 and json.loads(out) == {"name": "gpu", "deleted": True}


def test_dags_show_is_compact_and_json_keeps_the_full_spec(api_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "dags", "show", "etl")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) <= 12, out  # not the ~100 lines of the filled-in spec
    assert "retry_delay_seconds" not in out
    rows = [line.split()[0] for line in lines[lines.index("") + 2:] if line and not line.startswith("(")]
    assert rows == ["z-extract", "b-load", "a-report"]
    assert "retries=2" in next(line for line in lines if line.startswith("z-extract"))
    code, out, _ = cli(capsys, "dags", "show", "etl", "--output", "json")
    spec = json.loads(out)["spec"]
    assert code == 0 and spec["tasks"][0]["retry_delay_seconds"] == 30  # the full form


def test_tasks_list_follows_the_dag_not_the_alphabet(api_url: str, database_url: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert cli(capsys, "runs", "trigger", "etl", "--run-id", "r1")[0] == 0
    for task in ("a-report", "b-load", "z-extract"):
        seed_task(database_url, "etl", "r1", task)
    code, out, _ = cli(capsys, "tasks", "list", "etl", "r1")
    assert code == 0 and [line.split()[0] for line in out.splitlines()[1:]] == ["z-extract", "b-load", "a-report"]
    code, out, _ = cli(capsys, "tasks", "list", "etl", "r1", "-o", "json")
    assert [t["task_id"] for t in json.loads(out)] == ["z-extract", "b-load", "a-report"]
    code, out, _ = cli(capsys, "runs", "show", "etl", "r1")
    assert code == 0 and [line.split()[0] for line in out.split("\n\n")[1].splitlines()[1:]] == [
        "z-extract", "b-load", "a-report"]


def test_tasks_list_without_a_run_lists_every_runs(api_url: str, database_url: str,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    for run_id in ("r1", "r2"):
        assert cli(capsys, "runs", "trigger", "etl", "--run-id", run_id)[0] == 0
    seed_task(database_url, "etl", "r1", "z-extract", state="failed")
    seed_task(database_url, "etl", "r2", "z-extract", state="success")
    code, out, _ = cli(capsys, "tasks", "list", "--state", "failed")
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[:4] == ["DAG", "RUN", "TASK", "STATE"]
    assert [line.split()[:4] for line in lines[1:]] == [["etl", "r1", "z-extract", "failed"]]
    code, out, _ = cli(capsys, "tasks", "list", "etl", "--since", "2000-01-01", "-o", "json")
    assert code == 0 and [t["run_id"] for t in json.loads(out)] == ["r2", "r1"]


BROKEN = """\
dag_id: broken
catchup: 3
tasks:
  - id: extract
    command: [run]
  - id: load
    image: busybox
    command: ["true"]
    depends_on: [extract, extrct]
"""


def test_dags_apply_shows_every_problem_of_a_document_located(api_url: str, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "broken.yaml"
    spec.write_text(BROKEN)
    code, out, err = cli(capsys, "dags", "apply", str(spec))
    assert code == 1 and out == ""
    assert err.splitlines() == [f"leoflow: error: {spec}:2:1: catchup: must be true or false, got an integer",
                                f"leoflow: error: {spec}:4:5: tasks[0].image: is required (or set kind: empty)",
                                f"leoflow: error: {spec}:9:27: tasks[1].depends_on[1]: unknown task 'extrct'"]


def test_the_422_keeps_the_first_problem_as_details_and_lists_them_all(api_url: str) -> None:
    import httpx

    answer = httpx.post(f"{api_url}/api/v2/dags", content=BROKEN, headers={
        "Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/yaml"})
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["message"] == "catchup: must be true or false, got an integer"  # as before: the first
    assert error["details"]["field"] == "catchup"
    assert [e["field"] for e in error["details"]["errors"]] == ["catchup", "tasks[0].image", "tasks[1].depends_on[1]"]


def test_dag_order_is_the_dashboards() -> None:
    """Upstreams first, ties in the written order, a task on a cycle last (as ``topoOrder``)."""
    tasks = [{"id": "c", "depends_on": ["a"]}, {"id": "a"}, {"id": "b"}, {"id": "d", "depends_on": ["c", "b"]},
             {"id": "x", "depends_on": ["y"]}, {"id": "y", "depends_on": ["x"]}]
    assert dag_order(tasks) == ["a", "b", "c", "d", "x", "y"]


def test_runs_clear_without_a_flag_answers_in_the_cli_words(capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEOFLOW_URL", "http://127.0.0.1:9")  # never asked: the CLI answers itself
    with pytest.raises(SystemExit) as exited:
        main(["runs", "clear", "etl", "r1"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert "--failed" in err and "--task" in err and "failed_only" not in err


def _closed_pipe() -> int:
    """The write end of a pipe whose reader is gone, as ``| head`` leaves it."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.mark.parametrize("argv", [["dags", "show", "etl", "--output", "json"], ["api", "openapi"]])
def test_a_reader_that_goes_away_ends_quietly(argv: list[str], api_url: str) -> None:
    write = _closed_pipe()
    try:
        done = subprocess.run([sys.executable, "-m", "leoflow", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=60, env={**os.environ})
    finally:
        os.close(write)
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141  # as a shell reports a command ended by SIGPIPE


@pytest.mark.parametrize(("source", "named"), [("--port", "--port: port "), ("LEOFLOW_PORT", "LEOFLOW_PORT: port "),
                                               (None, "port: port ")])
def test_a_taken_port_names_what_chose_it(source: str | None, named: str) -> None:
    import socket

    from leoflow.standalone.runtime import _check_port_free

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(SettingsError) as raised:
            _check_port_free("127.0.0.1", port, source)
    message = str(raised.value)
    assert message.startswith(named + str(port)) and "choose another with --port" in message
    assert ("LEOFLOW_PORT" in message) == (source == "LEOFLOW_PORT")
    assert ("(the default)" in message) == (source is None)


@pytest.mark.parametrize(("argv", "env", "source"), [(["--port", "8123"], {}, "--port"),
                                                     ([], {"LEOFLOW_PORT": "8124"}, "LEOFLOW_PORT"), ([], {}, None)])
def test_standalone_tells_the_runtime_where_the_port_came_from(argv: list[str], env: dict[str, str],
                                                               source: str | None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    from leoflow.standalone import runtime

    seen = []
    monkeypatch.delenv("LEOFLOW_PORT", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(runtime, "run_standalone", lambda settings, options: seen.append(options) or 0)
    assert main(["standalone", *argv]) == 0
    assert seen[0].port_source == source
