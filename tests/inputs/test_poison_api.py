"""The poison corpus through a real server: each poison gets its 4xx naming the field, each
value exactly at a limit is accepted, and nothing answers 5xx."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for
from tests.harness.postgres import PostgresServer
from tests.inputs.corpus import HEALTHY, HEALTHY_RUN, Poison, corpus, pattern_dag, spec, task

POISONS = corpus()


@pytest.fixture(scope="module")
def client(pg_server: PostgresServer) -> Iterator[httpx.Client]:
    url = pg_server.create_database()
    try:
        with client_for(create_app(api_settings(url))) as api:
            created = api.post("/api/v2/dags", json=spec(HEALTHY, tasks=[task("a"), task("b", depends_on=["a"])]),
                               headers=ADMIN)
            assert created.status_code == 201, created.text
            assert api.post("/api/v2/dags", json=pattern_dag(), headers=ADMIN).status_code == 201
            run = api.post(f"/api/v2/dags/{HEALTHY}/runs", json={"run_id": HEALTHY_RUN}, headers=ADMIN)
            assert run.status_code == 201, run.text
            yield api
    finally:
        pg_server.drop_database(url)


@pytest.mark.parametrize("poison", POISONS, ids=[p.name for p in POISONS])
def test_poison_gets_its_answer(client: httpx.Client, poison: Poison) -> None:
    answer = client.request(poison.method, poison.path, headers={**ADMIN, "Content-Type": poison.content_type},
                            content=poison.content() if poison.body is not None else None)
    assert answer.status_code == poison.status, answer.text[:500]
    if poison.status >= 400:
        error = answer.json()["error"]
        if poison.field is not None:
            assert error["details"]["field"] == poison.field, error
        assert len(error["message"]) < 2_000  # messages quote user values, cut to a readable length


def test_corpus_names_are_unique_and_cover_every_kind_of_answer() -> None:
    assert len({p.name for p in POISONS}) == len(POISONS)
    assert {p.status for p in POISONS} >= {201, 400, 413, 422}


@pytest.mark.parametrize("route", ["", "/logs"])
def test_a_bad_map_index_is_a_400_before_any_lookup(client: httpx.Client, route: str) -> None:
    """As ``?try=0`` on a run that does not exist: the query is judged before the database is asked."""
    answer = client.get(f"/api/v2/dags/{HEALTHY}/runs/no-such-run/tasks/a{route}?map_index=-1", headers=ADMIN)
    assert answer.status_code == 400 and answer.json()["error"]["details"]["field"] == "map_index", answer.text
