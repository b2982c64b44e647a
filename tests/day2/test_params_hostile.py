"""Issue 44 items 3 and 13: ``params`` that cannot freeze a replica or the leader.

A backtracking ``pattern`` is matched by RE2 (linear), a pattern RE2 cannot run is refused at
apply, ``$ref`` is refused (and a version an older release stored with one fails its trigger
and its runs with the reason), and every validation has a budget of steps.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from leoflow.errors import Conflict, ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.params import parse_params, validate_conf
from leoflow.model.spec.params_validator import MAX_STEPS
from leoflow.settings import Settings
from tests.api.conftest import ADMIN
from tests.scheduler.harness import trigger
from tests.scheduler.stepper import container, insert_version, stepper

#: The issue's pattern and input: 6.5 s in Python's re (doubling per extra ``a``), microseconds in RE2.
EVIL = "^(a+)+$"
EVIL_INPUT = "a" * 28 + "!"


def _dag(params: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"dag_id": "hostile", "params": params, "tasks": [container("t")], **extra}


def _with_pattern(pattern: str, **name: Any) -> dict[str, Any]:
    return {"type": "object", "properties": {"name": {"type": "string", "pattern": pattern, **name}}}


def test_a_backtracking_pattern_answers_the_trigger_at_once_and_healthz_stays_up(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=_dag(_with_pattern(EVIL)), headers=ADMIN).status_code == 201
    slowest = [0.0]
    stop = threading.Event()

    def probe() -> None:
        with httpx.Client(base_url=api_client.base_url, timeout=30) as client:
            while not stop.is_set():
                started = time.monotonic()
                assert client.get("/healthz").status_code == 200
                slowest[0] = max(slowest[0], time.monotonic() - started)
                time.sleep(0.01)

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    cpu, wall = time.process_time(), time.monotonic()  # the server runs in this process
    answer = api_client.post("/api/v2/dags/hostile/runs", json={"conf": {"name": EVIL_INPUT}}, headers=ADMIN)
    cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    stop.set()
    prober.join(timeout=30)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == "conf.name"
    assert "does not match" in answer.json()["error"]["message"]  # judged, not timed out (the old 2 s guard)
    # Python's re spent 6.5 s of CPU here (and the 2 s guard answered after 2 s); RE2 microseconds.
    assert cpu < 1.0 and wall < 1.0, (cpu, wall)
    assert slowest[0] < 1.0, slowest
    ok = api_client.post("/api/v2/dags/hostile/runs", json={"conf": {"name": "a" * 28}}, headers=ADMIN)
    assert ok.status_code == 201, ok.text


def test_applying_a_scheduled_dag_whose_default_backtracks_is_quick() -> None:
    """The leader compiles every stored spec with this same check: 3.3 s at 27 characters before."""
    started = time.process_time()
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(_dag(_with_pattern(EVIL, default=EVIL_INPUT), schedule="@daily"))
    # refused as a default that fails its own property (every DAG's defaults are checked at apply)
    assert info.value.path == "params.properties.name.default" and "does not match" in info.value.problem
    parse_dag_spec(_dag(_with_pattern(EVIL, default="a" * 5_000), schedule="@daily"))
    assert time.process_time() - started < 1.0


@pytest.mark.parametrize(("params", "field"), [
    (_with_pattern(r"^(a)\1$"), "params.properties.name.pattern"),
    (_with_pattern(r"^(?=a)a$"), "params.properties.name.pattern"),
    ({"type": "object", "patternProperties": {r"^(?<!x)y$": {}}}, r"params.patternProperties.^(?<!x)y$"),
    ({"type": "object", "properties": {"tags": {"type": "array", "items": {"pattern": r"(\w)\1"}}}},
     "params.properties.tags.items.pattern"),
])
def test_a_pattern_re2_cannot_run_is_refused_at_apply_naming_it(api_client: httpx.Client, params: dict[str, Any],
                                                               field: str) -> None:
    answer = api_client.post("/api/v2/dags", json=_dag(params), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["details"]["field"] == field, error
    assert "RE2" in error["message"], error


@pytest.mark.parametrize(("params", "field"), [
    ({"type": "object", "$ref": "#"}, "params.$ref"),
    ({"$ref": "#"}, "params.$ref"),
    ({"type": "object", "$defs": {"d": {"type": "string"}}, "properties": {"a": {"$ref": "#/$defs/d"}}},
     "params.properties.a.$ref"),
    ({"type": "object", "properties": {"a": {"anyOf": [{"$dynamicRef": "#x"}]}}},
     "params.properties.a.anyOf[0].$dynamicRef"),
    ({"type": "object", "patternProperties": {"^a": {}}, "unevaluatedProperties": False},
     "params.unevaluatedProperties"),
])
def test_references_are_refused_at_apply(api_client: httpx.Client, params: dict[str, Any], field: str) -> None:
    answer = api_client.post("/api/v2/dags", json=_dag(params), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["details"]["field"] == field, answer.json()


def test_data_that_looks_like_a_reference_is_data() -> None:
    """Only schema positions are searched: a default or an enum value may hold a ``$ref`` key."""
    parse_params({"type": "object", "properties": {"a": {"default": {"$ref": "#"}, "enum": [{"$ref": "#"}]}}})


def test_a_stored_version_with_a_ref_fails_its_trigger_with_a_409_not_a_500(api_client: httpx.Client,
                                                                           database_url: str) -> None:
    import psycopg

    spec = {"dag_id": "old-ref", "params": {"type": "object", "$ref": "#"}, "tasks": [container("t")]}
    with psycopg.connect(database_url, autocommit=True) as conn:  # as an older release stored it
        conn.execute("INSERT INTO dags (dag_id) VALUES ('old-ref')")
        conn.execute("INSERT INTO dag_versions (dag_id, version, spec, spec_hash) VALUES ('old-ref', 1, %s, 'old')",
                     (psycopg.types.json.Jsonb(spec),))
        conn.execute("UPDATE dags SET current_version_id = (SELECT id FROM dag_versions WHERE dag_id = 'old-ref')")
    answer = api_client.post("/api/v2/dags/old-ref/runs", json={"conf": {}}, headers=ADMIN)
    assert answer.status_code == 409, answer.text  # RecursionError, a 500, before
    assert "params.$ref" in answer.json()["error"]["message"] and "apply the DAG again" in answer.text
    assert api_client.get("/healthz").status_code == 200


def test_a_stored_version_with_a_ref_fails_its_run_with_the_reason_and_the_scheduler_goes_on(
        settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await insert_version(st.engine, "old-ref", {"dag_id": "old-ref", "schedule": "@daily",
                                                        "params": {"type": "object", "$ref": "#"},
                                                        "tasks": [container("t")]})
            bad = await trigger(st.engine, "old-ref")
            await insert_version(st.engine, "fine", {"dag_id": "fine", "tasks": [container("t")]})
            good = await trigger(st.engine, "fine")
            await st.tick(periodic=True)
            state, reason = await st.run(bad)
            assert state == "failed", reason
            assert "params.$ref: references are not supported" in (reason or ""), reason
            st.finish("fine", good, "t")
            await st.tick()
            assert await st.run(good) == ("success", None)

    asyncio.run(main())


# --------------------------------------------------------------------------- the validator itself

@pytest.mark.parametrize("items", [[1, 1.0], [[1], [1.0]], [{"a": [1, {"b": 2}]}, {"b": 0, "a": [1, {"b": 2.0}]}],
                                   [0, False], [None, 0], ["1", 1], [{"a": 1}, {"a": True}], [1.5, 1.5]])
def test_uniqueness_and_enum_mean_what_json_schema_says(items: list[Any]) -> None:
    """They hash a canonical form (the stock ones compare pairs); the verdicts are the stock ones."""
    for schema in ({"uniqueItems": True}, {"items": {"enum": items[:1]}}):
        stock = Draft202012Validator(schema).is_valid(items)
        try:
            validate_conf({"type": "object", "properties": {"x": schema}}, {"x": items})
            ours = True
        except ValidationFailed:
            ours = False
        assert ours == stock, (schema, items)


def test_uniqueness_of_many_objects_is_linear() -> None:
    """3,000 distinct objects took the stock ``uniqueItems`` 13 s (pair by pair); 10,000 now: milliseconds."""
    started = time.process_time()
    validate_conf({"type": "object", "properties": {"x": {"uniqueItems": True}}},
                  {"x": [{"a": i} for i in range(10_000)]})
    assert time.process_time() - started < 1.0


def test_a_validation_beyond_its_budget_is_a_422_not_a_stall() -> None:
    """500 branches per item of a 10,000-item conf: 10^7 keyword evaluations (about 20 s of the stock
    validator's CPU, on the leader for a scheduled DAG's defaults); the budget stops it in well under 1 s."""
    items = {"anyOf": [{"type": "string", "minLength": n} for n in range(500)]}
    params = parse_params({"type": "object", "properties": {"x": {"type": "array", "items": items}}})
    assert params is not None
    started = time.process_time()
    with pytest.raises(ValidationFailed) as info:
        validate_conf(params, {"x": list(range(10_000))})
    assert info.value.path == "conf" and f"{MAX_STEPS:,} steps" in info.value.problem
    assert time.process_time() - started < 5.0
    assert validate_conf(params, {"x": ["a" * 500] * 50})  # a small conf is judged as ever


def test_a_stored_schema_this_release_refuses_is_a_conflict_when_validating() -> None:
    with pytest.raises(Conflict, match=r"params\.properties\.a\.pattern: .*RE2"):
        validate_conf({"type": "object", "properties": {"a": {"pattern": r"(a)\1"}}}, {"a": "x"})
