"""The log page shows the Kubernetes events kept with a try below its log (Chromium): a warning row
for a pod that never started, as text, and nothing for a try without events."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest

from tests.dashboard.conftest import DESKTOP, READ_TOKEN, Browse, LiveServer, sign_in

pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[dev]')")
from playwright.sync_api import expect


def test_a_tries_pod_events_show_below_its_log(live_server: LiveServer, open_page: Callable[..., Browse]) -> None:
    message = 'MountVolume.SetUp failed for volume "creds" : secret "<b>db</b>" not found'
    with live_server.client() as client:
        spec = {"dag_id": "dash-events", "schedule": None,
                "tasks": [{"id": "mount", "image": "busybox:1.36", "command": ["true"]}]}
        assert client.post("/api/v2/dags", json=spec).status_code in (200, 201)
    with psycopg.connect(live_server.database_url, autocommit=True) as conn:
        run_pk = conn.execute(
            "INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at, ended_at) "
            "SELECT dag_id, 'events-1', current_version_id, 'manual', 'failed', now(), now() FROM dags "
            "WHERE dag_id = 'dash-events' RETURNING id").fetchone()[0]  # type: ignore[index]
        ti = conn.execute("INSERT INTO task_instances (run_pk, task_id, state, try_number, max_tries, started_at, "
                          "ended_at) VALUES (%s, 'mount', 'failed', 2, 2, now(), now()) RETURNING id",
                          (run_pk,)).fetchone()[0]  # type: ignore[index]
        for number in (1, 2):
            try_pk = conn.execute(
                "INSERT INTO task_tries (task_instance_id, try_number, state, term, started_at, ended_at, reason, "
                "logs_shipped_at) VALUES (%s, %s, 'failed', 1, now(), now(), %s, now()) RETURNING id",
                (ti, number, f"FailedMount: {message}")).fetchone()[0]  # type: ignore[index]
            conn.execute("INSERT INTO task_logs (task_try_id, content, truncated, size_bytes) "
                         "VALUES (%s, '', false, 0)", (try_pk,))
            if number == 1:
                conn.execute(
                    "INSERT INTO pod_events (task_try_id, uid, type, reason, message, container, count, first_seen, "
                    "last_seen) VALUES (%s, 'u1', 'Normal', 'Scheduled', 'Successfully assigned', NULL, 1, now(), "
                    "now()), (%s, 'u2', 'Warning', 'FailedMount', %s, NULL, 7, now(), now())",
                    (try_pk, try_pk, message))
    browse = open_page(DESKTOP)
    page = browse.page
    sign_in(browse, live_server, token=READ_TOKEN, fragment="#/dags/dash-events/runs/events-1/tasks/mount?try=1")
    panel = page.get_by_test_id("pod-events")
    expect(panel).to_be_visible()
    warning = panel.locator('tr[data-reason="FailedMount"]')
    expect(warning).to_contain_text(message)  # the characters, as the kubelet wrote them
    expect(warning).to_contain_text("7")
    assert panel.locator("b").count() == 0
    expect(panel.locator('tr[data-reason="Scheduled"]')).to_be_visible()
    browse.screenshot("pod-events")
    page.get_by_test_id("try-tab-2").click()  # a try without events: no panel
    expect(page.get_by_test_id("try-tab-2")).to_have_attribute("aria-selected", "true")
    expect(panel).to_be_hidden()
