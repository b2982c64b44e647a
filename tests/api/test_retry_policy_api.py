"""``retry_policy`` through the API: stored canonical, every bad value a 422 naming its field (ADR 0014, decision 5)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ADMIN


def body(policy: object) -> dict[str, Any]:
    return {"dag_id": "retries", "tasks": [{"id": "t", "image": "busybox", "command": ["true"], "retries": 3,
                                            "retry_policy": policy}]}


def test_a_policy_is_stored_in_canonical_form(api_client: httpx.Client) -> None:
    answer = api_client.post("/api/v2/dags", json=body({"on_exit_codes": [137, 75], "when": "try.oom_killed",
                                                        "max_duration_seconds": 3600.0}), headers=ADMIN)
    assert answer.status_code == 201, answer.text
    assert answer.json()["spec"]["tasks"][0]["retry_policy"] == {
        "factor": 2, "max_duration_seconds": 3600, "on_exit_codes": [75, 137], "when": "try.oom_killed"}


@pytest.mark.parametrize(("policy", "field", "words"), [
    ("fast", "tasks[0].retry_policy", "must be a mapping"),
    ({"factor": 0.5}, "tasks[0].retry_policy.factor", "between 1 and 10"),
    ({"factor": 1e308}, "tasks[0].retry_policy.factor", "between 1 and 10"),
    ({"factor": "2"}, "tasks[0].retry_policy.factor", "must be a number"),
    ({"max_duration_seconds": 0}, "tasks[0].retry_policy.max_duration_seconds", "between 1 and"),
    ({"max_duration_seconds": 10**12}, "tasks[0].retry_policy.max_duration_seconds", "between 1 and"),
    ({"on_exit_codes": [-1]}, "tasks[0].retry_policy.on_exit_codes[0]", "from 0 to 255"),
    ({"on_exit_codes": [1, 1]}, "tasks[0].retry_policy.on_exit_codes[1]", "duplicate exit code 1"),
    ({"on_exit_codes": list(range(33))}, "tasks[0].retry_policy.on_exit_codes", "1 to 32"),
    ({"when": 5}, "tasks[0].retry_policy.when", "a CEL expression"),
    ({"when": "try.exit_code =="}, "tasks[0].retry_policy.when", "syntax error"),
    ({"when": "params.day == 'x'"}, "tasks[0].retry_policy.when", "unknown name 'params'"),
    ({"when": "try.signal == 9"}, "tasks[0].retry_policy.when", "no such key"),
    ({"when": "try.exit_code"}, "tasks[0].retry_policy.when", "must be a boolean"),
    ({"when": "(" * 2000 + "true" + ")" * 2000}, "tasks[0].retry_policy.when", "at most 1,024 characters"),
    ({"when": "[1].map(x, [2].map(y, y)) == []"}, "tasks[0].retry_policy.when", "map"),
    ({"backoff": 2}, "tasks[0].retry_policy.backoff", "unknown field"),
], ids=lambda v: repr(v)[:40])
def test_bad_policies_are_422s_naming_the_field(api_client: httpx.Client, policy: object, field: str,
                                                words: str) -> None:
    answer = api_client.post("/api/v2/dags", json=body(policy), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["details"]["field"] == field, error
    assert words in error["message"], error
    assert api_client.get("/api/v2/dags/retries", headers=ADMIN).status_code == 404  # nothing stored
