"""Run parameters: a DAG's JSON Schema checks a trigger's conf (422 naming the path), fills defaults."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from sqlalchemy import text

from leoflow.db.connection.engine import make_async_engine
from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.params import MAX_PARAMS_BYTES, default_conf, parse_params, validate_conf
from leoflow.settings import Settings
from tests.api.conftest import ADMIN
from tests.scheduler.harness import rows

PARAMS = {
    "type": "object",
    "required": ["day"],
    "properties": {
        "day": {"type": "string", "format": "date", "description": "Which day to load"},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
        "mode": {"type": "string", "enum": ["full", "delta"], "default": "delta"},
        "target": {"type": "object", "default": {}, "properties": {
            "schema": {"type": "string", "default": "public"}, "table": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}},
    },
    "additionalProperties": False,
}


def _dag(**extra: Any) -> dict[str, Any]:
    return {"dag_id": "etl", "params": PARAMS, "tasks": [{"id": "t", "image": "busybox", "command": ["true"]}],
            **extra}


def _trigger(client: httpx.Client, conf: Any) -> httpx.Response:
    return client.post("/api/v2/dags/etl/runs", json={"conf": conf}, headers=ADMIN)


def test_conf_is_validated_with_the_path_and_completed_with_defaults(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=_dag(), headers=ADMIN).status_code == 201
    day = "2026-11-01"  # a real date: a day that is not one is refused too (test_params_formats.py)
    for conf, field in [({}, "conf.day"), ({"day": 5}, "conf.day"), ({"day": day, "limit": 0}, "conf.limit"),
                        ({"day": day, "mode": "all"}, "conf.mode"), ({"day": day, "extra": 1}, "conf"),
                        ({"day": day, "tags": ["ok", "toolong"]}, "conf.tags[1]"),
                        ({"day": day, "target": {"table": 3}}, "conf.target.table")]:
        answer = _trigger(api_client, conf)
        assert answer.status_code == 422, (conf, answer.text)
        assert answer.json()["error"]["details"]["field"] == field, (conf, answer.json())
    assert "is required" in _trigger(api_client, {}).json()["error"]["message"]
    run = _trigger(api_client, {"day": "2026-11-01", "target": {"table": "t"}})
    assert run.status_code == 201, run.text
    assert run.json()["conf"] == {"day": "2026-11-01", "limit": 100, "mode": "delta",
                                  "target": {"schema": "public", "table": "t"}}


@pytest.mark.parametrize(("params", "field"), [
    ([], "params"),
    ({"type": "array"}, "params.type"),
    ({"properties": {}}, "params.type"),
    ({"type": "object", "properties": {"a": {"type": "nonsense"}}}, "params.properties.a.type"),
    ({"type": "object", "properties": {"a": {"$ref": "https://example.com/schema.json"}}}, "params.properties.a.$ref"),
    ({"type": "object", "properties": {"a": {"pattern": "("}}}, "params.properties.a.pattern"),
    ({"type": "object", "description": "x" * MAX_PARAMS_BYTES}, "params"),
])
def test_bad_schemas_are_refused_when_applied(params: Any, field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(_dag(params=params))
    assert info.value.path == field, info.value


def test_a_deeply_nested_schema_is_refused() -> None:
    deep: dict[str, Any] = {"type": "object"}
    for _ in range(20):
        deep = {"type": "object", "properties": {"x": deep}}
    with pytest.raises(ValidationFailed, match="nests deeper"):
        parse_params(deep)


def test_scheduled_dags_need_defaults_that_validate_and_their_runs_get_them(settings: Settings) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(_dag(schedule="@daily"))
    assert info.value.path == "params" and "conf.day" in info.value.problem
    spec = parse_dag_spec(_dag(schedule="@daily", params={**PARAMS, "required": []}))
    assert default_conf(spec.params) == {"limit": 100, "mode": "delta", "target": {"schema": "public"}}
    assert "params" in spec.to_canonical() and spec.spec_hash() != parse_dag_spec(_dag()).spec_hash()

    async def main() -> None:
        from leoflow.clock import SystemClock
        from leoflow.db.stores import dags as dag_store
        from leoflow.db.stores.runs import lifecycle as run_store
        from leoflow.db.stores.runs.lifecycle import PlannedRuns

        engine = make_async_engine(settings.database, pool_size=2)
        try:
            async with engine.begin() as conn:
                await dag_store.apply_dag(conn, spec, clock=SystemClock())
            vid = (await rows(engine, "SELECT current_version_id FROM dags"))[0][0]
            async with engine.begin() as conn:
                now = SystemClock().now()
                await conn.execute(text("UPDATE dags SET next_run_at = :now"), {"now": now})
                planned = PlannedRuns("etl", vid, now, now + timedelta(days=1), ["scheduled__x"], [now])
                assert await run_store.create_due_runs(conn, [planned], now, 1) == {"etl": 1}
            assert (await rows(engine, "SELECT conf FROM dag_runs"))[0][0] == default_conf(spec.params)
        finally:
            await engine.dispose()

    asyncio.run(main())


json_values = st.recursive(st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                        max_size=3), max_leaves=10)


@given(conf=st.dictionaries(st.sampled_from(["day", "limit", "mode", "target", "tags", "other"]), json_values,
                            max_size=5))
@hsettings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_any_conf_is_either_valid_and_completed_or_a_validation_failure(conf: dict[str, Any]) -> None:
    try:
        completed = validate_conf(PARAMS, conf)
    except ValidationFailed as exc:
        assert exc.path.startswith("conf")
        return
    assert completed["limit"] == conf.get("limit", 100) and "day" in completed
