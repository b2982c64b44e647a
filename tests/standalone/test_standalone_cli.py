"""``leoflow standalone`` end to end: real processes, the embedded PostgreSQL, the local executor."""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
import time
from typing import Any
from urllib.parse import quote

import pytest

from leoflow.standalone.embedded import free_port
from leoflow.standalone.home import StandaloneHome
from tests.standalone.process import Standalone, children_running, process_gone, start_and_stop, wait_for_run
from tests.standalone.procs import postgres_pids, wait_until_gone

#: Generous: the warm-start target is 5 s, but CI shares 2 cores with other suites.
WARM_START_BOUND = 30.0


def test_example_run_succeeds_and_survives_a_clean_restart(home: StandaloneHome) -> None:
    first = Standalone(home.root, args=("--example",))
    try:
        banner = first.wait_banner()
        assert banner.token and banner.example_run, first.stdout_lines
        assert banner.url == f"http://127.0.0.1:{first.port}"
        assert stat.S_IMODE(home.token_file.stat().st_mode) == 0o600
        assert home.token_file.read_text().strip() == banner.token
        # The home holds a credential: private, except search permission for PostgreSQL's own
        # OS user when we run as root (it must traverse to its data directory).
        assert stat.S_IMODE(home.root.stat().st_mode) == 0o700  # as root too: never o+x (issue 44)
        assert stat.S_IMODE(home.data_dir.stat().st_mode) == 0o700
        with first.client(banner.token) as api:
            run = wait_for_run(api, "example", banner.example_run)
            assert run["state"] == "success", run
            tasks = api.get(f"/api/v2/dags/example/runs/{quote(banner.example_run, safe='')}/tasks").json()
            assert {t["state"] for t in tasks["items"]} == {"success"}, tasks
            log = api.get(f"/api/v2/dags/example/runs/{quote(banner.example_run, safe='')}/tasks/extract/logs")
            assert "row 3" in log.text, log.text
            assert api.get("/api/v2/dags").status_code == 200
        with first.client(None) as anonymous:
            assert anonymous.get("/api/v2/dags").status_code == 401

        # A second instance on the same home refuses, naming the running one, and changes nothing.
        record = home.lock_file.read_bytes()
        second = Standalone(home.root)
        assert second.wait(timeout=60) == 1
        err = second.stderr.strip().splitlines()
        assert len(err) == 1 and "already running" in err[0], second.stderr
        assert f"pid {first.proc.pid}" in err[0] and banner.url in err[0]
        assert home.lock_file.read_bytes() == record
        with first.client(banner.token) as api:
            assert api.get("/readyz").status_code == 200

        first.signal(signal.SIGTERM)
        assert first.wait(timeout=90) == 0, first.stderr[-3000:]
        assert postgres_pids(home.data_dir) == [], "PostgreSQL left running after a clean stop"
    finally:
        first.kill()

    again = Standalone(home.root)
    try:
        warm = again.wait_banner()
        startup = time.monotonic() - again.started
        print(f"warm start to ready: {startup:.2f}s")
        assert startup < WARM_START_BOUND
        assert warm.token == banner.token  # the stored token is reused
        with again.client(warm.token) as api:
            runs = api.get("/api/v2/dags/example/runs").json()["items"]
            assert [r["run_id"] for r in runs] == [banner.example_run]
            assert runs[0]["state"] == "success"
        again.signal(signal.SIGINT)  # Ctrl-C
        assert again.wait(timeout=90) == 0, again.stderr[-3000:]
        assert postgres_pids(home.data_dir) == []
    finally:
        again.kill()


def test_sigkilled_standalone_leaves_no_postgres_behind(home: StandaloneHome) -> None:
    victim = Standalone(home.root)
    try:
        victim.wait_banner()
        assert postgres_pids(home.data_dir)
        victim.proc.kill()
        victim.wait()
        # Its watchdog notices the pipe closing and stops the server.
        assert wait_until_gone(home.data_dir, timeout=60) == []
    finally:
        victim.kill()
    start_and_stop(home.root)


