"""``leoflow dags sync`` end to end: the CLI, ``POST /api/v2/dags:sync`` and a real PostgreSQL.

Plans (created / changed / unchanged / deleted), pruning only what the same source created,
all-or-nothing on one bad file among many, every problem of every file reported at once.
Also ``dags delete`` and ``dags apply -``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN, ADMIN_TOKEN, READ, api_settings
from tests.api.live import serve


def dag(dag_id: str, command: str = "true", **extra: Any) -> str:
    return json.dumps({"dag_id": dag_id, "tasks": [{"id": "t", "image": "busybox:1.36", "command": [command]}],
                       **extra})


@pytest.fixture
def api(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[httpx.Client]:
    with serve(create_app(api_settings(database_url))) as url, httpx.Client(base_url=url, timeout=60) as client:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        monkeypatch.delenv("LEOFLOW_DAGS_SOURCE", raising=False)
        yield client


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str], list[str]]:
    try:
        code = main(list(argv))
    except SystemExit as exit_:  # usage errors: argparse and the verbs exit 2
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def live_dags(api: httpx.Client) -> dict[str, dict[str, Any]]:
    return {d["dag_id"]: d for d in api.get("/api/v2/dags", headers=READ).json()["items"]}


def test_sync_plans_created_changed_unchanged_and_prunes_only_its_own_source(
        api: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path / "repo", {"etl.yaml": f"{dag('etl')}\n---\n{dag('report')}\n",
                                     "team/daily.json": dag("daily", schedule="@daily")})
    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "gitops")
    assert code == 0
    assert [line.split()[:4] for line in out[:3]] == [
        ["created", "daily", "version", "1"], ["created", "etl", "version", "1"], ["created", "report", "version", "1"]]
    assert "etl.yaml (document 0)" in out[1] and "team/daily.json" in out[0]
    assert out[3] == "3 created, 0 changed, 0 unchanged, 0 deleted (source 'gitops')"
    assert {d["dag_id"]: d["source"] for d in live_dags(api).values()} == {
        "daily": "gitops", "etl": "gitops", "report": "gitops"}

    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "gitops")
    assert (code, out[-1]) == (0, "0 created, 0 changed, 3 unchanged, 0 deleted (source 'gitops')")

    # A DAG applied by hand and one synced by another source live next to the repo's DAGs.
    write(tmp_path / "hand", {"manual.yaml": dag("manual")})
    assert cli(capsys, "dags", "apply", str(tmp_path / "hand" / "manual.yaml"))[0] == 0
    assert cli(capsys, "dags", "sync", str(write(tmp_path / "other", {"o.yaml": dag("other")})),
               "--source", "other")[0] == 0

    # etl changes, daily's file is removed: without --prune daily stays and is reported.
    write(repo, {"etl.yaml": f"{dag('etl', 'false')}\n---\n{dag('report')}\n"})
    (repo / "team" / "daily.json").unlink()
    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "gitops")
    assert code == 0 and out[0].split()[:4] == ["changed", "etl", "version", "2"]
    assert out[-1] == "not in the files, kept (--prune deletes them): daily"
    assert "daily" in live_dags(api)

    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "gitops", "--prune", "--dry-run")
    assert code == 0 and ["deleted", "daily"] in [line.split() for line in out]
    assert out[-1].startswith("dry run, nothing was changed") and "1 deleted" in out[-1]
    assert "daily" in live_dags(api)

    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "gitops", "--prune")
    assert code == 0 and out[-1] == "0 created, 0 changed, 2 unchanged, 1 deleted (source 'gitops')"
    assert set(live_dags(api)) == {"etl", "report", "manual", "other"}  # hand-applied and foreign DAGs stay

    # Only when asked are DAGs without a label pruned; another source's never.
    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "gitops", "--prune", "--prune-unlabeled")
    assert code == 0 and ["deleted", "manual"] in [line.split() for line in out]
    assert set(live_dags(api)) == {"etl", "report", "other"}

    # A deleted DAG whose file comes back is created again (as a new version).
    write(repo, {"team/daily.json": dag("daily", schedule="@daily")})
    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "gitops")
    assert out[0].split()[:4] == ["created", "daily", "version", "2"]


def test_a_hand_applied_dag_is_adopted_and_another_sources_dag_is_a_conflict(
        api: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    api.post("/api/v2/dags", content=dag("manual"), headers={**ADMIN, "Content-Type": "application/json"})
    assert cli(capsys, "dags", "sync", str(write(tmp_path / "b", {"b.yaml": dag("theirs")})), "--source", "b")[0] == 0

    repo = write(tmp_path / "a", {"manual.yaml": dag("manual")})
    code, out, _ = cli(capsys, "dags", "sync", str(repo), "--source", "a")
    assert code == 0 and out[0].split()[:2] == ["unchanged", "manual"] and "(adopted: was applied by hand)" in out[0]
    assert live_dags(api)["manual"]["source"] == "a"

    write(repo, {"new.yaml": dag("new"), "z.yaml": dag("theirs", "false")})
    code, out, err = cli(capsys, "dags", "sync", str(repo), "--source", "a")
    assert code == 1 and out == []
    assert err[0] == ("leoflow: error: z.yaml:1:2: dag_id: DAG 'theirs' belongs to sync source 'b', not 'a'; "
                      "delete it or sync it from its own source")
    assert err[-1] == "leoflow: error: 1 problem(s) in 1 file(s); nothing was changed"
    assert "new" not in live_dags(api) and live_dags(api)["theirs"]["version"] == 1


def test_one_bad_file_among_many_changes_nothing_and_every_problem_is_reported(
        api: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    repo = write(tmp_path / "repo", {f"good-{i:02d}.yaml": dag(f"good-{i:02d}") for i in range(30)})
    assert cli(capsys, "dags", "sync", str(repo), "--source", "ci")[0] == 0
    # Every good file changes, and four files are bad in four different ways.
    write(repo, {f"good-{i:02d}.yaml": dag(f"good-{i:02d}", "false") for i in range(30)})
    write(repo, {"bad/syntax.yaml": "dag_id: broken\ntasks: [\n",
                 "bad/multi.yaml": f"{dag('fine')}\n---\ndag_id: second\ntasks:\n  - id: t\n    kind: container\n",
                 "bad/dup.yaml": dag("good-07")})
    (repo / "bad" / "latin1.yaml").write_bytes(b"dag_id: x\ndescription: caf\xe9\n")
    code, out, err = cli(capsys, "dags", "sync", str(repo), "--source", "ci", "--prune")
    assert code == 1 and out == []
    assert err == [
        "leoflow: error: bad/latin1.yaml:2:17: is not UTF-8 text",
        "leoflow: error: bad/multi.yaml:5:5: document 1: tasks[0].image: is required (or set kind: empty)",
        "leoflow: error: bad/syntax.yaml:3:1: invalid YAML: did not find expected node content (while parsing a "
        "flow node)",
        "leoflow: error: good-07.yaml:1:2: dag_id: DAG 'good-07' is also defined in bad/dup.yaml",
        "leoflow: error: 4 problem(s) in 4 file(s); nothing was changed",
    ]
    dags = live_dags(api)
    assert len(dags) == 30 and {d["version"] for d in dags.values()} == {1} and "fine" not in dags

    # The API answers with every problem as data, too.
    body = {"source": "ci", "files": [{"name": "a.yaml", "content": "dag_id: [x\n"},
                                      {"name": "b.yaml", "content": dag("ok")},
                                      {"name": "c.json", "content": '{"dag_id": "c", "tasks": 3}'}]}
    answer = api.post("/api/v2/dags:sync", json=body, headers=ADMIN)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["message"] == "2 problem(s) in 2 file(s); nothing was applied"
    assert error["details"]["errors"] == [
        {"file": "a.yaml", "document": None, "path": "", "line": 2, "column": 1,
         "problem": "invalid YAML: did not find expected ',' or ']' (while parsing a flow sequence)"},
        {"file": "c.json", "document": None, "path": "tasks", "line": None, "column": None,
         "problem": "must be a list of tasks, got an integer"}]
    assert "ok" not in live_dags(api)


@pytest.mark.parametrize(("body", "field"), [
    ({"files": []}, "source"),
    ({"source": "bad label", "files": []}, "source"),
    ({"source": "s", "files": [], "prune": "yes"}, "prune"),
    ({"source": "s", "files": [], "prune_unlabeled": True}, "prune_unlabeled"),
    ({"source": "s", "files": {}}, "files"),
    ({"source": "s"}, "files"),
    ({"source": "s", "files": [{"name": "a.yaml", "content": "x: 1"}, {"name": "a.yaml", "content": ""}]},
     "files[1].name"),
    ({"source": "s", "files": [{"name": "", "content": ""}]}, "files[0].name"),
    ({"source": "s", "files": [{"name": "a", "content": 7}]}, "files[0].content"),
    ({"source": "s", "files": [{"name": "a", "content": "", "mode": 1}]}, "files[0].mode"),
    ({"source": "s", "files": ["a.yaml"]}, "files[0]"),
    ({"source": "s", "files": [], "extra": 1}, "extra"),
])
def test_bad_sync_requests_are_422_naming_the_field(api: httpx.Client, body: dict[str, Any], field: str) -> None:
    answer = api.post("/api/v2/dags:sync", json=body, headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field


def test_sync_needs_an_admin_token_and_an_empty_set_prunes_the_source(
        api: httpx.Client, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert api.post("/api/v2/dags:sync", json={"source": "s", "files": []}, headers=READ).status_code == 403
    repo = write(tmp_path / "repo", {"a.yaml": dag("a")})
    assert cli(capsys, "dags", "sync", str(repo), "--source", "s")[0] == 0
    (repo / "a.yaml").unlink()
    code, out, err = cli(capsys, "dags", "sync", str(repo), "--source", "s", "--prune")
    assert code == 0 and out[0].split() == ["deleted", "a"] and "every DAG of the source is deleted" in err[0]
    code, _, err = cli(capsys, "dags", "sync", str(tmp_path / "nope"), "--source", "s", "--prune")
    assert code == 1 and err == [f"leoflow: error: {tmp_path / 'nope'}: no such directory"]
    code, _, err = cli(capsys, "dags", "sync", str(repo), "--source=-bad")
    assert code == 2 and "--source: must be 1-63 characters" in err[0]
    assert cli(capsys, "dags", "sync", str(repo), "--prune-unlabeled")[0] == 2


def test_apply_reads_stdin_and_delete_removes_dags(
        api: httpx.Client, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{dag('one')}\n---\n{dag('two')}\n"))
    code, out, _ = cli(capsys, "dags", "apply", "-")
    assert (code, out) == (0, ["one: applied (version 1)", "two: applied (version 1)"])
    monkeypatch.setattr("sys.stdin", io.StringIO("dag_id: one\ntasks:\n  - id: [t\n"))
    code, _, err = cli(capsys, "dags", "apply", "-")
    assert code == 1 and err[0].startswith("leoflow: error: <stdin>:4:1: invalid YAML: ")
    assert cli(capsys, "dags", "apply", "-", "-")[0] == 2

    code, out, _ = cli(capsys, "dags", "delete", "one", "two")
    assert (code, out) == (0, ["one: deleted", "two: deleted"])
    assert live_dags(api) == {}
    code, _, err = cli(capsys, "dags", "delete", "one")
    assert code == 1 and err == ["leoflow: error: one: DAG 'one' not found"]
