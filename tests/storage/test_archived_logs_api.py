"""``GET …/logs?container=&offset=&length=&tail=``: an archived log read back through the replica,
ranged and streamed, over a real S3 server and a directory; bad parameters are 400/404 naming them."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from leoflow.api.app import create_app
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.log_archive import LogArchiver
from leoflow.storage.objects import ObjectStore
from tests.api.conftest import ADMIN, READ, READ_TOKEN, api_settings, seed_task, spec
from tests.api.live import client_for
from tests.harness.s3_server import S3Server

LOGS = "/api/v2/dags/etl/runs/r1/tasks/extract/logs"
CHUNK = 10_000


@pytest.fixture
def client(database_url: str, archive_url: str) -> Iterator[httpx.Client]:
    settings = api_settings(database_url, LEOFLOW_LOG_ARCHIVE_URL=archive_url)
    with client_for(create_app(settings)) as http:
        http.post("/api/v2/dags", json=spec(), headers=ADMIN).raise_for_status()
        http.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).raise_for_status()
        yield http


def archive(database_url: str, archive_url: str, log: Path, container: str = "task", *, ended: bool = True) -> None:
    """Archive ``log`` as try 1 of ``extract`` (what the executor does while the try runs)."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT tt.id FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id "
                           "WHERE ti.task_id = 'extract' AND tt.try_number = 1").fetchone()
    assert row is not None

    async def main() -> None:
        settings = api_settings(database_url)
        engine = make_async_engine(settings.database, pool_size=2)
        try:
            archiver = LogArchiver(ObjectStore(archive_url), Database(engine), "default", chunk_bytes=CHUNK)
            done = asyncio.Event()
            if ended:
                done.set()
                await archiver.follow_file(row[0], container, log, done)
            else:
                await archiver.ship(row[0], container, log, 0, partial=True)
        finally:
            await engine.dispose()

    asyncio.run(main())


def test_ranges_of_an_archived_log_stream_back_exactly(client: httpx.Client, database_url: str, archive_url: str,
                                                       tmp_path: Path) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"log": "the tail\n"}])
    data = os.urandom(CHUNK * 7 + 333)
    log = tmp_path / "output.log"
    log.write_bytes(data)
    archive(database_url, archive_url, log)
    sidecar_log = tmp_path / "sidecar.log"
    sidecar_log.write_bytes(b"the sidecar's one line\n")
    archive(database_url, archive_url, sidecar_log, "agent")

    whole = client.get(LOGS, params={"container": "task"}, headers=READ)
    assert whole.status_code == 200 and whole.content == data
    assert whole.headers["X-Leoflow-Log-Source"] == "archive" and whole.headers["X-Leoflow-Log-Complete"] == "true"
    assert whole.headers["X-Leoflow-Log-Containers"] == "agent,task"
    assert whole.headers["X-Leoflow-Log-Size"] == str(len(data))
    last = client.get(LOGS, params={"tail": 65536}, headers=READ)  # the last 64 KiB: what an on-call reads first
    assert last.content == data[-65536:] and last.headers["X-Leoflow-Log-Offset"] == str(len(data) - 65536)
    for offset, length in ((0, 1), (CHUNK - 1, 2), (CHUNK * 3 + 5, CHUNK * 2), (len(data) - 1, 10)):
        part = client.get(LOGS, params={"offset": offset, "length": length}, headers=READ)
        assert part.content == data[offset:offset + length], (offset, length)
        assert part.headers["X-Leoflow-Log-Cursor"] == f"b{min(len(data), offset + length)}"
    past = client.get(LOGS, params={"offset": len(data) + 5}, headers=READ)
    assert past.status_code == 200 and past.content == b""
    sidecar = client.get(LOGS, params={"container": "agent"}, headers=READ)
    assert sidecar.text == "the sidecar's one line\n"
    # Without archive parameters the answer is what it always was: the stored tail, plus the names
    # of the archived containers (what the dashboard's container tabs are drawn from).
    plain = client.get(LOGS, headers=READ)
    assert plain.text == "the tail\n" and plain.headers["X-Leoflow-Log-Containers"] == "agent,task"


