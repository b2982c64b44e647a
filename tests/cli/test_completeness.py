"""Every API operation has a CLI verb, and every verb calls exactly the operations it declares.

The first test walks the OpenAPI document (the same one the API serves, kept equal to the route
table by tests/api) and the CLI's parser tree: each operation must be named by some verb's
``operations``. The second runs *every* verb against a live API and records which operations
the server saw for each, so a declaration cannot claim a call the verb does not make.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from starlette.types import Message, Receive, Scope, Send

from leoflow.api.app import create_app
from leoflow.api.openapi.document import openapi_document
from leoflow.cli.main import build_parser, main
from leoflow.model.artifacts.declared import OutputArtifact
from leoflow.storage.artifacts import upload_outputs
from leoflow.storage.objects import ObjectStore
from tests.api.conftest import ADMIN_TOKEN, api_settings, seed_task
from tests.api.live import serve

#: The one verb without --output: Prometheus text is its own format.
NO_OUTPUT_FLAG = {"api metrics"}


def leaf_verbs(parser: argparse.ArgumentParser, prefix: str = "") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from leaf_verbs(child, f"{prefix} {name}".strip())
            return
    yield prefix, parser


def client_verbs() -> dict[str, argparse.ArgumentParser]:
    return {name: p for name, p in leaf_verbs(build_parser()) if p.get_default("operations") is not None}


def api_operations() -> set[str]:
    return {f"{method.upper()} {path}" for path, ops in openapi_document()["paths"].items() for method in ops}


def test_every_api_operation_has_a_cli_verb() -> None:
    declared = {op for p in client_verbs().values() for op in p.get_default("operations")}
    missing = api_operations() - declared
    assert not missing, f"API operations without a CLI verb: {sorted(missing)}"
    assert declared <= api_operations(), f"verbs name operations the API lacks: {sorted(declared - api_operations())}"


def test_every_verb_takes_output_table_json_yaml() -> None:
    """Reads and writes alike: a script learns what a write did (the new run's id) from its JSON."""
    for name, parser in client_verbs().items():
        output = [a for a in parser._actions if a.dest == "output"]
        if name in NO_OUTPUT_FLAG:
            assert not output
            continue
        assert output, f"`leoflow {name}` has no --output"
        assert list(output[0].choices or ()) == ["table", "json", "yaml"] and output[0].default == "table", name


def test_the_walk_would_notice_a_missing_verb(monkeypatch: pytest.MonkeyPatch) -> None:
    """Guards the first test: an operation no verb declares is reported."""
    document = openapi_document()
    extra = {**document, "paths": {**document["paths"], "/api/v2/imaginary": {"get": {}}}}
    monkeypatch.setattr("tests.cli.test_completeness.openapi_document", lambda: extra)
    with pytest.raises(AssertionError, match="imaginary"):
        test_every_api_operation_has_a_cli_verb()


class SeenOperations:
    """ASGI wrapper recording ``METHOD /route/template`` of every request the app routed."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[str] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def recording_send(message: Message) -> None:
            # Recorded before the answer leaves: the CLI cannot have it (and the test cannot have
            # moved on to the next verb) while this request is still unrecorded.
            if message["type"] == "http.response.start":
                route = scope.get("route")
                self.seen.append(f"{scope['method']} {getattr(route, 'path', scope['path'])}")
            await send(message)

        await self.app(scope, receive, recording_send)


#: One invocation per verb, in an order that leaves the objects each next one needs.
INVOCATIONS: list[tuple[str, list[str]]] = [
    ("api health", []), ("api ready", []), ("api metrics", []), ("api openapi", []),
    ("dags apply", ["{spec}"]), ("dags sync", ["{dir}"]), ("dags replace", ["etl", "{spec}"]), ("dags list", []),
    ("dags show", ["etl"]),
    ("dags show", ["etl", "--version", "1"]),  # its second operation
    ("dags versions", ["etl"]), ("dags pause", ["etl"]), ("dags unpause", ["etl"]),
    ("runs trigger", ["etl", "--run-id", "r2"]), ("runs trigger", ["etl", "--run-id", "r3", "--wait"]),
    ("runs list", ["etl"]), ("runs list", []), ("runs show", ["etl", "r1"]),
    ("runs wait", ["etl", "r1"]), ("runs cancel", ["etl", "r2"]),
    ("runs clear", ["etl", "r1", "--task", "extract", "--downstream"]),
    ("tasks mark", ["etl", "r1", "extract", "failed"]), ("runs mark", ["etl", "r1", "success"]),
    ("tasks list", ["etl", "r1"]), ("tasks list", ["--state", "success"]),
    ("tasks show", ["etl", "r1", "extract"]), ("tasks logs", ["etl", "r1", "extract"]),
    ("tasks outputs", ["etl", "r1", "extract"]), ("tasks events", ["etl", "r1", "extract", "--try", "1"]),
    ("tasks artifacts", ["etl", "r1", "extract"]),
    ("tasks artifacts", ["etl", "r1", "extract", "report", "--to", "{artifact}"]),
    ("tasks approve", ["etl", "r9", "gate1"]), ("tasks reject", ["etl", "r9", "gate2", "-m", "not today"]),
    ("dags backfill", ["etl", "--start", "2026-03-01", "--end", "2026-03-01T03:00:00Z"]),
    ("backfills list", ["etl"]), ("backfills show", ["etl", "1"]), ("backfills cancel", ["etl", "1"]),
    ("dags backfill", ["etl", "--start", "2026-03-02", "--end", "2026-03-02T03:00:00Z", "--wait"]),
    ("cluster leader", []), ("cluster nodes", []), ("cluster events", []),
    ("notifications list", []), ("notifications retry", ["1"]), ("audit list", []),
    ("pools create", ["gpu", "--slots", "2"]), ("pools list", []), ("pools show", ["gpu"]),
    ("pools resize", ["gpu", "--slots", "3"]), ("pools delete", ["gpu"]),
    ("datasets event", ["s3://lake/orders", "--extra", '{"rows": 1}']), ("datasets list", []),
    ("tokens create", ["ci", "--role", "viewer", "--expires-in-days", "7"]), ("tokens list", []),
    ("tokens revoke", ["{token}"]),
    ("templates apply", ["{template}"]), ("templates list", []), ("templates get", ["etl"]),
    ("templates delete", ["etl"]),
    ("dags delete", ["etl"]),
]


#: What stands in for the leader while a verb follows something: the first statement that
#: changes a row ends what is followed.
ENDINGS = {
    "dags backfill": "UPDATE backfills SET state = 'cancelled' WHERE state = 'running' RETURNING id",
    "runs trigger": "UPDATE dag_runs SET state = 'success', ended_at = now() WHERE run_id = 'r3' "
                    "AND state = 'queued' RETURNING id",
    # A clear or mark waits for the leader to apply the command it recorded.
    "runs clear": "UPDATE run_commands SET applied_at = now(), outcome = '{\"tasks\": []}' "
                  "WHERE applied_at IS NULL RETURNING id",
    "tasks mark": "UPDATE run_commands SET applied_at = now(), outcome = '{\"tasks\": []}' "
                  "WHERE applied_at IS NULL RETURNING id",
    "runs mark": "UPDATE run_commands SET applied_at = now(), outcome = '{\"tasks\": []}' "
                 "WHERE applied_at IS NULL RETURNING id",
}


def _end_soon(url: str, statement: str) -> None:
    deadline = time.monotonic() + 30
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            if conn.execute(statement).fetchall():
                return
            time.sleep(0.05)


def _seed(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type) "
                     "SELECT dag_id, 'r1', current_version_id, 'manual' FROM dags WHERE dag_id = 'etl'")
    seed_task(url, "etl", "r1", "extract", state="success", tries=[{"log": "hello\n"}])
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE dag_runs SET state = 'success', ended_at = now() WHERE run_id = 'r1'")
        conn.execute("INSERT INTO notifications (run_pk, dag_id, run_id, event, target, payload, give_up_at) "
                     "SELECT id, dag_id, run_id, 'success', 'default', '{}', now() FROM dag_runs WHERE run_id = 'r1'")


def _seed_artifact(database_url: str, archive_url: str) -> bytes:
    """An output artifact of r1's extract, as an executor leaves one: the object first, then its row;
    returns the stored .tar.gz."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT tt.id FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id "
                           "JOIN dag_runs r ON r.id = ti.run_pk "
                           "WHERE r.run_id = 'r1' AND ti.task_id = 'extract'").fetchone()
    assert row is not None
    source = Path(tempfile.mkdtemp())
    (source / "report.txt").write_text("rows: 3\n")
    store = ObjectStore(archive_url)
    [packed] = asyncio.run(upload_outputs(store, "default", row[0], source, [OutputArtifact("report", "report.txt")]))
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO task_artifacts (task_try_id, name, kind, object_key, size_bytes, stored_bytes, "
                     "files, digest, complete) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, true)",
                     (row[0], packed.name, packed.kind, packed.object_key, packed.size_bytes, packed.stored_bytes,
                      packed.files, packed.digest))
    return asyncio.run(store.get(packed.object_key or ""))


