"""``leoflow datasets event|list`` against a real server: an event queued for the waiting DAG, the
list showing it, bad input one line naming the field (never a traceback)."""

from __future__ import annotations

import contextlib
import json

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN, ADMIN_TOKEN, api_settings
from tests.api.live import serve


def test_event_and_list(database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        answer = httpx.post(f"{url}/api/v2/dags", headers=ADMIN, json={
            "dag_id": "report", "schedule": {"datasets": {"any": ["s3://lake/orders"]}},
            "tasks": [{"id": "r", "image": "busybox", "command": ["true"]}]})
        assert answer.status_code == 201, answer.text
        assert main(["datasets", "event", "s3://lake/orders", "--extra", '{"rows": 1200}']) == 0
        assert "queued for 1 DAG(s)" in capsys.readouterr().out
        assert main(["datasets", "event", "s3://lake/orders"]) == 0
        capsys.readouterr()
        assert main(["datasets", "list"]) == 0
        out = capsys.readouterr().out
        assert "s3://lake/orders" in out and "no producer" in out and "report:2" in out
        assert main(["dags", "list"]) == 0  # the schedule column names the datasets, not "-"
        assert "datasets any: s3://lake/orders" in capsys.readouterr().out
        assert main(["datasets", "list", "--output", "json"]) == 0
        [listed] = json.loads(capsys.readouterr().out)
        assert listed["consumers"] == ["report"] and listed["queued"][0]["events"] == 2
        for argv, words in ((["datasets", "event", "s3://a", "--extra", "[1]"], "--extra"),
                            (["datasets", "event", "s3://a", "--extra", "{nope"], "--extra"),
                            (["datasets", "event", "s3://" + "a" * 2_000], "uri"),
                            (["datasets", "event", "s3://a\tb"], "uri")):
            with pytest.raises(SystemExit) if "--extra" in argv else contextlib.nullcontext():
                assert main(argv) != 0
            err = capsys.readouterr().err
            assert words in err and "Traceback" not in err, err

