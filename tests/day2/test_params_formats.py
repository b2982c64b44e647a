"""Params' ``format`` is asserted (``2026-13-45`` is no date); an unknown one is refused at apply; defaults checked."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.params import parse_params, validate_conf
from leoflow.model.spec.params_formats import KNOWN
from leoflow.model.spec.params_validator import FORMATS
from tests.api.conftest import ADMIN

PARAMS = {"type": "object", "required": ["day"], "properties": {
    "day": {"type": "string", "format": "date", "description": "Which day to load"},
    "at": {"type": "string", "format": "date-time", "default": "2026-11-01T00:00:00Z"}}}


def _dag(params: Any = PARAMS) -> dict[str, Any]:
    return {"dag_id": "fmt", "params": params, "tasks": [{"id": "t", "image": "busybox", "command": ["true"]}]}


def test_a_date_that_is_no_day_is_refused_at_trigger_and_a_real_one_accepted(api_client: httpx.Client) -> None:
    assert api_client.post("/api/v2/dags", json=_dag(), headers=ADMIN).status_code == 201
    for day in ["2026-13-45", "2026-02-29", "2026-1-01", "yesterday"]:
        answer = api_client.post("/api/v2/dags/fmt/runs", json={"conf": {"day": day}}, headers=ADMIN)
        assert answer.status_code == 422, (day, answer.text)
        error = answer.json()["error"]
        assert error["details"]["field"] == "conf.day" and f"'{day}' is not a 'date'" in error["message"], error
    answer = api_client.post("/api/v2/dags/fmt/runs", json={"conf": {"day": "2024-02-29", "at": "x"}}, headers=ADMIN)
    assert answer.status_code == 422 and answer.json()["error"]["details"]["field"] == "conf.at", answer.text
    run = api_client.post("/api/v2/dags/fmt/runs", json={"conf": {"day": "2024-02-29"}}, headers=ADMIN)
    assert run.status_code == 201, run.text
    assert run.json()["conf"] == {"day": "2024-02-29", "at": "2026-11-01T00:00:00Z"}


@pytest.mark.parametrize(("name", "good", "bad"), [
    ("date", ["2026-11-01", "2024-02-29"],
     ["2026-13-45", "2026-02-29", "2026-11-1", "\uff12\uff10\uff12\uff16-11-01", "2026-11-01T00:00:00Z"]),
    ("time", ["10:00:00Z", "23:59:60+05:30", "10:00:00.5z"], ["10:00", "10:00:00", "24:00:00Z"]),
    ("date-time", ["2026-11-01T10:00:00Z", "2026-11-01t10:00:00.123-02:00"],
     ["2026-11-01 10:00:00Z", "2026-11-01T10:00:00", "2026-02-30T10:00:00Z"]),
    ("email", ["ops@example.com", "a.b+c@d"], ["ops", "a b@c", "@c", "a@", "a@b@c"]),
    ("hostname", ["example.com", "localhost", "a-b.c"], ["-a.com", "a-.com", "a..b", "a" * 64, "a_b"]),
    ("ipv4", ["10.0.0.1"], ["256.0.0.1", "1.2.3", "::1"]),
    ("ipv6", ["::1", "2001:db8::8a2e:370:7334"], ["fe80::1%eth0", "10.0.0.1", "x::"]),
    ("uri", ["https://example.com/a?b=c#d", "urn:isbn:0451450523", "http://[::1]:80/"],
     ["example.com/a", "http://a b", "http://a/%zz", "http://a/#x#y"]),
    ("uri-reference", ["/a/b", "../x?y#z", "https://x"], ["a b", "%"]),
    ("uuid", ["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3"]),
    ("regex", ["^a+$"], ["(a)\\1", "(?=a)"]),
])
def test_each_format_accepts_and_refuses(name: str, good: list[str], bad: list[str]) -> None:
    assert name in KNOWN
    assert [value for value in good if not FORMATS.conforms(value, name)] == []
    assert [value for value in bad if FORMATS.conforms(value, name)] == []
    assert FORMATS.conforms(5, name) and not FORMATS.conforms("\ud800", name)  # only strings; lone surrogates fail


def test_an_unknown_format_is_refused_at_apply_naming_it() -> None:
    params = {"type": "object", "properties": {"at": {"type": "string", "format": "datetime"}}}
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(_dag(params))
    assert info.value.path == "params.properties.at.format" and "date-time" in info.value.problem


@pytest.mark.parametrize(("sub", "field"), [
    ({"type": "string", "format": "date", "default": "2026-13-45"}, "params.properties.p.default"),
    ({"type": "integer", "default": "ten"}, "params.properties.p.default"),
    ({"type": "object", "default": {}, "properties": {"ip": {"format": "ipv4", "default": "1.2.3"}}},
     "params.properties.p.properties.ip.default"),
    ({"type": "object", "default": {"n": 0}, "properties": {"n": {"type": "integer", "minimum": 1}}},
     "params.properties.p.default.n"),
])
def test_defaults_are_checked_at_apply_even_for_unscheduled_dags(sub: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_dag_spec(_dag({"type": "object", "properties": {"p": sub}}))
    assert info.value.path == field, info.value
    good = {"type": "object", "default": {}, "properties": {"day": {"format": "date", "default": "2026-11-01"}}}
    assert parse_params({"type": "object", "properties": {"p": good}}) is not None


def test_format_checks_stay_linear_on_the_largest_conf() -> None:
    long = "a" * 60_000
    schema = {"type": "object", "properties": {name: {"format": name} for name in KNOWN - {"regex"}}}
    parse_params(schema)
    started = time.monotonic()
    for name in KNOWN - {"regex"}:
        with pytest.raises(ValidationFailed):
            validate_conf(schema, {name: "http://x/" + long + " " if name.startswith("uri") else long + "@"})
    assert time.monotonic() - started < 1.0


def test_a_stored_version_with_an_unknown_format_still_triggers() -> None:
    old = {"type": "object", "properties": {"x": {"type": "string", "format": "multiline"}}}
    assert validate_conf(old, {"x": "anything"}) == {"x": "anything"}
