"""Property tests (Hypothesis): whatever a spec or a trigger body holds, validation answers with
:class:`ValidationFailed` or a value — never another exception; valid specs round-trip through
their canonical form with the same hash; the real HTTP API never answers 5xx.

``pytest --hypothesis-profile=long tests/inputs/test_properties.py`` searches deeper.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from leoflow.api.app import create_app
from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.files.yaml_loader import YamlRejected, dump_yaml, load_yaml
from leoflow.model.run_request import parse_run_request
from leoflow.model.spec.dag import parse_dag_spec
from tests.api.conftest import ADMIN, api_settings
from tests.api.live import client_for
from tests.harness.postgres import PostgresServer
from tests.inputs.corpus import HEALTHY, spec, task
from tests.inputs.strategies import mutated_specs, odd_values, run_requests, valid_specs


def _validate(data: Any) -> None:
    try:
        parse_dag_spec(data)
    except ValidationFailed as exc:
        assert isinstance(exc.path, str) and exc.problem
        assert len(str(exc)) < 2_000, str(exc)[:300]


@given(valid_specs())
def test_valid_specs_are_accepted_and_round_trip(doc: dict[str, Any]) -> None:
    spec_ = parse_dag_spec(doc)
    canonical = spec_.to_canonical()
    # What dag_versions.spec stores and the scheduler parses again: the canonical form as JSON.
    again = parse_dag_spec(json.loads(json.dumps(canonical)))
    assert again.to_canonical() == canonical
    assert again.spec_hash() == spec_.spec_hash()
    # The canonical form sorts depends_on (the spec keeps the file's order, which error paths
    # point into): from there on, parsing is a fixed point.
    assert parse_dag_spec(json.loads(json.dumps(again.to_canonical()))) == again
    assert replace(again, tasks=()) == replace(spec_, tasks=())
    assert [replace(t, depends_on=tuple(sorted(t.depends_on))) for t in spec_.tasks] == list(again.tasks)


@given(valid_specs())
def test_valid_specs_read_back_from_yaml_alike(doc: dict[str, Any]) -> None:
    assert parse_dag_spec(load_yaml(dump_yaml(doc))).spec_hash() == parse_dag_spec(doc).spec_hash()


@given(mutated_specs())
@example({"dag_id": "a", "tasks": [{"id": "a", "kind": "empty", "timeout_seconds": 1e12}]})
@example({"dag_id": "a", "schedule": "0 0 31 2 *", "tasks": [{"id": "a", "kind": "empty"}]})
@example({"dag_id": "a", "max_active_runs": 10**5000, "tasks": [{"id": "a", "kind": "empty"}]})
@example({"dag_id": "a", "start_date": "9999-12-31T23:59:59-12:00", "tasks": [{"id": "a", "kind": "empty"}]})
@example({10**5000: 1})  # found by the long profile: str() of the key raised ValueError
@example({"dag_id": "a", "tasks": [{"id": "a", "image": "x", "command": ["t"],
                                    "resources": {"limits": {(10**5000,): 1}}}]})
@example({"dag_id": "a", "tasks": [{"id": "a", "kind": (10**5000,)}]})
def test_mutated_specs_raise_only_validation_failed(doc: Any) -> None:
    _validate(doc)


@given(odd_values())
def test_any_value_as_a_spec_raises_only_validation_failed(value: Any) -> None:
    _validate(value)


@given(run_requests())
@example({"conf": {"a": float("nan")}})
@example({"conf": {"a": {1, 2}}})
@example({"run_id": "r\n"})
@example({10**5000: 1})  # str() of the key raised ValueError
def test_run_requests_raise_only_validation_failed_and_accepted_confs_are_plain_json(body: Any) -> None:
    try:
        request = parse_run_request(body)
    except ValidationFailed as exc:
        assert exc.problem and len(str(exc)) < 2_000
        return
    text = json.dumps(request.conf, allow_nan=False, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert len(text.encode()) <= limits.CONF.max_bytes and "\\u0000" not in text
    assert request.run_id is None or limits.RUN_ID.matches(request.run_id)


@given(st.text(max_size=300) | st.sampled_from(["a: &a [*a]", "[" * 100, "a: !!binary ===", "? [a]\n: b"]))
def test_any_text_reads_as_yaml_or_yaml_rejected(text: str) -> None:
    try:
        load_yaml(text, max_bytes=10_000)
    except YamlRejected as exc:
        assert exc.problem


# --------------------------------------------------------------------------- through HTTP

@pytest.fixture(scope="module")
def api(pg_server: PostgresServer) -> Iterator[httpx.Client]:
    url = pg_server.create_database()
    try:
        with client_for(create_app(api_settings(url))) as client:
            assert client.post("/api/v2/dags", json=spec(HEALTHY, tasks=[task()]), headers=ADMIN).status_code == 201
            yield client
    finally:
        pg_server.drop_database(url)


def _send(api: httpx.Client, path: str, body: Any, as_yaml: bool) -> httpx.Response:
    content_type = "application/yaml" if as_yaml else "application/json"
    return api.post(path, content=_encode(body, as_yaml), headers={**ADMIN, "Content-Type": content_type})


def _encode(body: Any, as_yaml: bool) -> bytes:
    try:
        text = dump_yaml(body) if as_yaml else json.dumps(body, default=str)
    except (yaml.YAMLError, RecursionError, ValueError, TypeError):
        # Not representable (a tuple in YAML, 10^5000 past str()'s digit limit): send what a
        # careless client would, its repr — or bytes that are no document at all.
        try:
            text = repr(body)
        except (RecursionError, ValueError):
            return b"\xff\xfe not a document"
    return text.encode("utf-8", "surrogatepass")


HTTP = settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                      HealthCheck.data_too_large])


@HTTP
@given(case=st.one_of(valid_specs().map(lambda d: (d, True)), mutated_specs(huge=False).map(lambda d: (d, False))),
       as_yaml=st.booleans())
def test_the_api_never_answers_5xx_to_a_spec(api: httpx.Client, case: tuple[Any, bool], as_yaml: bool) -> None:
    doc, valid = case
    answer = _send(api, "/api/v2/dags", doc, as_yaml)
    assert answer.status_code in ((200, 201) if valid else (200, 201, 400, 413, 422)), answer.text[:500]
    if answer.status_code >= 400:
        assert 0 < len(answer.json()["error"]["message"]) < 2_000, answer.text[:500]


@HTTP
@given(body=run_requests(huge=False), as_yaml=st.booleans())
@example(body={"conf": {"a": "b", 1: "x"}}, as_yaml=True)  # keys of two types (issue 44, item 13)
@example(body={"conf": {"a": "b"}, 1: "x"}, as_yaml=True)
def test_the_api_never_answers_5xx_to_a_trigger(api: httpx.Client, body: Any, as_yaml: bool) -> None:
    answer = _send(api, f"/api/v2/dags/{HEALTHY}/runs", body, as_yaml)
    assert answer.status_code in (201, 400, 409, 413, 422), answer.text[:500]
    if answer.status_code >= 400:
        assert 0 < len(answer.json()["error"]["message"]) < 2_000, answer.text[:500]