def _seed_gates(url: str) -> None:
    """A run whose two tasks wait for an approval (tasks approve, tasks reject)."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state) "
                     "SELECT dag_id, 'r9', current_version_id, 'manual', 'running' FROM dags WHERE dag_id = 'etl'")
    for gate in ("gate1", "gate2"):
        seed_task(url, "etl", "r9", gate, state="waiting")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO task_waits (task_instance_id, position, dag_id, kind) "
                     "SELECT id, 0, 'etl', 'approval' FROM task_instances WHERE state = 'waiting'")


def test_every_verb_calls_what_it_declares(database_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    verbs = client_verbs()
    assert sorted({name for name, _ in INVOCATIONS}) == sorted(verbs), "add the new verb to INVOCATIONS"
    spec = tmp_path / "etl.yaml"
    spec.write_text("dag_id: etl\nschedule: '0 * * * *'\nstart_date: 2026-01-01T00:00:00Z\npaused: true\n"
                    "tasks:\n  - {id: extract, image: busybox, command: ['true']}\n")
    (tmp_path / "dags").mkdir()
    (tmp_path / "dags" / "etl.yaml").write_text(spec.read_text())
    template = tmp_path / "template.yaml"
    template.write_text("name: etl\nimage: busybox\ncommand: ['true']\n")
    archive = (tmp_path / "archive").as_uri()
    recorder = SeenOperations(create_app(api_settings(database_url, LEOFLOW_LOG_ARCHIVE_URL=archive)))
    with serve(recorder) as url:  # type: ignore[arg-type]
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        seen_by: dict[str, set[str]] = {}
        for name, args in INVOCATIONS:
            files = {"{spec}": str(spec), "{dir}": str(tmp_path / "dags"), "{template}": str(template),
                     "{artifact}": str(tmp_path / "report.tar.gz")}
            if "{token}" in args:  # the one tokens create made
                with psycopg.connect(database_url) as conn:
                    files["{token}"] = conn.execute("SELECT id FROM api_tokens").fetchone()[0]  # type: ignore[index]
            argv = [*name.split(), *(files.get(a, a) for a in args)]
            if argv == ["runs", "trigger", "etl", "--run-id", "r2"]:
                _seed(database_url)
                stored = _seed_artifact(database_url, archive)
            if argv[:2] == ["tasks", "approve"]:
                _seed_gates(database_url)
            recorder.seen.clear()
            if "--wait" in argv or name in ("runs clear", "tasks mark", "runs mark"):  # no leader: end it from the side
                threading.Thread(target=_end_soon, args=(database_url, ENDINGS[name]), daemon=True).start()
            code = main(argv)
            out, err = capsys.readouterr()
            # No elector holds the lock here: the leader route answers its 503, the verb exits 1.
            # The followed backfill is cancelled: exit 1, as for a failed backfill.
            failing = name == "cluster leader" or (name == "dags backfill" and "--wait" in argv)
            assert code == (1 if failing else 0), (argv, out, err)
            seen_by.setdefault(name, set()).update(recorder.seen)
    assert (tmp_path / "report.tar.gz").read_bytes() == stored  # tasks artifacts ... NAME --to FILE
    for name, parser in verbs.items():
        declared = set(parser.get_default("operations"))
        assert seen_by[name] == declared, f"`leoflow {name}` declares {sorted(declared)}, calls {sorted(seen_by[name])}"
