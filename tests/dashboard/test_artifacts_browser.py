"""The try's page lists its output artifacts with a download (Chromium), end to end on standalone:
a task writes a directory, the local executor stores it, the page shows what is stored (and why an
optional one is not) and the download is the .tar.gz holding the task's file."""

from __future__ import annotations

import tarfile
import time
from collections.abc import Callable

import pytest

from tests.dashboard.conftest import DESKTOP, READ_TOKEN, Browse, LiveServer, require_runs_execute, sign_in

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect

DAG = {"dag_id": "dash-artifacts", "schedule": None, "tasks": [{
    "id": "make", "image": "busybox:1.36",
    "command": ["sh", "-c", 'mkdir -p "$LEOFLOW_ARTIFACTS/out" && '
                'echo hello-artifact > "$LEOFLOW_ARTIFACTS/out/a.txt"'],
    "artifacts": {"outputs": [{"name": "data", "path": "out"},
                              {"name": "extra", "path": "none", "optional": True}]}}]}


def test_the_try_page_lists_artifacts_and_downloads_one(live_server: LiveServer,
                                                        open_page: Callable[..., Browse]) -> None:
    require_runs_execute(live_server)
    with live_server.client() as client:
        assert client.post("/api/v2/dags", json=DAG).status_code in (200, 201)
        response = client.post("/api/v2/dags/dash-artifacts/runs", json={"run_id": "art-1"})
        assert response.status_code == 201, response.text
        deadline = time.monotonic() + 120  # a loaded 2-core host: generous; not a measurement
        while client.get("/api/v2/dags/dash-artifacts/runs/art-1").json()["state"] != "success":
            assert time.monotonic() < deadline, "the run did not succeed"
            time.sleep(0.5)
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, live_server, token=READ_TOKEN, fragment="#/dags/dash-artifacts/runs/art-1/tasks/make?try=1")
    panel = page.get_by_test_id("artifacts")
    expect(panel).to_be_visible()
    expect(panel.locator('tr[data-artifact="data"]')).to_contain_text("directory")
    expect(panel.locator('tr[data-artifact="extra"]')).to_contain_text("nothing at its path")
    expect(page.get_by_test_id("artifact-download-extra")).to_have_count(0)  # nothing stored: no download
    browse.screenshot("artifacts")
    with page.expect_download() as download:
        page.get_by_test_id("artifact-download-data").click()
    assert download.value.suggested_filename == "make-data-try1.tar.gz"
    with tarfile.open(download.value.path(), "r:gz") as archive:
        member = archive.extractfile("./a.txt")
        assert member is not None and member.read() == b"hello-artifact\n"
