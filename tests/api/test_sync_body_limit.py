"""``POST /api/v2/dags:sync`` has its own body limit, ``LEOFLOW_SYNC_MAX_BODY_BYTES``.

A sync carries a whole directory in one request (all or nothing), so 10,000 DAG files are about
10 MiB of JSON: far above the 1 MiB every other route takes (``LEOFLOW_MAX_BODY_BYTES``), which
refused such a sync with 413. The sync's own limit is bounded, named in its 413, and enforced
while streaming as every other limit is.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from leoflow.api.app import create_app
from leoflow.errors import SettingsError
from leoflow.settings import load_settings
from tests.api.conftest import ADMIN, READ, api_settings
from tests.api.live import client_for


def _files(count: int, pad: int = 0) -> list[dict[str, str]]:
    return [{"name": f"d{i:03}.yaml",
             "content": f"dag_id: sync-limit-{i:03}\ndescription: '{'x' * pad}'\ntasks: [{{id: a, kind: empty}}]\n"}
            for i in range(count)]


def test_a_sync_larger_than_the_general_limit_is_applied_within_its_own(database_url: str) -> None:
    app = create_app(api_settings(database_url, LEOFLOW_MAX_BODY_BYTES="2048",
                                  LEOFLOW_SYNC_MAX_BODY_BYTES=str(64 * 1024)))
    with client_for(app) as client:
        body = {"source": "s", "files": _files(40)}  # about 3.5 KB: over 2048, under 64 KiB
        answer = client.post("/api/v2/dags:sync", json=body, headers=ADMIN)
        assert answer.status_code == 200, answer.text[:500]
        assert answer.json()["counts"]["created"] == 40
        # Every other route keeps the general limit.
        other = client.post("/api/v2/dags", json={"dag_id": "big", "description": "x" * 4096,
                                                  "tasks": [{"id": "a", "kind": "empty"}]}, headers=ADMIN)
        assert other.status_code == 413 and "LEOFLOW_MAX_BODY_BYTES" in other.json()["error"]["message"]


def test_a_sync_over_its_limit_is_413_naming_the_setting_and_applies_nothing(database_url: str) -> None:
    app = create_app(api_settings(database_url, LEOFLOW_SYNC_MAX_BODY_BYTES="4096"))
    with client_for(app) as client:
        body = {"source": "s", "files": _files(10, pad=600)}
        answer = client.post("/api/v2/dags:sync", json=body, headers=ADMIN)
        assert answer.status_code == 413, answer.text[:300]
        assert "4096 bytes (LEOFLOW_SYNC_MAX_BODY_BYTES)" in answer.json()["error"]["message"]

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while streaming
            yield b'{"source": "s", "files": []'
            for _ in range(8):
                yield b" " * 1024
            yield b"}"

        streamed = client.post("/api/v2/dags:sync", content=chunks(),
                               headers={**ADMIN, "Content-Type": "application/json"})
        assert streamed.status_code == 413, streamed.text[:300]
        assert "LEOFLOW_SYNC_MAX_BODY_BYTES" in streamed.json()["error"]["message"]
        listed = client.get("/api/v2/dags", params={"prefix": "sync-limit-"}, headers=READ)
        assert listed.json()["items"] == []


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1023", str(1024 ** 3 + 1), "1e6", "99999999999999999999"])
def test_a_bad_sync_body_limit_names_the_variable(value: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"LEOFLOW_DATABASE_URL": "postgresql://x@localhost/x", "LEOFLOW_SYNC_MAX_BODY_BYTES": value})
    assert "LEOFLOW_SYNC_MAX_BODY_BYTES" in str(info.value)


@pytest.mark.parametrize("value", ["1024", str(1024 ** 3)])
def test_the_sync_body_limit_takes_its_bounds(value: str) -> None:
    settings = load_settings({"LEOFLOW_DATABASE_URL": "postgresql://x@localhost/x",
                              "LEOFLOW_SYNC_MAX_BODY_BYTES": value})
    assert settings.api.sync_max_body_bytes == int(value)
