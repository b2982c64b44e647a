"""Bad input never yields a 500: 400/404/405/413/415/422 in the error envelope; a database outage
yields 503 + Retry-After (while /healthz stays 200) and the API recovers when it comes back."""

from __future__ import annotations

import time

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.db import migrations
from tests.api.conftest import ADMIN, READ, api_settings, spec
from tests.api.live import client_for
from tests.harness.postgres import private_server


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": "0"}, "limit"), ({"limit": "501"}, "limit"), ({"limit": "ten"}, "limit"),
    ({"state": "bogus"}, "state"), ({"cursor": "not-a-cursor"}, "cursor"),
    ({"cursor": "WyJydW5zIiwxXQ"}, "cursor"),  # a runs cursor replayed on the DAG list
])
def test_bad_query_parameters_are_400_naming_the_field(api_client: httpx.Client, params: dict[str, str],
                                                       field: str) -> None:
    answer = api_client.get("/api/v2/dags", params=params, headers=READ)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["details"]["field"] == field


def test_malformed_bodies(api_client: httpx.Client) -> None:
    cases = [
        (b"{not json", "application/json", 400),
        (b"a: [unclosed", "application/yaml", 400),
        (b"[1, 2]", "application/json", 422),
        (b"\xff\xfe", "application/json", 400),
        (b"<dag/>", "application/xml", 415),
        (b"", "application/json", 422),
    ]
    for body, ctype, status in cases:
        answer = api_client.post("/api/v2/dags", content=body, headers={**ADMIN, "Content-Type": ctype})
        assert answer.status_code == status, (body, answer.text)
        assert set(answer.json()["error"]) == {"code", "message", "details"}


def test_oversized_body_is_413(database_url: str) -> None:
    app = create_app(api_settings(database_url, LEOFLOW_MAX_BODY_BYTES="2048"))
    with client_for(app) as client:
        big = spec(description_padding=None)
        big["tasks"][0]["env"] = {"PAD": "x" * 4096}
        answer = client.post("/api/v2/dags", json=big, headers=ADMIN)
        assert answer.status_code == 413
        assert "LEOFLOW_MAX_BODY_BYTES" in answer.json()["error"]["message"]

        def chunks():  # no Content-Length: the limit is enforced while streaming
            for _ in range(8):
                yield b" " * 1024

        streamed = client.post("/api/v2/dags", content=chunks(),
                               headers={**ADMIN, "Content-Type": "application/json"})
        assert streamed.status_code == 413
        small = client.post("/api/v2/dags", json=spec(), headers=ADMIN)
        assert small.status_code == 201


def test_unmigrated_database_is_503_not_500(empty_database_url: str) -> None:
    with client_for(create_app(api_settings(empty_database_url))) as client:
        answer = client.get("/api/v2/dags", headers=READ)
        assert answer.status_code == 503
        assert "leoflow db upgrade" in answer.json()["error"]["message"]


def test_unknown_route_and_wrong_method_use_the_envelope(api_client: httpx.Client) -> None:
    missing = api_client.get("/api/v2/nothing", headers=READ)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    wrong = api_client.delete("/api/v2/dags", headers=ADMIN)
    assert wrong.status_code == 405 and wrong.json()["error"]["code"] == "method_not_allowed"
    assert "GET" in wrong.headers["allow"]
    weird = api_client.get("/api/v2/dags/" + "X" * 300, headers=READ)
    assert weird.status_code == 404


def test_database_outage_is_503_with_retry_after_and_recovers() -> None:
    # Durable commits: the outage is an immediate stop, which would lose unflushed async commits.
    with private_server(fast_unsafe=False) as pg:
        url = pg.create_database("leoflow")
        migrations.upgrade(url)
        app = create_app(api_settings(url, LEOFLOW_DB_STATEMENT_TIMEOUT="5"))
        with client_for(app) as client:
            assert client.get("/api/v2/dags", headers=READ).status_code == 200
            pg.stop("immediate")

            down = client.get("/api/v2/dags", headers=READ)
            assert down.status_code == 503, down.text
            assert down.json()["error"]["code"] == "database_unavailable"
            assert int(down.headers["Retry-After"]) > 0
            write = client.post("/api/v2/dags", json=spec(), headers=ADMIN)
            assert write.status_code == 503 and "Retry-After" in write.headers
            assert client.get("/healthz").status_code == 200
            not_ready = client.get("/readyz")
            assert not_ready.status_code == 503 and "Retry-After" in not_ready.headers
            assert client.get("/metrics").status_code == 200

            pg.start()
            pg.wait_ready()
            deadline = time.monotonic() + 60
            while True:
                answer = client.get("/api/v2/dags", headers=READ)
                if answer.status_code == 200 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert answer.status_code == 200
            assert client.get("/readyz").status_code == 200
