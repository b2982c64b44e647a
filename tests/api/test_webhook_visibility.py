"""A webhook URL is often its own credential (a Slack incoming webhook's path), and what a
receiver answered may be an internal service's page: read tokens see neither (issue 44,
items 1 and 16). Admins see the URL a DAG names; nobody sees a receiver's answer, not even in
a row an older release stored."""

from __future__ import annotations

import httpx
import psycopg

from tests.api.conftest import ADMIN, READ, spec

SLACK_PATH = "/services/T000/B000/XXXXsecretXXXX"
URL = "https://hooks.slack.example" + SLACK_PATH
INTERNAL_ANSWER = "pg_hba.conf rejects connection for host 10.0.0.7"


def _notified_dag() -> dict[str, object]:
    return spec("notified", notify=[{"on": ["failure"], "webhook": {"url": URL}},
                                    {"on": ["success"], "webhook": {"url": "http://[fd00::1]:8443/x?token=t0p"}}])


def test_read_tokens_see_webhook_urls_masked_in_dags_and_versions(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=_notified_dag(), headers=ADMIN).status_code == 201
    admin = api_client.get("/api/v2/dags/notified", headers=ADMIN).json()
    assert admin["spec"]["notify"][0]["webhook"]["url"] == URL
    for path in ("/api/v2/dags/notified", "/api/v2/dags/notified/versions/1"):
        read = api_client.get(path, headers=READ)
        assert read.status_code == 200
        assert SLACK_PATH not in read.text and "t0p" not in read.text
        hooks = [rule["webhook"]["url"] for rule in read.json()["spec"]["notify"]]
        assert hooks == ["https://hooks.slack.example/<hidden>", "http://[fd00::1]:8443/<hidden>"]
        assert read.json()["spec"]["notify"][0]["on"] == ["failure"]  # the rest of the rule stays
    assert SLACK_PATH not in api_client.get("/api/v2/dags/notified/versions", headers=READ).text


def test_the_notifications_api_masks_urls_for_read_and_never_shows_an_answer(api_client: httpx.Client,
                                                                             database_url: str) -> None:
    assert api_client.post("/api/v2/dags", json=_notified_dag(), headers=ADMIN).status_code == 201
    run_id = api_client.post("/api/v2/dags/notified/runs", json={}, headers=ADMIN).json()["run_id"]
    with psycopg.connect(database_url, autocommit=True) as conn:
        run_pk = conn.execute("SELECT id FROM dag_runs WHERE run_id = %s", (run_id,)).fetchone()[0]  # type: ignore[index]
        for error in (f"HTTP 500: {INTERNAL_ANSWER}", "no answer: ReadError"):  # as an older release stored them
            conn.execute("INSERT INTO notifications (run_pk, dag_id, run_id, event, target, webhook, payload, "
                         "give_up_at, state, attempts, last_status, last_error) VALUES (%s, 'notified', %s, "
                         "'failure', 'dag', %s, '{}', now() + interval '1 day', 'pending', 1, 500, %s)",
                         (run_pk, run_id, psycopg.types.json.Jsonb({"url": URL}), error))
    admin = api_client.get("/api/v2/notifications", headers=ADMIN)
    read = api_client.get("/api/v2/notifications", headers=READ)
    for answer in (admin, read):
        assert answer.status_code == 200
        assert INTERNAL_ANSWER not in answer.text and "ReadError" not in answer.text
        assert sorted(n["last_error"] for n in answer.json()["items"]) == ["HTTP 500", "could not connect"]
    assert {n["url"] for n in admin.json()["items"]} == {URL}
    assert {n["url"] for n in read.json()["items"]} == {"https://hooks.slack.example/<hidden>"}
    assert SLACK_PATH not in read.text
    retried = api_client.post(f"/api/v2/notifications/{admin.json()['items'][0]['id']}/retry",
                              headers=ADMIN)
    assert retried.status_code == 200 and INTERNAL_ANSWER not in retried.text
