"""``leoflow runs trigger --logical-date``: the run is for that moment; a bad one is the API's 422, named."""

from __future__ import annotations

import json

import pytest

from tests.cli.test_front_door import api_url, cli

__all__ = ["api_url"]  # the fixture, used by name


@pytest.mark.usefixtures("api_url")
def test_trigger_with_a_logical_date(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = cli(capsys, "runs", "trigger", "etl", "--logical-date", "2026-03-01T00:00:00Z", "-o", "json")
    assert code == 0
    run = json.loads(out)
    assert run["run_id"] == "manual__2026-03-01T00:00:00+00:00"
    assert run["data_interval_start"] == run["data_interval_end"] == run["logical_date"]
    code, _, err = cli(capsys, "runs", "trigger", "etl", "--logical-date", "2026-03-01")
    assert code != 0 and "logical_date" in err and "offset" in err
