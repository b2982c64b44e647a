"""Every API operation, called through the typed client against a live server, answers its typed result.

The server is the real app under uvicorn on a fresh migrated database; an ASGI wrapper records
the route template of every request, so the test proves each operation of the OpenAPI document
was reached by a client method (not only that the methods exist), and each answer is checked
to be the class the document names. No leader runs: the things only a leader does (apply a
clear or a mark) are done from the side, as in ``tests/cli/test_completeness.py``.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from leoflow.api.app import create_app
from leoflow.client import ApiUnavailable, AsyncClient, Client
from leoflow.client.models import (
    Backfill,
    CommandPending,
    CommandResult,
    DagDetail,
    DagPage,
    DagSyncResult,
    Pool,
    Run,
    RunDetail,
    TaskInstance,
    TokenCreated,
)
from leoflow.client.operations import OPERATIONS
from tests.api.conftest import ADMIN_TOKEN, api_settings
from tests.api.live import serve
from tests.cli.test_completeness import SeenOperations, _end_soon, _seed, _seed_artifact, _seed_gates

SPEC_YAML = ("dag_id: etl\nschedule: '0 * * * *'\nstart_date: 2026-01-01T00:00:00Z\npaused: true\n"
             "tasks:\n  - {id: extract, image: busybox, command: ['true']}\n")
APPLIED = ("UPDATE run_commands SET applied_at = now(), outcome = '{\"tasks\": []}' "
           "WHERE applied_at IS NULL RETURNING id")


def _applied_soon(database_url: str) -> None:
    threading.Thread(target=_end_soon, args=(database_url, APPLIED), daemon=True).start()


def _calls(c: Client, database_url: str, archive_url: str) -> None:
    """One call of every operation, in an order that leaves what each next one needs."""
    assert c.liveness().status == "ok"
    assert c.readiness().status == "ready"
    assert "leoflow" in c.get_metrics()
    assert c.get_openapi_document()["openapi"].startswith("3.1")
    dag = c.apply_dag(SPEC_YAML)  # YAML text, as a file holds it
    assert isinstance(dag, DagDetail) and dag.dag_id == "etl"
    synced = c.sync_dag_files(source="ci", files=[{"name": "etl.yaml", "content": SPEC_YAML}], dry_run=True)
    assert isinstance(synced, DagSyncResult) and synced.dry_run is True
    assert c.put_dag("etl", {"dag_id": "etl", "paused": True, "schedule": "0 * * * *", "description": "v2",
                             "start_date": "2026-01-01T00:00:00Z",
                             "tasks": [{"id": "extract", "image": "busybox", "command": ["true"]}]}).version == 2
    page = c.list_dags()
    assert isinstance(page, DagPage) and [d.dag_id for d in page.items] == ["etl"]
    assert (c.get_dag("etl").spec or {})["dag_id"] == "etl"
    assert [v.version for v in c.list_dag_versions("etl").items] == [2, 1]
    assert c.get_dag_version("etl", 2).spec["description"] == "v2"
    assert c.patch_dag("etl", paused=False).paused is False
    _seed(database_url)  # run r1 (success), its task extract with a log, a notification
    run = c.trigger_run("etl", run_id="r2", conf={"day": 1})
    assert isinstance(run, RunDetail) and run.conf == {"day": 1}
    runs = c.list_runs("etl", limit=1)
    assert isinstance(runs.items[0], Run) and runs.next_cursor
    every = sorted(r.run_id for r in c.list_runs("etl", limit=500).items)
    assert {"r1", "r2"} <= set(every)
    assert sorted(r.run_id for r in c.iter_runs("etl", page_size=1)) == every  # one per page: follows the cursor
    assert sorted(r.run_id for r in c.list_runs_of_every_dag(dag_id="etl").items) == every
    r1 = c.get_run("etl", "r1")
    assert r1.state == "success" and isinstance(r1.tasks[0], TaskInstance)
    assert c.cancel_run("etl", "r2").state == "cancelled"
    _applied_soon(database_url)
    assert isinstance(c.clear_task_instances("etl", "r1", tasks=["extract"], downstream=True),
                      CommandResult | CommandPending)
    _applied_soon(database_url)
    assert isinstance(c.mark_task_instance("etl", "r1", "extract", state="failed"), CommandResult | CommandPending)
    _applied_soon(database_url)
    assert isinstance(c.mark_run("etl", "r1", state="success"), CommandResult | CommandPending)
    _seed_gates(database_url)  # run r9: two tasks waiting for an approval
    assert c.decide_approval("etl", "r9", "gate1", decision="approve", comment="ok").decided_by == "boss"
    assert [t.task_id for t in c.list_task_instances("etl", "r1").items] == ["extract"]
    assert c.list_task_instances_of_every_run(state="success").items[0].dag_id == "etl"
    assert c.get_task_instance("etl", "r1", "extract").tries[0].try_number == 1
    assert c.get_task_log("etl", "r1", "extract", try_=1) == "hello\n"
    assert c.get_task_outputs("etl", "r1", "extract").try_number == 1
    stored = _seed_artifact(database_url, archive_url)
    assert [(a.name, a.complete, a.kind) for a in c.list_task_artifacts("etl", "r1", "extract").artifacts] == [
        ("report", True, "file")]
    assert c.download_task_artifact("etl", "r1", "extract", "report") == stored  # bytes, as stored
    assert c.get_task_pod_events("etl", "r1", "extract", try_=1).events == []  # not a Kubernetes try
    backfill = c.start_backfill("etl", start="2026-03-01T00:00:00Z", end="2026-03-01T03:00:00Z")
    assert isinstance(backfill, Backfill)
    assert [b.id for b in c.list_backfills("etl").items] == [backfill.id]
    assert c.get_backfill("etl", backfill.id).dag_id == "etl"
    assert c.cancel_backfill("etl", backfill.id).state in ("cancelled", "cancelling")
    with pytest.raises(ApiUnavailable, match="leads the cluster"):  # no elector here: 503, retried, then raised
        c.current_leader()
    assert c.cluster_nodes().items == []
    assert isinstance(c.cluster_events().items, list)
    notification = c.list_notifications().items[0]
    assert c.retry_notification(notification.id).id == notification.id
    assert any(e.route == "/api/v2/dags" for e in c.list_audit_events().items)
    assert isinstance(c.create_pool(name="gpu", slots=2), Pool)
    assert "gpu" in [p.name for p in c.list_pools().items]
    assert c.get_pool("gpu").slots == 2
    assert c.resize_pool("gpu", slots=3).slots == 3
    c.delete_pool("gpu")
    assert "gpu" not in [p.name for p in c.list_pools().items]
    assert c.record_dataset_event(uri="s3://lake/orders", extra={"rows": 1}).uri == "s3://lake/orders"
    assert all(d.uri for d in c.list_datasets().items)  # only datasets a DAG names are listed
    token = c.create_api_token(name="ci", role="viewer", expires_in_days=7)
    assert isinstance(token, TokenCreated) and token.secret
    assert [t.name for t in c.list_api_tokens().items] == ["ci"]
    c.revoke_api_token(token.id)
    assert [t.id for t in c.list_api_tokens().items if not t.revoked_at] == []
    template = c.put_cluster_template("etl", "name: etl\nimage: busybox\ncommand: ['true']\n")
    assert template.version == 1
    assert [t.name for t in c.list_cluster_templates().items] == ["etl"]
    assert c.get_cluster_template("etl", version=1).spec["image"] == "busybox"
    c.delete_cluster_template("etl")
    c.delete_dag("etl")
    assert c.list_dags().items == []


def test_every_operation_through_the_client(database_url: str, tmp_path: Path) -> None:
    archive = (tmp_path / "archive").as_uri()
    recorder = SeenOperations(create_app(api_settings(database_url, LEOFLOW_LOG_ARCHIVE_URL=archive)))
    with serve(recorder) as url, Client(url, ADMIN_TOKEN, backoff=0.01) as client:  # type: ignore[arg-type]
        _calls(client, database_url, archive)
    seen = set(recorder.seen)
    declared = {f"{op.method} {op.path}" for op in OPERATIONS.values()}
    assert declared - seen == set(), "operations no client call reached"
    assert seen <= declared
    # The leader route answered 503 and, being a GET, was tried 1 + 3 times.
    assert recorder.seen.count("GET /api/v2/cluster/leader") == 4


def test_the_async_client_calls_the_same_operations(database_url: str) -> None:
    """A sample through AsyncClient (the same generated table): reads, writes, a paged iterator, a 4xx."""
    recorder = SeenOperations(create_app(api_settings(database_url)))

    async def scenario(url: str) -> None:
        async with AsyncClient(url, ADMIN_TOKEN, backoff=0.01) as c:
            assert (await c.apply_dag(SPEC_YAML)).dag_id == "etl"
            await c.trigger_run("etl", run_id="a1")
            await c.trigger_run("etl", run_id="a2")
            assert sorted([r.run_id async for r in c.iter_runs("etl", page_size=1)]) == ["a1", "a2"]
            assert (await c.get_run("etl", "a1")).state == "queued"
            with pytest.raises(Exception, match="run_timeout_seconds") as refused:
                await c.trigger_run("etl", run_timeout_seconds=-1)
            assert getattr(refused.value, "status", None) == 422

    with serve(recorder) as url:  # type: ignore[arg-type]
        asyncio.run(scenario(url))
    assert recorder.seen.count("GET /api/v2/dags/{dag_id}/runs") == 2


def test_results_render_as_tables_in_a_notebook(database_url: str) -> None:
    with serve(create_app(api_settings(database_url))) as url, Client(url, ADMIN_TOKEN) as c:
        c.apply_dag(SPEC_YAML)
        c.trigger_run("etl", run_id="r1", conf={"note": "<b>bold</b>"})
        page_html = c.list_runs("etl")._repr_html_()
        run_html = c.get_run("etl", "r1")._repr_html_()
    assert "<th>run_id</th>" in page_html and "<td>r1</td>" in page_html and "<th>conf</th>" not in page_html
    assert "<caption>RunPage: 1 items</caption>" in page_html
    assert "<caption>RunDetail</caption>" in run_html and "queued" in run_html
    assert "&lt;b&gt;bold&lt;/b&gt;" in run_html and "<b>bold" not in run_html  # escaped
