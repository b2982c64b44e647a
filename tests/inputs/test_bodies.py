"""Request bodies through a real server: bounded YAML and JSON, positions in errors, and a large
body decoded without stalling the event loop for other clients."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN, ADMIN_TOKEN, api_settings
from tests.api.live import client_for, serve
from tests.inputs.corpus import ALIAS_BOMB, large_yaml

YAML = {**ADMIN, "Content-Type": "application/yaml"}


@pytest.fixture
def client(database_url: str) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url))) as api:
        yield api


def test_alias_bomb_is_413_naming_line_and_column(client: httpx.Client) -> None:
    started = time.monotonic()
    answer = client.post("/api/v2/dags", content=ALIAS_BOMB.encode(), headers=YAML)
    assert answer.status_code == 413, answer.text
    details = answer.json()["error"]["details"]
    assert details["field"] == "body" and details["line"] >= 8 and details["column"] >= 1
    assert "LEOFLOW_MAX_BODY_BYTES" in answer.json()["error"]["message"]
    assert time.monotonic() - started < 30  # refused at the budget, not after expanding 58 MB


@pytest.mark.parametrize(("body", "ctype", "line", "column", "words"), [
    (b"dag_id: x\ntasks:\n  - id: a\n   image: b\n", "application/yaml", 4, 4, "not valid YAML"),
    (b"dag_id: x\ndag_id: y\n", "application/yaml", 2, 1, "duplicate key"),
    (b"dag_id: x\nstart_date: 2026-02-30\n", "application/yaml", 2, 13, "day is out of range"),
    (b'{"dag_id": "x",\n "tasks": [}', "application/json", 2, 12, "not valid JSON"),
], ids=["yaml-indent", "yaml-duplicate", "yaml-bad-date", "json-syntax"])
def test_syntax_errors_are_400_with_line_and_column(client: httpx.Client, body: bytes, ctype: str, line: int,
                                                    column: int, words: str) -> None:
    answer = client.post("/api/v2/dags", content=body, headers={**ADMIN, "Content-Type": ctype})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["details"] == {"field": "body", "line": line, "column": column}
    assert words in error["message"]


@pytest.mark.parametrize("ctype", ["application/json", "application/yaml"])
def test_deep_documents_are_400_not_500(client: httpx.Client, ctype: str) -> None:
    for depth in (65, 5_000, 200_000):
        body = ("[" * depth + "]" * depth).encode()
        answer = client.post("/api/v2/dags", content=body, headers={**ADMIN, "Content-Type": ctype})
        assert answer.status_code == 400, (depth, answer.text[:300])
        assert "nested more than 64 levels deep" in answer.json()["error"]["message"]
    ok = client.post("/api/v2/dags", content=("[" * 64 + "]" * 64).encode(),
                     headers={**ADMIN, "Content-Type": ctype})
    assert ok.status_code == 422  # parsed; then not a DAG spec


def test_cli_apply_names_file_line_and_column(database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(ALIAS_BOMB)
    duplicate = tmp_path / "dup.yaml"
    duplicate.write_text("dag_id: a\ntasks: []\ndag_id: b\n")
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        code = main(["dags", "apply", str(bomb), str(duplicate)])
    err = capsys.readouterr().err
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "Traceback" not in err
    assert lines[0].startswith(f"leoflow: error: {bomb}:") and "aliases count as what they expand to" in lines[0]
    assert lines[1] == f"leoflow: error: {duplicate}:3:1: invalid YAML: duplicate key 'dag_id'"


def test_a_1_mib_yaml_body_does_not_stall_healthz(database_url: str) -> None:
    body = large_yaml(1_000_000)
    assert 1_000_000 <= len(body) <= 1024 * 1024
    with client_for(create_app(api_settings(database_url))) as api:
        assert api.get("/healthz").status_code == 200
        done = threading.Event()
        outcome: dict[str, float] = {}

        def post() -> None:
            started = time.monotonic()
            answer = api.post("/api/v2/dags", content=body, headers=YAML)
            outcome["status"] = answer.status_code
            outcome["seconds"] = time.monotonic() - started
            done.set()

        poster = threading.Thread(target=post, name="big-post")
        latencies: list[float] = []
        with httpx.Client(base_url=str(api.base_url), timeout=60) as prober:
            poster.start()
            while not done.is_set():  # every probe sent while the POST is in flight counts
                sent = time.monotonic()
                assert prober.get("/healthz").status_code == 200
                latencies.append(time.monotonic() - sent)
        poster.join()
    assert outcome["status"] == 422  # decoded, then refused as a spec (unknown field)
    latencies.sort()
    measured = {"body_bytes": len(body), "post_seconds": round(outcome["seconds"], 3),
                "healthz_during_post": len(latencies),  # probes sent while the POST was in flight
                "healthz_p50_ms": round(latencies[len(latencies) // 2] * 1000, 1) if latencies else None,
                "healthz_max_ms": round(latencies[-1] * 1000, 1) if latencies else None}
    print(json.dumps(measured))
    # Decoding on the event loop would hold every /healthz for the whole decode: one answer at
    # most while the body is decoded, and that one as slow as the POST. Relative bounds only.
    assert len(latencies) >= 5, measured
    assert latencies[-1] < outcome["seconds"] / 2, measured