def test_orphan_postgres_of_a_killed_standalone_and_watchdog_is_recovered(home: StandaloneHome) -> None:
    victim = Standalone(home.root, args=("--example",))
    try:
        banner = victim.wait_banner()
        watchdogs = children_running(victim.proc.pid, "leoflow.standalone.watchdog")
        assert len(watchdogs) == 1
        orphan = postgres_pids(home.data_dir)
        postmaster = int((home.data_dir / "postmaster.pid").read_text().splitlines()[0])
        assert postmaster in orphan
        for pid in watchdogs:
            os.kill(pid, signal.SIGKILL)
        victim.proc.kill()
        victim.wait()
        time.sleep(0.5)
        assert set(orphan) & set(postgres_pids(home.data_dir)), "expected the orphan to be still running"
    finally:
        victim.kill()

    after = Standalone(home.root)
    try:
        warm = after.wait_banner()
        assert process_gone(postmaster) or postmaster not in postgres_pids(home.data_dir)
        with after.client(warm.token) as api:
            assert banner.example_run
            runs = api.get("/api/v2/dags/example/runs").json()["items"]
            assert banner.example_run in [r["run_id"] for r in runs]
        after.signal(signal.SIGTERM)
        assert after.wait(timeout=90) == 0
        assert postgres_pids(home.data_dir) == []
    finally:
        after.kill()


def test_taken_port_is_one_line_and_starts_nothing(home: StandaloneHome) -> None:
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        proc = Standalone(home.root, port=port)
        assert proc.wait(timeout=60) == 2
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "--port: port" in err[0] and str(port) in err[0], proc.stderr  # the flag it was given
    assert not home.data_dir.exists()


def test_external_database_and_configured_tokens_embed_and_generate_nothing(
        home: StandaloneHome, database_url: str) -> None:
    token = "ops-token-0123456789"
    proc = Standalone(home.root, env={"LEOFLOW_DATABASE_URL": database_url,
                                      "LEOFLOW_API_TOKENS": f"ops:admin:{token}"}, args=("--example",))
    try:
        banner = proc.wait_banner()
        assert banner.token is None and banner.example_run
        assert "from LEOFLOW_API_TOKENS" in "\n".join(proc.stdout_lines)
        assert not home.token_file.exists() and not home.postgres_dir.exists()
        with proc.client(token) as api:
            assert wait_for_run(api, "example", banner.example_run)["state"] == "success"
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0
    finally:
        proc.kill()
    assert token not in proc.stderr  # never logged


@pytest.mark.parametrize("flag", ["--port=0", "--port=http"])
def test_bad_port_flag_is_one_line(home: StandaloneHome, flag: str) -> None:
    bad = Standalone(home.root, command=[sys.executable, "-m", "leoflow", "standalone", flag])
    assert bad.wait(timeout=60) == 2
    err = bad.stderr.strip().splitlines()
    assert len(err) == 1 and "--port" in err[0], bad.stderr


def test_sigterm_during_startup_still_stops_postgres(home: StandaloneHome) -> None:
    """A stop that lands while PostgreSQL starts or migrates (before the replica runs) cleans up too."""
    proc = Standalone(home.root)
    try:
        deadline = time.monotonic() + 120
        while not (home.data_dir / "postmaster.pid").exists():
            assert proc.proc.poll() is None and time.monotonic() < deadline, proc.stderr[-2000:]
            time.sleep(0.01)
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=90) in (0, 130), proc.stderr[-3000:]
        assert "Traceback" not in proc.stderr
        assert postgres_pids(home.data_dir) == []
    finally:
        proc.kill()
    start_and_stop(home.root)  # the lock was released and the data is usable


def test_api_port_equal_to_the_remembered_database_port(home: StandaloneHome) -> None:
    """``--port`` may be the port the embedded PostgreSQL used last time (free again): the API gets it."""
    start_and_stop(home.root)
    remembered = int(home.port_file.read_text())
    assert start_and_stop(home.root, port=remembered).url == f"http://127.0.0.1:{remembered}"
    assert int(home.port_file.read_text()) != remembered


def test_unreachable_external_database_is_one_line_and_exit_1(home: StandaloneHome) -> None:
    port = free_port()  # nothing listens there
    proc = Standalone(home.root, env={"LEOFLOW_DATABASE_URL": f"postgresql://leoflow:secret@127.0.0.1:{port}/x"})
    assert proc.wait(timeout=60) == 1
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "database unavailable" in err[0], proc.stderr
    assert "secret" not in proc.stderr
    assert not home.postgres_dir.exists()