def test_a_running_logs_archive_is_readable_and_says_it_is_not_complete(
        client: httpx.Client, database_url: str, archive_url: str, tmp_path: Path) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    log = tmp_path / "output.log"
    log.write_bytes(b"so far\n")
    archive(database_url, archive_url, log, ended=False)
    answer = client.get(LOGS, params={"offset": 0}, headers=READ)
    assert answer.text == "so far\n" and answer.headers["X-Leoflow-Log-Complete"] == "false"
    assert answer.headers["X-Leoflow-Log-Cursor"] == "b7"


@pytest.mark.parametrize(("params", "status", "field"), [
    ({"container": "Not_A_Name"}, 400, "container"),
    ({"container": "x" * 64}, 400, "container"),
    ({"container": "ghost"}, 404, "container"),
    ({"offset": "-1"}, 400, "offset"),
    ({"offset": "1e3"}, 400, "offset"),
    ({"offset": str(2**63)}, 400, "offset"),
    ({"length": "0"}, 400, "length"),
    ({"tail": "0"}, 400, "tail"),
    ({"tail": "5", "offset": "1"}, 400, "tail"),
])
def test_bad_archive_parameters_name_the_field(client: httpx.Client, database_url: str, archive_url: str,
                                               tmp_path: Path, params: dict[str, str], status: int,
                                               field: str) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"log": "x\n"}])
    log = tmp_path / "output.log"
    log.write_bytes(b"x\n")
    archive(database_url, archive_url, log)
    answer = client.get(LOGS, params=params, headers=READ)
    assert answer.status_code == status, answer.text
    assert field in answer.text


def cli(client: httpx.Client, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LEOFLOW_URL": str(client.base_url).rstrip("/"), "LEOFLOW_TOKEN": READ_TOKEN}
    return subprocess.Popen([sys.executable, "-m", "leoflow", "tasks", "logs", "etl", "r1", "extract", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)


def test_the_cli_prints_a_range_and_follows_an_archived_log_to_its_end(
        client: httpx.Client, database_url: str, archive_url: str, tmp_path: Path) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="running", tries=[{"state": "running", "ended": False}])
    log = tmp_path / "output.log"
    first = os.urandom(CHUNK * 2 + 7)
    log.write_bytes(first)
    archive(database_url, archive_url, log, ended=False)
    tail = cli(client, "--container", "task", "--tail-bytes", "100")
    out, err = tail.communicate(timeout=60)
    assert tail.returncode == 0, err
    assert out == first[-100:]
    follower = cli(client, "--container", "task", "--follow")
    time.sleep(1.5)
    assert follower.poll() is None  # not complete: it keeps following
    rest = os.urandom(CHUNK * 3)
    with log.open("ab") as f:
        f.write(rest)
    archive(database_url, archive_url, log)  # the rest, and complete
    out, err = follower.communicate(timeout=60)
    assert follower.returncode == 0, err
    assert out == first + rest


def test_the_cli_names_a_container_that_has_no_archive(client: httpx.Client, database_url: str,
                                                      archive_url: str, tmp_path: Path) -> None:
    seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"log": "x\n"}])
    log = tmp_path / "output.log"
    log.write_bytes(b"x\n")
    archive(database_url, archive_url, log)
    proc = cli(client, "--container", "istio-proxy")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and out == b""
    assert b"no archived log of container 'istio-proxy' (archived: task)" in err


def test_a_bucket_that_cannot_be_read_is_a_503_with_the_reason(database_url: str, s3_env: S3Server, bucket: str,
                                                               tmp_path: Path) -> None:
    url = f"s3://{bucket}/archive"
    settings = api_settings(database_url, LEOFLOW_LOG_ARCHIVE_URL=url)
    with client_for(create_app(settings)) as http:
        http.post("/api/v2/dags", json=spec(), headers=ADMIN).raise_for_status()
        http.post("/api/v2/dags/etl/runs", json={"run_id": "r1"}, headers=ADMIN).raise_for_status()
        seed_task(database_url, "etl", "r1", "extract", state="success", tries=[{"log": "the tail\n"}])
        log = tmp_path / "output.log"
        log.write_bytes(b"archived\n")
        archive(database_url, url, log)
        assert http.get(LOGS, params={"tail": 100}, headers=READ).text == "archived\n"
        s3_env.delete_bucket(bucket)
        answer = http.get(LOGS, params={"tail": 100}, headers=READ)
        assert answer.status_code == 503 and "the log archive cannot be read right now" in answer.text
        assert "the bucket does not exist" in answer.text
        assert http.get(LOGS, headers=READ).text == "the tail\n"  # the stored tail always remains
