"""Cluster templates over the API, on real PostgreSQL: versions, idempotence, deletion, and DAGs that
use them — inlined at apply, pinned to the version they were applied with, moved only by a re-apply."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN, ADMIN_TOKEN, READ, api_settings
from tests.api.live import serve

ETL: dict[str, Any] = {
    "inputs": {"partition": {"type": "string"}, "mode": {"type": "string", "default": "full"}},
    "image": "ghcr.io/acme/etl:5.1", "command": ["etl"],
    "args": ["--partition", "{{ inputs.partition }}", "--mode", "{{ inputs.mode }}"],
}


def put(client: httpx.Client, name: str, body: dict[str, Any], headers: dict[str, str] = ADMIN) -> httpx.Response:
    return client.put(f"/api/v2/templates/{name}", json=body, headers=headers)


def dag(uses: str = "cluster/etl", dag_id: str = "uses-etl") -> dict[str, Any]:
    return {"dag_id": dag_id, "tasks": [{"id": "p0", "uses": uses, "inputs": {"partition": "p0"}}]}


def test_put_versions_a_template_idempotently_and_delete_never_reuses_a_version(api_client: httpx.Client) -> None:
    first = put(api_client, "etl", ETL)
    assert first.status_code == 201, first.text
    assert (first.json()["name"], first.json()["version"], first.json()["created_by"]) == ("etl", 1, "boss")
    assert first.json()["spec"] == ETL
    again = put(api_client, "etl", {**ETL, "name": "etl"})  # the body may name itself; key order is no change
    assert (again.status_code, again.json()["version"]) == (200, 1)
    second = put(api_client, "etl", {**ETL, "args": ["--all"]})
    assert (second.status_code, second.json()["version"]) == (201, 2)
    listed = api_client.get("/api/v2/templates", headers=READ).json()["items"]
    assert [(t["name"], t["version"], t["versions"]) for t in listed] == [("etl", 2, 2)]
    assert api_client.get("/api/v2/templates/etl", headers=READ).json()["spec"]["args"] == ["--all"]
    assert api_client.get("/api/v2/templates/etl?version=1", headers=READ).json()["spec"] == ETL
    assert api_client.get("/api/v2/templates/etl?version=3", headers=READ).status_code == 404
    assert api_client.get("/api/v2/templates/etl?version=x", headers=READ).status_code == 400
    assert api_client.delete("/api/v2/templates/etl", headers=READ).status_code == 403
    assert api_client.delete("/api/v2/templates/etl", headers=ADMIN).status_code == 204
    assert api_client.delete("/api/v2/templates/etl", headers=ADMIN).status_code == 404
    assert api_client.get("/api/v2/templates/etl", headers=READ).status_code == 404
    assert api_client.get("/api/v2/templates", headers=READ).json()["items"] == []
    back = put(api_client, "etl", ETL)  # the same document as version 1, after a delete: a new version
    assert (back.status_code, back.json()["version"]) == (201, 3)
    events = api_client.get("/api/v2/audit?limit=20", headers=ADMIN).json()["items"]
    mine = [e for e in events if "/templates/" in e["route"] and e["method"] in ("PUT", "DELETE")]
    assert {(e["method"], e["status"]) for e in mine} >= {("PUT", 201), ("PUT", 200), ("DELETE", 204)}
    assert any(e["details"].get("template") == "etl" and e["details"].get("version") == 3 for e in mine)


@pytest.mark.parametrize(("name", "body", "field", "words"), [
    ("etl", {**ETL, "depends_on": ["x"]}, "depends_on", "is not allowed in a template"),
    ("etl", {**ETL, "when": "true"}, "when", "is not allowed in a template"),
    ("etl", {**ETL, "colour": "red"}, "colour", "unknown field"),
    ("etl", {**ETL, "inputs": {"partition": {"type": "text"}}}, "inputs.partition.type", "must be one of"),
    ("etl", {**ETL, "args": ["{{ inputs.nope }}"]}, "args[0]", "declares no input 'nope'"),
    ("etl", {**ETL, "args": ["{{ inputs.partition"]}, "args[0]", "no closing }}"),
    ("etl", {**ETL, "name": "other"}, "name", "'other' in the body but 'etl' in the path"),
    ("Bad_Name", ETL, "name", "is not a valid name"),
    ("etl", {k: v for k, v in ETL.items() if k != "image"}, "image", "is required"),
    ("etl", {**ETL, "args": ["a" * 300_000]}, "args[0]", "262,144 bytes"),
    ("etl", {**ETL, "retries": True}, "retries", "must be"),
])
def test_bad_templates_are_422s_naming_the_field(api_client: httpx.Client, name: str, body: dict[str, Any],
                                                 field: str, words: str) -> None:
    answer = put(api_client, name, body)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field
    assert words in answer.json()["error"]["message"]
    assert api_client.get("/api/v2/templates", headers=READ).json()["items"] == []  # nothing stored


def test_writes_need_admin(api_client: httpx.Client) -> None:
    assert put(api_client, "etl", ETL, headers=READ).status_code == 403
    assert put(api_client, "etl", ETL, headers={}).status_code == 401


def test_a_dag_pins_the_version_it_was_applied_with_until_re_applied(api_client: httpx.Client) -> None:
    assert put(api_client, "etl", ETL).status_code == 201
    applied = api_client.post("/api/v2/dags", json=dag(), headers=ADMIN)
    assert applied.status_code == 201, applied.text
    task = applied.json()["spec"]["tasks"][0]
    assert task["uses"] == {"template": "cluster/etl", "version": 1}
    assert task["args"] == ["--partition", "p0", "--mode", "full"] and task["image"] == "ghcr.io/acme/etl:5.1"
    assert applied.json()["template_changes"] == [{"template": "cluster/etl", "from": None, "to": 1}]
    assert put(api_client, "etl", {**ETL, "args": [*ETL["args"], "--v2"]}).json()["version"] == 2
    # The stored DAG version is untouched by the new template version.
    stored = api_client.get("/api/v2/dags/uses-etl", headers=ADMIN).json()
    assert stored["version"] == 1 and stored["spec"]["tasks"][0]["args"][-1] == "full"
    moved = api_client.post("/api/v2/dags", json=dag(), headers=ADMIN)
    assert moved.status_code == 201 and moved.json()["version"] == 2
    assert moved.json()["spec"]["tasks"][0]["args"][-1] == "--v2"
    assert moved.json()["template_changes"] == [{"template": "cluster/etl", "from": 1, "to": 2}]
    same = api_client.post("/api/v2/dags", json=dag(), headers=ADMIN)
    assert same.status_code == 200 and same.json()["template_changes"] == []
    pinned = api_client.post("/api/v2/dags", json=dag("cluster/etl@1"), headers=ADMIN)
    assert pinned.status_code == 201 and pinned.json()["spec"]["tasks"][0]["args"][-1] == "full"
    assert pinned.json()["template_changes"] == [{"template": "cluster/etl", "from": 2, "to": 1}]
    # Deleting the template leaves every DAG version as it was; a new apply naming it is refused.
    assert api_client.delete("/api/v2/templates/etl", headers=ADMIN).status_code == 204
    kept = api_client.get("/api/v2/dags/uses-etl/versions/2", headers=ADMIN).json()
    assert kept["spec"]["tasks"][0]["args"][-1] == "--v2"
    refused = api_client.post("/api/v2/dags", json=dag(dag_id="late"), headers=ADMIN)
    assert refused.status_code == 422
    assert refused.json()["error"]["details"]["field"] == "tasks[0].uses"
    assert "cluster template 'etl' does not exist" in refused.json()["error"]["message"]


@pytest.mark.parametrize(("task", "field", "words"), [
    ({"uses": "cluster/etl@9", "inputs": {"partition": "p"}}, "tasks[0].uses", "has no version 9"),
    ({"uses": "cluster/etl"}, "tasks[0].uses", "missing required input 'partition'"),
    ({"uses": "cluster/etl", "inputs": {"partition": "p", "x": 1}}, "tasks[0].inputs.x", "unknown input"),
    ({"uses": "cluster/etl", "inputs": {"partition": ["p"]}}, "tasks[0].inputs.partition", "must be of type string"),
    ({"uses": "cluster/etl", "inputs": {"partition": "{{ params.day }}"}}, "tasks[0].args[1]", "not declared"),
    ({"uses": "cluster/x/y"}, "tasks[0].uses", "is not a template"),
    ({"uses": {"template": "cluster/etl"}, "image": "busybox", "command": ["x"]}, "tasks[0].uses.version",
     "a cluster template's version"),
])
def test_bad_uses_of_cluster_templates_are_422s(api_client: httpx.Client, task: dict[str, Any], field: str,
                                                words: str) -> None:
    assert put(api_client, "etl", ETL).status_code == 201
    answer = api_client.post("/api/v2/dags", json={"dag_id": "bad", "tasks": [{"id": "t", **task}]}, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field
    assert words in answer.json()["error"]["message"]


def test_dags_sync_resolves_cluster_templates(api_client: httpx.Client) -> None:
    assert put(api_client, "etl", ETL).status_code == 201
    text = "dag_id: synced\ntasks:\n  - id: p0\n    uses: cluster/etl@1\n    inputs: {partition: p9}\n"
    answer = api_client.post("/api/v2/dags:sync", json={"source": "git", "files": [{"name": "a.yaml",
                                                                                    "content": text}]}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    task = api_client.get("/api/v2/dags/synced", headers=ADMIN).json()["spec"]["tasks"][0]
    assert task["args"][1] == "p9" and task["uses"] == {"template": "cluster/etl", "version": 1}
    bad = text.replace("@1", "@7")
    answer = api_client.post("/api/v2/dags:sync", json={"source": "git", "files": [{"name": "a.yaml",
                                                                                    "content": bad}]}, headers=ADMIN)
    assert answer.status_code == 422
    error = answer.json()["error"]["details"]["errors"][0]
    assert (error["file"], error["path"], error["line"], error["column"]) == ("a.yaml", "tasks[0].uses", 4, 5)
    assert "cluster template 'etl' has no version 7" in str(error)


# --------------------------------------------------------------------------- the CLI

@pytest.fixture
def api_url(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        yield url


TEMPLATE_YAML = """\
name: etl
inputs: {partition: {type: string}}
image: ghcr.io/acme/etl:5.1
command: [etl, "{{ inputs.partition }}"]
"""


def test_templates_verbs_and_dags_apply_naming_the_moved_template(
        api_url: str, tmp_path: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "etl.yaml"
    path.write_text(TEMPLATE_YAML)
    assert main(["templates", "apply", str(path)]) == 0
    assert capsys.readouterr().out == "cluster/etl: stored (version 1)\n"
    assert main(["templates", "apply", str(path)]) == 0
    assert capsys.readouterr().out == "cluster/etl: unchanged (version 1)\n"
    dag_file = tmp_path / "dag.yaml"
    dag_file.write_text("dag_id: d\ntasks:\n  - {id: a, uses: cluster/etl, inputs: {partition: p}}\n")
    assert main(["dags", "apply", str(dag_file)]) == 0
    assert capsys.readouterr().out == "d: applied (version 1, cluster/etl new → 1)\n"
    path.write_text(TEMPLATE_YAML.replace("etl:5.1", "etl:5.2"))
    assert main(["templates", "apply", str(path)]) == 0
    assert capsys.readouterr().out == "cluster/etl: stored (version 2)\n"
    assert main(["dags", "apply", str(dag_file)]) == 0
    assert capsys.readouterr().out == "d: applied (version 2, cluster/etl 1 → 2)\n"
    assert main(["dags", "show", "d"]) == 0
    assert any(line.split()[:3] == ["a", "-", "uses=cluster/etl@2"] for line in capsys.readouterr().out.splitlines())
    assert main(["templates", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["TEMPLATE", "NEWEST", "VERSIONS", "CREATED", "BY"]
    assert lines[1].split()[:3] == ["cluster/etl", "2", "2"]
    assert main(["templates", "get", "etl", "--version", "1", "--output", "json"]) == 0
    assert '"etl:5.1"' not in capsys.readouterr().out  # JSON of the document: the image is a whole string
    assert main(["templates", "get", "etl", "--version", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("template: cluster/etl (version 1,") and "image: ghcr.io/acme/etl:5.1" in out
    path.write_text(TEMPLATE_YAML + "depends_on: [x]\n")
    assert main(["templates", "apply", str(path)]) == 1
    err = capsys.readouterr().err
    assert "etl.yaml:5:1: depends_on: is not allowed in a template" in err
    several = TEMPLATE_YAML.replace("etl:5.1", "etl:5.2") + "---\n" + TEMPLATE_YAML.replace("name: etl", "name: load")
    monkeypatch.setattr("sys.stdin", io.StringIO(several))
    assert main(["templates", "apply", "-"]) == 0
    assert capsys.readouterr().out == "cluster/etl: unchanged (version 2)\ncluster/load: stored (version 1)\n"
    assert main(["templates", "delete", "etl"]) == 0
    assert "deleted cluster/etl" in capsys.readouterr().out
    assert main(["templates", "get", "etl"]) == 1
    assert "not found" in capsys.readouterr().err


# --------------------------------------------------------------------------- racing writers

def test_racing_puts_of_one_name_store_one_version(database_url: str) -> None:
    """The second of two concurrent puts waits for the first: the same document is its version, another a 409."""
    import asyncio

    from leoflow.clock import SystemClock
    from leoflow.db.connection.engine import make_async_engine
    from leoflow.db.stores import task_templates
    from leoflow.errors import Conflict
    from leoflow.model.spec.reuse import cluster_template_hash

    async def put(conn: Any, spec: dict[str, Any]) -> tuple[int, bool]:
        return await task_templates.put_template(conn, "etl", spec, cluster_template_hash(spec), created_by="t",
                                                 now=SystemClock().now())

    async def second(spec: dict[str, Any]) -> tuple[int, bool]:
        async with engine.begin() as conn:
            return await put(conn, spec)

    async def race(first_spec: dict[str, Any], second_spec: dict[str, Any]) -> tuple[tuple[int, bool], Any]:
        async with engine.connect() as first:
            await first.begin()
            stored = await put(first, first_spec)
            later = asyncio.create_task(second(second_spec))
            await asyncio.sleep(0.5)
            assert not later.done()  # waiting on the first's uncommitted row
            await first.commit()
        try:
            return stored, await later
        except Conflict as exc:
            return stored, exc

    async def main() -> None:
        stored, same = await race(ETL, ETL)
        assert stored == (1, True) and same == (1, False)
        stored, other = await race({**ETL, "args": ["a"]}, {**ETL, "args": ["b"]})
        assert stored == (2, True) and isinstance(other, Conflict) and "version 2" in str(other)
        async with engine.connect() as conn:
            assert [t["version"] for t in await task_templates.list_templates(conn)] == [2]

    engine = make_async_engine(api_settings(database_url).database, pool_size=4)

    async def run() -> None:
        try:
            await main()
        finally:
            await engine.dispose()

    asyncio.run(run())
