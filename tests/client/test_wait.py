"""``run.wait()`` follows a run on the API's long poll, ends at its end or its timeout, and shows progress when seen.

A live server on a fresh database, no leader: the test plays the leader from the side (the run
starts, its task runs and succeeds, the run succeeds), and counts the requests the wait made —
a handful of long polls, not a poll every half second.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.client import AsyncClient, Client, RunWaitTimeout
from leoflow.client.waiting import TERMINAL_RUN_STATES, TERMINAL_TASK_STATES, ProgressBar, progress_for
from leoflow.model import states
from tests.api.conftest import ADMIN_TOKEN, api_settings, seed_task
from tests.api.live import serve
from tests.cli.test_completeness import SeenOperations

SPEC = "dag_id: etl\nschedule: null\ntasks:\n  - {id: extract, image: busybox, command: ['true']}\n"
GET_RUN = "GET /api/v2/dags/{dag_id}/runs/{run_id}"


def play_the_leader(database_url: str, run_id: str, *, ending: str = "success") -> threading.Thread:
    def steps() -> None:
        time.sleep(0.3)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE dag_runs SET state = 'running', started_at = now() WHERE run_id = %s", (run_id,))
        seed_task(database_url, "etl", run_id, "extract", state="running")
        time.sleep(0.3)
        with psycopg.connect(database_url, autocommit=True) as conn:
            conn.execute("UPDATE task_instances SET state = %s WHERE task_id = 'extract'", (ending,))
            conn.execute("UPDATE dag_runs SET state = %s, ended_at = now() WHERE run_id = %s", (ending, run_id))

    thread = threading.Thread(target=steps, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def live(database_url: str) -> Iterator[tuple[str, SeenOperations]]:
    recorder = SeenOperations(create_app(api_settings(database_url)))
    with serve(recorder) as url:  # type: ignore[arg-type]
        with Client(url, ADMIN_TOKEN) as client:
            client.apply_dag(SPEC)
        yield url, recorder


def test_wait_returns_the_run_as_it_ended_after_a_few_long_polls(
        live: tuple[str, SeenOperations], database_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    url, recorder = live
    with Client(url, ADMIN_TOKEN) as client:
        run = client.trigger_run("etl", run_id="r1")
        recorder.seen.clear()
        leader = play_the_leader(database_url, "r1")
        started = time.monotonic()
        ended = run.wait(timeout=30)
        leader.join()
    assert ended.state == "success" and ended.tasks[0].state == "success"
    assert time.monotonic() - started < 5
    assert 2 <= recorder.seen.count(GET_RUN) <= 6  # one per change (and the first), not a poll every few ms
    assert capsys.readouterr().err == ""  # stderr is no terminal here: no progress bar


def test_wait_gives_up_at_its_timeout(live: tuple[str, SeenOperations]) -> None:
    url, _ = live
    with Client(url, ADMIN_TOKEN) as client:
        run = client.trigger_run("etl", run_id="r2")
        started = time.monotonic()
        with pytest.raises(RunWaitTimeout, match="etl/r2 did not end in time \\(still queued\\)"):
            run.wait(timeout=0.5)
    assert 0.45 <= time.monotonic() - started < 3


def test_the_progress_bar_counts_tasks_done(live: tuple[str, SeenOperations], database_url: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    url, _ = live
    with Client(url, ADMIN_TOKEN) as client:
        client.trigger_run("etl", run_id="r3")
        play_the_leader(database_url, "r3", ending="failed").join(0)
        ended = client.wait_for_run("etl", "r3", timeout=30, progress=True)
    assert ended.state == "failed"
    err = capsys.readouterr().err
    assert "etl/r3 [" in err and "0/0 tasks done · queued" in err
    assert "1/1 tasks done · failed" in err and err.endswith("\n")


def test_the_async_client_waits_alike(live: tuple[str, SeenOperations], database_url: str) -> None:
    url, _ = live

    async def scenario() -> str:
        async with AsyncClient(url, ADMIN_TOKEN) as client:
            await client.trigger_run("etl", run_id="r4")
            play_the_leader(database_url, "r4")
            return (await client.wait_for_run("etl", "r4", timeout=30)).state

    assert asyncio.run(scenario()) == "success"


def test_a_run_from_an_async_client_says_how_to_wait() -> None:
    from leoflow.client.models import Run

    with pytest.raises(TypeError, match="wait_for_run"):
        Run({"dag_id": "etl", "run_id": "r"}).wait()


def test_the_bar_is_drawn_only_when_someone_sees_it() -> None:
    class Tty:
        def __init__(self, tty: bool) -> None:
            self.tty = tty

        def isatty(self) -> bool:
            return self.tty

    assert progress_for(None, Tty(False)) is None  # type: ignore[arg-type]
    assert isinstance(progress_for(None, Tty(True)), ProgressBar)  # type: ignore[arg-type]
    assert progress_for(False, Tty(True)) is None  # type: ignore[arg-type]
    line = ProgressBar.line({"dag_id": "d", "run_id": "r", "state": "running",
                             "tasks": [{"state": "success"}, {"state": "running"}, {"state": "skipped"},
                                       {"state": "pending"}]}, width=8)
    assert line == "d/r [####....] 2/4 tasks done · running"


def test_the_client_knows_the_servers_final_states() -> None:
    assert TERMINAL_RUN_STATES == states.TERMINAL_RUN_STATES
    assert TERMINAL_TASK_STATES == states.TERMINAL_TASK_STATES
