"""``leoflow tasks outputs`` and the outputs in ``tasks show``, against a live API: the table form
(``name: value``, JSON for non-strings, one line each), JSON and YAML (the API's answer), and
the one error line for a task that does not exist."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
import yaml

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN, ADMIN_TOKEN, api_settings, seed_task, spec
from tests.api.live import serve
from tests.api.test_task_outputs import publish

OUTPUTS = {"uri": "s3://bucket/p0", "rows": 12, "parts": ["a", "b"], "ok": True, "note": "two\nlines",
           "colour": "\x1b[31mred", "nothing": None, "spaced": "a b"}


@pytest.fixture
def api_url(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        yield url


@pytest.fixture
def succeeded(api_url: str, database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Run r1 of DAG etl: ``extract`` succeeded on its second try with :data:`OUTPUTS`, ``load`` runs."""
    with httpx.Client(base_url=api_url, headers=ADMIN) as client:
        assert client.post("/api/v2/dags", json=spec("etl")).status_code == 201
        assert client.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}).status_code == 201
    seed_task(database_url, "etl", "r1", "extract", state="success",
              tries=[{"state": "failed", "exit_code": 1}, {"state": "success", "exit_code": 0}])
    seed_task(database_url, "etl", "r1", "load", state="running", tries=[{"state": "running", "ended": False}])
    publish(database_url, "extract", 2, OUTPUTS)
    capsys.readouterr()


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_table_form_is_one_name_value_line_per_output(succeeded: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "tasks", "outputs", "etl", "r1", "extract")
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        'colour: "\\u001b[31mred"',  # a control character is escaped, never sent to the terminal
        "note: \"two\\nlines\"",  # one output, one line
        "nothing: null",
        "ok: true",
        'parts: ["a","b"]',
        "rows: 12",
        "spaced: a b",
        "uri: s3://bucket/p0",
    ]


def test_json_and_yaml_are_the_apis_answer(succeeded: None, capsys: pytest.CaptureFixture[str]) -> None:
    expected = {"try_number": 2, "state": "success", "outputs": OUTPUTS}
    code, out, _ = cli(capsys, "tasks", "outputs", "etl", "r1", "extract", "-o", "json")
    assert code == 0 and json.loads(out) == expected
    code, out, _ = cli(capsys, "tasks", "outputs", "etl", "r1", "extract", "--output", "yaml")
    assert code == 0 and yaml.safe_load(out) == expected


def test_a_task_without_outputs_says_why(succeeded: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "tasks", "outputs", "etl", "r1", "load")
    assert (code, out) == (0, "etl: run r1 task load has no outputs: it is running\n")
    code, out, _ = cli(capsys, "tasks", "outputs", "etl", "r1", "load", "-o", "json")
    assert code == 0 and json.loads(out) == {"try_number": 1, "state": "running", "outputs": None}


def test_an_unknown_task_is_one_error_line(succeeded: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "tasks", "outputs", "etl", "r1", "nope")
    assert (code, out) == (1, "")
    assert err == "leoflow: error: task 'nope' not found in run 'r1'\n"
    code, out, err = cli(capsys, "tasks", "outputs", "etl", "r9", "extract", "-o", "json")
    assert (code, out) == (1, "") and err == "leoflow: error: run 'r9' of DAG 'etl' not found\n"


def test_tasks_show_ends_with_the_outputs(succeeded: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "tasks", "show", "etl", "r1", "extract")
    assert code == 0
    tail = out.split("\noutputs:\n")[1].splitlines()
    assert tail[0] == '  colour: "\\u001b[31mred"' and tail[-1] == "  uri: s3://bucket/p0"
    assert len(tail) == len(OUTPUTS)
    code, out, _ = cli(capsys, "tasks", "show", "etl", "r1", "load")
    assert code == 0 and "outputs:" not in out
    code, out, _ = cli(capsys, "tasks", "show", "etl", "r1", "extract", "-o", "json")
    assert json.loads(out)["outputs"] == OUTPUTS
