"""The leader's sync of LEOFLOW_DAGS_DIR, driven step by step against a real PostgreSQL.

Each ``sync_once`` is one poll of the service; ``run`` is checked once as a task (startup sync,
a change picked up without a restart, a newer term ending it).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from leoflow.clock import SystemClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.errors import FencedOut
from leoflow.housekeeping import directory_sync
from leoflow.housekeeping.directory_sync import DagDirectorySync
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.harness.configmap_volume import ConfigMapVolume
from tests.scheduler.harness import eventually, rows, set_term


def dag(dag_id: str, command: str = "true") -> str:
    return json.dumps({"dag_id": dag_id, "tasks": [{"id": "t", "image": "busybox:1.36", "command": [command]}]})


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture(autouse=True)
def log_everything(caplog: pytest.LogCaptureFixture) -> None:
    """INFO and up are emitted, so every log call (and its structured fields) really runs."""
    caplog.set_level(logging.INFO, logger="leoflow")


def as_leader(settings: Settings, body: Callable[[LeaderContext], Awaitable[None]]) -> None:
    """Run ``body`` as the leader of term 1 (no pytest-asyncio here: one event loop per test)."""
    async def main() -> None:
        engine = make_async_engine(settings.database, pool_size=2, application_name="test-dag-sync")
        try:
            await set_term(engine, settings.cluster.name, 1)
            await body(LeaderContext(term=1, settings=settings, db=Database(engine), clock=SystemClock()))
        finally:
            await engine.dispose()
    asyncio.run(main())


async def dags(ctx: LeaderContext) -> dict[str, tuple[bool, str | None, int]]:
    """dag_id -> (deleted, source, current version)."""
    found = await rows(ctx.db.engine, "SELECT d.dag_id, d.deleted, d.source, v.version FROM dags d "
                                      "JOIN dag_versions v ON v.id = d.current_version_id")
    return {r.dag_id: (r.deleted, r.source, r.version) for r in found}


async def events(ctx: LeaderContext, kind: str) -> list[dict[str, Any]]:
    return [r.details for r in await rows(ctx.db.engine, "SELECT details FROM cluster_events WHERE kind = :k "
                                                          "ORDER BY id", k=kind)]


def test_startup_sync_then_changes_are_synced_and_pruned(settings: Settings, tmp_path: Path,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    async def body(ctx: LeaderContext) -> None:
        team = ConfigMapVolume(tmp_path / "dags" / "team-a")
        team.write({"etl.yaml": dag("etl"), "report.yaml": dag("report")})
        ConfigMapVolume(tmp_path / "dags" / "wf-leoflow-dags").write({"inline.yaml": dag("inline")})
        service = DagDirectorySync(tmp_path / "dags", "wf")
        applied = metric("leoflow_dag_directory_syncs_total", outcome="applied")
        failed = metric("leoflow_dag_directory_syncs_total", outcome="failed")

        first = await service.sync_once(ctx, None)
        assert await dags(ctx) == {"etl": (False, "wf", 1), "report": (False, "wf", 1), "inline": (False, "wf", 1)}
        assert await events(ctx, "dags_synced") == [
            {"source": "wf", "created": 3, "changed": 0, "unchanged": 0, "deleted": 0}]
        assert await service.sync_once(ctx, first) == first  # same files: nothing read into the database

        team.write({"etl.yaml": dag("etl", "false")})  # the kubelet's atomic update: report.yaml is gone
        second = await service.sync_once(ctx, first)
        assert second != first
        assert await dags(ctx) == {"etl": (False, "wf", 2), "report": (True, "wf", 1), "inline": (False, "wf", 1)}
        assert (await events(ctx, "dags_synced"))[-1] == {
            "source": "wf", "created": 0, "changed": 1, "unchanged": 1, "deleted": 1}
        assert metric("leoflow_dag_directory_syncs_total", outcome="applied") == applied + 2
        assert metric("leoflow_dag_directory_syncs_total", outcome="failed") == failed
        assert metric("leoflow_dag_directory_problems") == 0
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []

    as_leader(settings, body)


def test_bad_files_change_nothing_are_reported_once_and_a_fix_applies(
        settings: Settings, tmp_path: Path) -> None:
    async def body(ctx: LeaderContext) -> None:
        volume = ConfigMapVolume(tmp_path / "dags")
        volume.write({"etl.yaml": dag("etl")})
        service = DagDirectorySync(tmp_path, "wf")
        last = await service.sync_once(ctx, None)

        volume.write({"etl.yaml": dag("etl", "false"), "bad.yaml": "dag_id: bad\ntasks: [\n",
                      "worse.yaml": "dag_id: worse\ntasks: [{id: t}]\n"})
        invalid = metric("leoflow_dag_directory_syncs_total", outcome="invalid")
        rejected = await service.sync_once(ctx, last)
        assert await dags(ctx) == {"etl": (False, "wf", 1)}  # etl's change was not applied either
        assert metric("leoflow_dag_directory_problems") == 2
        (event,) = await events(ctx, "dags_sync_rejected")
        assert event["count"] == 2 and event["problems"] == [
            "dags/bad.yaml:3:1: invalid YAML: did not find expected node content (while parsing a "
            "flow node)",
            "dags/worse.yaml:2:9: tasks[0].image: is required (or set kind: empty)"]
        assert await service.sync_once(ctx, rejected) == rejected  # the same bad content is not retried
        assert len(await events(ctx, "dags_sync_rejected")) == 1
        assert metric("leoflow_dag_directory_syncs_total", outcome="invalid") == invalid + 1

        volume.write({"etl.yaml": dag("etl", "false")})
        await service.sync_once(ctx, rejected)
        assert await dags(ctx) == {"etl": (False, "wf", 2)}
        assert metric("leoflow_dag_directory_problems") == 0

    as_leader(settings, body)


def test_an_unreadable_directory_prunes_nothing_and_is_retried(settings: Settings, tmp_path: Path) -> None:
    async def body(ctx: LeaderContext) -> None:
        volume = ConfigMapVolume(tmp_path / "dags" / "cm")
        volume.write({"etl.yaml": dag("etl")})
        service = DagDirectorySync(tmp_path / "dags", "wf")
        last = await service.sync_once(ctx, None)
        failed = metric("leoflow_dag_directory_syncs_total", outcome="failed")
        (tmp_path / "dags").rename(tmp_path / "elsewhere")
        assert await service.sync_once(ctx, last) == last
        assert await dags(ctx) == {"etl": (False, "wf", 1)}
        assert metric("leoflow_dag_directory_syncs_total", outcome="failed") == failed + 1

    as_leader(settings, body)


def test_whatever_goes_wrong_with_the_files_never_ends_the_service(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(ctx: LeaderContext) -> None:
        ConfigMapVolume(tmp_path / "dags").write({"etl.yaml": dag("etl")})

        def parser_bug(files: object) -> object:
            raise RecursionError("a bug in parsing")

        monkeypatch.setattr(directory_sync, "parse_dag_files", parser_bug)
        service = DagDirectorySync(tmp_path, "wf")
        failed = metric("leoflow_dag_directory_syncs_total", outcome="failed")
        fingerprint = await service.sync_once(ctx, None)
        assert fingerprint is not None and await dags(ctx) == {}
        assert metric("leoflow_dag_directory_syncs_total", outcome="failed") == failed + 1
        assert await service.sync_once(ctx, fingerprint) == fingerprint  # not retried until the files change

    as_leader(settings, body)


def test_the_service_syncs_at_start_follows_changes_and_stops_when_fenced_out(
        settings: Settings, tmp_path: Path) -> None:
    async def body(ctx: LeaderContext) -> None:
        volume = ConfigMapVolume(tmp_path / "dags")
        volume.write({"a.yaml": dag("a")})
        task = asyncio.create_task(DagDirectorySync(tmp_path, "wf", poll_interval=0.05).run(ctx))
        try:
            await eventually(lambda: dags(ctx), lambda d: "a" in d)
            volume.write({"a.yaml": dag("a"), "b.yaml": dag("b")})
            await eventually(lambda: dags(ctx), lambda d: "b" in d)
            volume.write({"a.yaml": dag("a"), "b.yaml": dag("b"), "bad.yaml": "dag_id: [x"})

            async def problems() -> float:
                return metric("leoflow_dag_directory_problems")

            await eventually(problems, lambda n: n == 1)
            await set_term(ctx.db.engine, ctx.cluster, 2)  # another replica leads now
            volume.write({"c.yaml": dag("c")})
            await asyncio.wait_for(task, timeout=30)  # returns (fenced out) without writing anything
            assert set(await dags(ctx)) == {"a", "b"}
            assert metric("leoflow_dag_directory_problems") == 0  # a follower says nothing about the files
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        with pytest.raises(FencedOut):
            await DagDirectorySync(tmp_path, "wf").sync_once(ctx, None)

    as_leader(settings, body)


def test_the_leaders_sync_resolves_cluster_templates_and_pins_their_version(settings: Settings,
                                                                            tmp_path: Path) -> None:
    from leoflow.db.stores import task_templates
    from leoflow.model.spec.reuse import cluster_template_hash

    async def put(ctx: LeaderContext, image: str) -> None:
        spec = {"inputs": {"part": {}}, "image": image, "command": ["etl", "{{ inputs.part }}"]}
        async with ctx.db.transaction() as conn:
            await task_templates.put_template(conn, "etl", spec, cluster_template_hash(spec), created_by="test",
                                              now=SystemClock().now())

    async def task_of(ctx: LeaderContext) -> dict[str, Any]:
        [spec] = [r.spec for r in await rows(ctx.db.engine, "SELECT v.spec FROM dags d JOIN dag_versions v "
                                                            "ON v.id = d.current_version_id")]
        return dict(spec["tasks"][0])

    async def body(ctx: LeaderContext) -> None:
        files = ConfigMapVolume(tmp_path / "dags")
        text = json.dumps({"dag_id": "uses", "tasks": [{"id": "t", "uses": "cluster/etl", "inputs": {"part": "p"}}]})
        files.write({"uses.json": text})
        service = DagDirectorySync(tmp_path / "dags", "wf")
        last = await service.sync_once(ctx, None)
        assert await dags(ctx) == {}  # no such template yet: the file is refused, nothing applied
        await put(ctx, "acme/etl:1")
        files.write({"uses.json": text + " "})  # the files changed: the sync looks again
        last = await service.sync_once(ctx, last)
        task = await task_of(ctx)
        assert (task["image"], task["command"], task["uses"]) == ("acme/etl:1", ["etl", "p"],
                                                                  {"template": "cluster/etl", "version": 1})
        await put(ctx, "acme/etl:2")  # a new version alone changes no DAG
        last = await service.sync_once(ctx, last)
        assert (await task_of(ctx))["image"] == "acme/etl:1"
        files.write({"uses.json": text + "  "})
        await service.sync_once(ctx, last)
        assert (await task_of(ctx))["uses"] == {"template": "cluster/etl", "version": 2}
        assert await dags(ctx) == {"uses": (False, "wf", 2)}

    as_leader(settings, body)
