"""``leoflow dags sync`` waits for the server's answer as long as the server may work on it.

A 10,000-file sync was abandoned by the CLI after the client's usual 30 s of silence, while the
server still worked on it (within its own request deadline, which rolls the whole sync back when
it passes). The sync's request now waits longer than that server deadline.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from leoflow.api.app import REQUEST_TIMEOUT_SLACK, create_app
from leoflow.cli.main import main
from leoflow.client.http import HttpClient
from leoflow.settings.declared import DB_STATEMENT_TIMEOUT
from tests.api.conftest import ADMIN_TOKEN, api_settings
from tests.api.live import serve


def test_the_sync_request_outwaits_the_servers_own_deadline(database_url: str, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, float | None]] = []
    real = HttpClient.request

    def recording(self: HttpClient, method: str, path: str, **kwargs: Any) -> Any:
        sent.append((path, kwargs.get("timeout")))
        return real(self, method, path, **kwargs)

    monkeypatch.setattr(HttpClient, "request", recording)
    (tmp_path / "etl.yaml").write_text("dag_id: etl\ntasks: [{id: a, kind: empty}]\n")
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        assert main(["dags", "sync", str(tmp_path), "--source", "s"]) == 0
    timeouts = [timeout for path, timeout in sent if path == "/api/v2/dags:sync"]
    server_deadline = DB_STATEMENT_TIMEOUT.default + REQUEST_TIMEOUT_SLACK
    assert len(timeouts) == 1 and timeouts[0] is not None and timeouts[0] > server_deadline, timeouts
