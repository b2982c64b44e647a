"""``leoflow tasks list|show|outputs|logs`` on a mapped task, against a live API whose run the
leader's own steps drove (:mod:`tests.scheduler.stepper`): one row with its instances counted,
``--map-index N`` for one instance, and the API's refusals as one error line."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from leoflow.settings import Settings
from tests.api.conftest import ADMIN_TOKEN, api_settings
from tests.api.live import serve
from tests.api.test_mapping_api import SPEC
from tests.scheduler.stepper import stepper
from tests.scheduler.test_conditions import started
from tests.scheduler.test_mapping import fail, mapped_launches, succeed


@pytest.fixture
def fan_run(settings: Settings, database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run of DAG ``fan``: list gave 3 parts; process[0] succeeded (uri u0), [1] is queued, [2] failed."""
    async def drive() -> str:
        async with stepper(settings) as st:
            run = await started(st, SPEC)
            succeed(st, st.key("fan", run, "list"), {"parts": ["a", "b", "c"]})
            await st.settle()
            launched = mapped_launches(st, run)
            succeed(st, launched[0].key, {"uri": "u0"})
            fail(st, launched[2].key)
            await st.settle()
            return run

    run = asyncio.run(drive())
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        yield run


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_list_shows_a_mapped_task_as_one_row_with_its_instances(fan_run: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "tasks", "list", "fan", fan_run)
    assert (code, err) == (0, "")
    header, *rows = out.splitlines()
    assert header.split()[:4] == ["TASK", "STATE", "INSTANCES", "TRIES"]
    [process] = [r for r in rows if r.startswith("process ")]
    assert "3 (failed 1, queued 1, success 1)" in process and " queued " in process
    [listed] = [r for r in rows if r.startswith("list ")]
    assert "(" not in listed  # an unmapped task has no instance count


def test_show_sums_up_the_task_and_map_index_shows_one_instance(fan_run: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "tasks", "show", "fan", fan_run, "process")
    assert code == 0 and "mapped:   3 (failed 1, queued 1, success 1); one of them: --map-index N" in out
    code, out, _ = cli(capsys, "tasks", "show", "fan", fan_run, "process", "--map-index", "2")
    assert code == 0 and "state:    failed" in out and "instance: 2 of 3" in out and "TRY" in out
    code, out, err = cli(capsys, "tasks", "show", "fan", fan_run, "process", "--map-index", "3")
    assert code != 0 and "no instance 3" in err


def test_outputs_are_the_list_downstream_reads_or_one_instances(fan_run: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "tasks", "outputs", "fan", fan_run, "process")
    assert (code, out) == (0, 'uri: ["u0",null,null]\n')
    code, out, _ = cli(capsys, "tasks", "outputs", "fan", fan_run, "process", "--map-index", "0", "-o", "json")
    assert code == 0 and json.loads(out) == {"try_number": 1, "state": "success", "outputs": {"uri": "u0"}}
    code, out, _ = cli(capsys, "tasks", "outputs", "fan", fan_run, "process", "--map-index", "2")
    assert (code, out) == (0, f"fan: run {fan_run} task process[2] has no outputs: it is failed\n")


def test_logs_of_a_mapped_task_need_an_index_and_a_negative_one_is_refused_before_asking(
        fan_run: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "tasks", "logs", "fan", fan_run, "process")
    assert code != 0 and "?map_index=" in err and len(err.strip().splitlines()) == 1
    code, _, err = cli(capsys, "tasks", "logs", "fan", fan_run, "process", "--map-index", "-1")
    assert code == 2 and "--map-index must be at least 0" in err


def test_mark_and_clear_name_one_instance(fan_run: str, database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The commands the leader will apply carry the index (no leader runs here: they wait, 202)."""
    code, out, err = cli(capsys, "tasks", "mark", "fan", fan_run, "process", "success", "--map-index", "2")
    assert code == 0 and f"run {fan_run} task process[2]" in out, err
    code, _, err = cli(capsys, "runs", "clear", "fan", fan_run, "--task", "process", "--map-index", "1")
    assert code == 0, err
    with psycopg.connect(database_url) as conn:
        bodies = [b for (b,) in conn.execute("SELECT body FROM run_commands ORDER BY id").fetchall()]
    assert [b.get("map_index") for b in bodies][-2:] == [2, 1] and bodies[-1]["tasks"] == ["process"], bodies
    code, _, err = cli(capsys, "runs", "clear", "fan", fan_run, "-t", "process", "-t", "list", "--map-index", "1")
    assert code != 0 and "map_index" in err