def test_a_named_example_runs_its_branch_on_the_local_executor(home: StandaloneHome) -> None:
    """``--example conditional``: the packaged branch DAG runs end to end — an output chooses the
    branch, ``when`` skips the other, the join runs — on the standalone's local executor."""
    proc = Standalone(home.root, args=("--example", "conditional"))
    try:
        banner = proc.wait_banner()
        assert banner.example_run, proc.stdout_lines
        assert "leoflow runs list conditional" in "\n".join(proc.stdout_lines)
        with proc.client(banner.token) as api:
            run = wait_for_run(api, "conditional", banner.example_run)
            assert run["state"] == "success", run
            tasks = api.get(f"/api/v2/dags/conditional/runs/{quote(banner.example_run, safe='')}/tasks").json()
            states = {t["task_id"]: t["state"] for t in tasks["items"]}
            assert "skipped" in states.values() and states["report"] == "success", states
    finally:
        proc.signal(signal.SIGTERM)
        proc.wait(timeout=90)


def test_the_fan_out_example_maps_over_a_listed_output_and_combines_the_list(home: StandaloneHome) -> None:
    """``--example fan_out``: list → map → combine on the standalone's local executor. ``list`` writes
    three partitions, ``process`` runs once per partition (its item in argv), ``combine`` reads the
    instances' ``uri`` outputs as one list in index order; the API shows ``process`` as one row with
    its instances counted, and each instance by ``?map_index=``."""
    proc = Standalone(home.root, args=("--example", "fan_out"))
    try:
        banner = proc.wait_banner()
        assert banner.example_run, proc.stdout_lines
        assert "leoflow runs list fan-out" in "\n".join(proc.stdout_lines)
        with proc.client(banner.token) as api:
            run = wait_for_run(api, "fan-out", banner.example_run)
            assert run["state"] == "success", run
            base = f"/api/v2/dags/fan-out/runs/{quote(banner.example_run, safe='')}/tasks"
            listed = {t["task_id"]: t for t in api.get(base).json()["items"]}
            assert listed["process"]["map_count"] == 3 and listed["process"]["map_states"] == {"success": 3}
            uris = [f"s3://bucket/out/2026-0{m}.parquet" for m in (1, 2, 3)]
            assert api.get(f"{base}/combine/outputs").json()["outputs"] == {"manifest": uris}
            second = api.get(f"{base}/process/outputs", params={"map_index": 1}).json()
            assert second["outputs"] == {"uri": uris[1], "rows": 200}, second
            log = api.get(f"{base}/process/logs", params={"map_index": 2})
            assert "processing partition 2026-03 (instance 2)" in log.text, log.text
    finally:
        proc.signal(signal.SIGTERM)
        proc.wait(timeout=90)


def test_the_datasets_example_starts_the_consumer_when_the_producer_succeeds(home: StandaloneHome) -> None:
    """``--example datasets``: ``ingest-orders`` runs on the local executor, its ``load`` success
    records an event of ``s3://lake/orders``, and ``report-orders`` gets exactly one dataset-triggered
    run whose task sees the event in LEOFLOW_TRIGGERING_EVENTS; the list shows producer and consumer."""
    proc = Standalone(home.root, args=("--example", "datasets"))
    try:
        banner = proc.wait_banner()
        assert banner.example_run, proc.stdout_lines
        with proc.client(banner.token) as api:
            assert wait_for_run(api, "ingest-orders", banner.example_run)["state"] == "success"
            deadline = time.monotonic() + 60
            runs: list[dict[str, Any]] = []
            while time.monotonic() < deadline and not runs:
                runs = api.get("/api/v2/dags/report-orders/runs").json()["items"]
                time.sleep(0.2)
            [consumer] = runs
            assert consumer["run_type"] == "dataset", consumer
            done = wait_for_run(api, "report-orders", consumer["run_id"])
            assert done["state"] == "success", done
            [event] = done["triggering_events"]  # type: ignore[misc]
            assert (event["uri"], event["dag_id"], event["task_id"]) == ("s3://lake/orders", "ingest-orders", "load")
            log = api.get(f"/api/v2/dags/report-orders/runs/{quote(consumer['run_id'], safe='')}/tasks/report/logs")
            assert "triggered by: [{" in log.text and "s3://lake/orders" in log.text, log.text
            [dataset] = api.get("/api/v2/datasets").json()["items"]
            assert dataset["producers"] == [{"dag_id": "ingest-orders", "task_id": "load"}]
            assert dataset["consumers"] == ["report-orders"] and dataset["queued"] == []
            time.sleep(1)  # no second run: the event was consumed once
            assert len(api.get("/api/v2/dags/report-orders/runs").json()["items"]) == 1
    finally:
        proc.signal(signal.SIGTERM)
        proc.wait(timeout=90)
