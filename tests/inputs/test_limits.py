"""Every row of the limits table, at its boundary and one step past it, through the validators
(pure: no database). The API-level corpus (``test_poison_api.py``) sends the same kinds of
values over HTTP; a last test fails when a limit is added without boundary cases here."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from leoflow.api.oidc.verifier import TokenRefused, check_bearer_size, groups_of
from leoflow.errors import ValidationFailed
from leoflow.executor.kubernetes.pod_events import parse_event
from leoflow.model import limits
from leoflow.model.access.teams import parse_teams
from leoflow.model.access.tokens import check_token_capacity, parse_token_request
from leoflow.model.bounds import check_document_shape, check_size
from leoflow.model.dataset_events import parse_event_request, parse_event_requests
from leoflow.model.outputs import OutputDecl, OutputsRejected, check_outputs
from leoflow.model.run_commands import parse_clear
from leoflow.model.run_request import parse_run_request
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.expressions import WhenFailed, check_activation_size
from leoflow.model.spec.fairness import parse_pool_request
from leoflow.model.spec.params import parse_params
from leoflow.model.spec.rendering import RunFacts, render
from leoflow.model.spec.reuse import check_cluster_template, check_template_count
from leoflow.model.spec.templating import TemplateUnresolved, parse_template
from leoflow.storage.artifacts import measure
from tests.inputs.corpus import corpus, nested

DAY = 24 * 3600


def dag(**fields: Any) -> dict[str, Any]:
    return {"dag_id": "limits", "tasks": [{"id": "a", "image": "busybox", "command": ["true"]}], **fields}


def with_task(**fields: Any) -> dict[str, Any]:
    doc = dag()
    doc["tasks"][0].update(fields)
    return doc


def chain(count: int) -> dict[str, Any]:
    return dag(tasks=[{"id": f"t{i}", "kind": "empty"} for i in range(count)])


def edges(count: int) -> dict[str, Any]:
    """``count`` dependencies: sinks each depending on all of 250 sources, the rest on fewer."""
    sources = [{"id": f"s{i}", "kind": "empty"} for i in range(250)]
    sinks = []
    left = count
    while left:
        take = min(250, left)
        sinks.append({"id": f"k{len(sinks)}", "kind": "empty", "depends_on": [f"s{i}" for i in range(take)]})
        left -= take
    return dag(tasks=sources + sinks)


def _template(name: str, inputs: int = 0) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "command": ["true"], "inputs": {f"i{n}": {"default": ""}
                                                                             for n in range(inputs)}}


def _templates(count: int) -> list[dict[str, Any]]:
    return [_template(f"t{i}") for i in range(count)]


def _using(inputs: dict[str, Any]) -> dict[str, Any]:
    doc = dag(templates=[_template("t", inputs=64)])
    doc["tasks"][0] = {"id": "a", "uses": "t", "inputs": inputs}
    return doc


def _activation(size: int) -> None:
    """The activation check of a condition, as a ValidationFailed at ``when`` (a task's failure at run time)."""
    try:
        check_activation_size(size)
    except WhenFailed as exc:
        raise ValidationFailed("when", str(exc)) from None


def _rendered(length: int) -> None:
    """One ``{{ params.x }}`` element rendered with a value of ``length`` characters (the element's own
    limit; the whole argv's is ``COMMAND``), as a ValidationFailed at ``args[0]``."""
    template = parse_template("{{ params.x }}", "args[0]")
    assert template is not None
    facts = RunFacts(params={"x": "a" * length}, run_id="r", logical_date="2026-01-01T00:00:00+00:00", upstream={})
    try:
        render(template, facts, "args[0]")
    except TemplateUnresolved as exc:
        raise ValidationFailed("args[0]", str(exc)) from None


def _outputs(size: int) -> None:
    """A try's outputs of ``size`` bytes as written, as a ValidationFailed at ``outputs``."""
    raw = b'{"x":"' + b"a" * (size - 8) + b'"}'
    assert len(raw) == size
    try:
        check_outputs(raw, {"x": OutputDecl("string")}, termination_message=False)
    except OutputsRejected as exc:
        raise ValidationFailed("outputs", exc.reason) from None


@dataclass(frozen=True)
class Case:
    limit: limits.Limit
    label: str
    check: Callable[[], object]
    #: The path the ValidationFailed must name; None: the value is accepted.
    refused_at: str | None
    #: Words the problem must contain (when refused).
    words: str = ""


def spec_case(limit: limits.Limit, label: str, doc: dict[str, Any], refused_at: str | None,
              now: datetime | None = None, words: str = "") -> Case:
    return Case(limit, label, lambda: parse_dag_spec(copy.deepcopy(doc), now=now), refused_at, words)


def run_case(limit: limits.Limit, label: str, body: dict[str, Any], refused_at: str | None) -> Case:
    return Case(limit, label, lambda: parse_run_request(body), refused_at)


def size_case(limit: limits.Size, label: str, value: Any, refused: bool, *, plain: bool = False) -> Case:
    return Case(limit, label, lambda: check_size(value, "value", limit, plain=plain), "value" if refused else None)


def _range_cases(limit: limits.Range, place: Callable[[float], dict[str, Any]], path: str) -> list[Case]:
    step = 1 if limit.integer else 0.001
    low_ok = limit.minimum + step if limit.above_minimum else limit.minimum
    low_bad = limit.minimum if limit.above_minimum else limit.minimum - step
    return [spec_case(limit, f"{path}={low_ok}", place(low_ok), None),
            spec_case(limit, f"{path}={low_bad}", place(low_bad), path),
            spec_case(limit, f"{path}={limit.maximum}", place(limit.maximum), None),
            spec_case(limit, f"{path}={limit.maximum + step}", place(limit.maximum + step), path)]


def pool_request(**fields: Any) -> object:
    return parse_pool_request({"name": "gpu", "slots": 1, **fields}, creating=True)


def _cron(length: int) -> str:
    return "0 0 * *" + " " * (length - 8) + "*"


def _token_request(max_days: int = 90, **fields: Any) -> object:
    return parse_token_request({"name": "ci", "role": "viewer", "expires_in_days": 7, **fields}, max_days=max_days)


def _team(**fields: object) -> object:
    """A teams file of one team with ``fields`` (the file's reader, as the server reads it)."""
    return parse_teams({"teams": [{"name": "data", **fields}]})


def _access_cases() -> list[Case]:
    """Runtime API tokens and teams (docs/access-control.md)."""
    return [
        Case(limits.TOKEN_NAME, "token name 50", lambda: _token_request(name="t" * 50), None),
        Case(limits.TOKEN_NAME, "token name 51", lambda: _token_request(name="t" * 51), "name"),
        Case(limits.TEAM_NAME, "token team 50", lambda: _token_request(team="t" * 50), None),
        Case(limits.TEAM_NAME, "token team 51", lambda: _token_request(team="t" * 51), "team"),
        spec_case(limits.TEAM_NAME, "DAG team 51", dag(team="t" * 51), "team"),
        Case(limits.TOKEN_EXPIRY, "1 day", lambda: _token_request(expires_in_days=1), None),
        Case(limits.TOKEN_EXPIRY, "0 days", lambda: _token_request(expires_in_days=0), "expires_in_days"),
        Case(limits.TOKEN_EXPIRY, "3,650 days", lambda: _token_request(3_650, expires_in_days=3_650), None),
        Case(limits.TOKEN_EXPIRY, "3,651 days", lambda: _token_request(3_650, expires_in_days=3_651),
             "expires_in_days"),
        Case(limits.TOKEN_EXPIRY, "91 days over the default cap", lambda: _token_request(expires_in_days=91),
             "expires_in_days", words="LEOFLOW_API_TOKEN_MAX_DAYS"),
        Case(limits.TEAM_NAMESPACE, "namespace 63", lambda: _team(namespace="n" * 63), None),
        Case(limits.TEAM_NAMESPACE, "namespace 64", lambda: _team(namespace="n" * 64), "teams[0].namespace"),
        Case(limits.TEAM_NAMESPACE, "namespace with a capital", lambda: _team(namespace="Data"),
             "teams[0].namespace"),
        Case(limits.TEAM_SERVICE_ACCOUNT, "service account 253", lambda: _team(service_account="s" * 253), None),
        Case(limits.TEAM_SERVICE_ACCOUNT, "service account 254", lambda: _team(service_account="s" * 254),
             "teams[0].service_account"),
        Case(limits.TOKENS, "the 10,000th token", lambda: check_token_capacity(9_999), None),
        Case(limits.TOKENS, "the 10,001st token", lambda: check_token_capacity(10_000), "tokens", words="10,000"),
    ]


def _refused_as(path: str, check: Callable[[], object]) -> Callable[[], object]:
    """An OpenID Connect check, its TokenRefused (a 401 at the API) read as a refusal naming ``path``."""
    def run() -> object:
        try:
            return check()
        except TokenRefused as exc:
            raise ValidationFailed(path, str(exc)) from None
    return run


def _oidc_cases() -> list[Case]:
    """OpenID Connect bearer tokens (leoflow.api.oidc.verifier; each refusal a 401)."""
    def groups(count: int) -> Callable[[], object]:
        return _refused_as("groups", lambda: groups_of({"groups": [f"g{i}" for i in range(count)]}, "groups"))

    return [
        Case(limits.BEARER_JWT, "a 16,384-byte token", _refused_as("Authorization", lambda: check_bearer_size(
            "x" * 16_384)), None),
        Case(limits.BEARER_JWT, "a 16,385-byte token", _refused_as("Authorization", lambda: check_bearer_size(
            "x" * 16_385)), "Authorization", words="16384"),
        Case(limits.OIDC_GROUPS, "1,000 groups", groups(1_000), None),
        Case(limits.OIDC_GROUPS, "1,001 groups", groups(1_001), "groups", words="1001"),
        Case(limits.OIDC_GROUPS, "a group of 257 characters", _refused_as("groups", lambda: groups_of(
            {"groups": ["g" * 257]}, "groups")), "groups", words="256"),
    ]


def _dataset_cases() -> list[Case]:
    longest = "s3://" + "u" * (limits.DATASET_URI.maximum - 5)
    on = "schedule.datasets.all"
    return [
        spec_case(limits.DATASET_URI, "URI of 1,000", with_task(produces=[longest]), None),
        spec_case(limits.DATASET_URI, "URI of 1,001", with_task(produces=[longest + "x"]), "tasks[0].produces[0]",
                  words="1,001"),
        spec_case(limits.DATASET_URI, "empty URI", dag(schedule={"datasets": {"any": [""]}}),
                  "schedule.datasets.any[0]", words="empty"),
        spec_case(limits.DATASET_URI, "URI with a newline", with_task(produces=["s3://a\nb"]), "tasks[0].produces[0]",
                  words="control"),
        spec_case(limits.DATASET_URI, "URI with a NUL", dag(schedule={"datasets": {"all": ["a\x00"]}}), on + "[0]",
                  words="NUL"),
        spec_case(limits.PRODUCES, "100 produced URIs", with_task(produces=[f"u{i}" for i in range(100)]), None),
        spec_case(limits.PRODUCES, "101 produced URIs", with_task(produces=[f"u{i}" for i in range(101)]),
                  "tasks[0].produces", words="101"),
        spec_case(limits.DATASET_CONDITION, "100 URIs waited on",
                  dag(schedule={"datasets": {"all": [f"u{i}" for i in range(100)]}}), None),
        spec_case(limits.DATASET_CONDITION, "101 URIs waited on",
                  dag(schedule={"datasets": {"all": [f"u{i}" for i in range(101)]}}), on, words="101"),
        spec_case(limits.DATASET_CONDITION, "no URI waited on", dag(schedule={"datasets": {"any": []}}),
                  "schedule.datasets.any"),
        Case(limits.DATASET_EXTRA, "extra of 16 KiB", lambda: parse_event_request(
            {"uri": "u", "extra": {"k": "v" * (16 * 1024 - 8)}}), None),
        Case(limits.DATASET_EXTRA, "extra of 16 KiB + 1", lambda: parse_event_request(
            {"uri": "u", "extra": {"k": "v" * (16 * 1024 - 7)}}), "extra", words="16,384"),
        Case(limits.DATASET_EVENT_BATCH, "a list of 1,000 events", lambda: parse_event_requests(
            {"events": [{"uri": "u"}] * 1_000}), None),
        Case(limits.DATASET_EVENT_BATCH, "a list of 1,001 events", lambda: parse_event_requests(
            {"events": [{"uri": "u"}] * 1_001}), "events", words="1,000"),
        Case(limits.DATASET_EVENT_BATCH, "an empty list", lambda: parse_event_requests({"events": []}), "events",
             words="1 to"),
    ]


def _approval_comment(comment: str) -> Callable[[], object]:
    """The approval route's body check, its 422 read as a refusal naming the field."""
    def run() -> object:
        from leoflow.api.errors import ApiError
        from leoflow.api.routes.approvals import parse_approval
        try:
            return parse_approval({"decision": "reject", "comment": comment})
        except ApiError as exc:
            raise ValidationFailed(str(exc.details["field"]), exc.message) from None
    return run


def _wait_cases() -> list[Case]:
    """wait_for conditions (leoflow.model.spec.waits) and an approval's comment."""
    on = "tasks[0].wait_for"
    return [
        spec_case(limits.WAIT_FOR, "20 conditions", with_task(wait_for=[{"dataset": f"u{i}"} for i in range(20)]),
                  None),
        spec_case(limits.WAIT_FOR, "21 conditions", with_task(wait_for=[{"dataset": f"u{i}"} for i in range(21)]),
                  on, words="21"),
        spec_case(limits.WAIT_OFFSET, "offset of -366 days", with_task(wait_for=[{"dag": "a", "offset": "-366d"}]),
                  None),
        spec_case(limits.WAIT_OFFSET, "offset of -366 days and a second",
                  with_task(wait_for=[{"dag": "a", "offset": "-366d1s"}]), on + "[0].offset"),
        spec_case(limits.WAIT_OFFSET, "not_before of 10^300 s", with_task(wait_for=[{"not_before": 1e300}]),
                  on + "[0].not_before"),
        spec_case(limits.WAIT_TIMEOUT, "timeout of 30 days",
                  with_task(wait_for=[{"approval": {}, "timeout_seconds": 30 * 86_400}]), None),
        spec_case(limits.WAIT_TIMEOUT, "timeout of 0", with_task(wait_for=[{"approval": {}, "timeout_seconds": 0}]),
                  on + "[0].timeout_seconds"),
        spec_case(limits.APPROVAL_MESSAGE, "message of 500",
                  with_task(wait_for=[{"approval": {"message": "m" * 500}}]), None),
        spec_case(limits.APPROVAL_MESSAGE, "message of 501",
                  with_task(wait_for=[{"approval": {"message": "m" * 501}}]), on + "[0].approval.message",
                  words="501"),
        Case(limits.APPROVAL_COMMENT, "comment of 2,000", _approval_comment("c" * 2_000), None),
        Case(limits.APPROVAL_COMMENT, "comment of 2,001", _approval_comment("c" * 2_001), "comment", words="2,001"),
    ]


def _artifact_cases() -> list[Case]:
    """``artifacts:`` declarations, checked at apply like the rest of the spec."""
    def outputs(*decls: dict[str, str]) -> dict[str, Any]:
        return with_task(artifacts={"outputs": list(decls)})
    at = "tasks[0].artifacts.outputs"
    many = [{"name": f"n{i}", "path": f"p{i}"} for i in range(33)]
    return [
        spec_case(limits.ARTIFACT_NAME, "name of 64", outputs({"name": "n" * 64, "path": "p"}), None),
        spec_case(limits.ARTIFACT_NAME, "name of 65", outputs({"name": "n" * 65, "path": "p"}), f"{at}[0].name"),
        spec_case(limits.ARTIFACT_PATH, "path of 255", outputs({"name": "n", "path": "p" * 255}), None),
        spec_case(limits.ARTIFACT_PATH, "path of 256", outputs({"name": "n", "path": "p" * 256}), f"{at}[0].path",
                  words="256"),
        spec_case(limits.ARTIFACT_DECLS, "32 outputs", outputs(*many[:32]), None),
        spec_case(limits.ARTIFACT_DECLS, "33 outputs", outputs(*many), at, words="33"),
    ]


def _schedule_cases() -> list[Case]:
    start = "2026-01-01T00:00:00Z"
    return [
        spec_case(limits.SCHEDULE_CRONS, "20 crons", dag(schedule=[f"{m} * * * *" for m in range(20)]), None),
        spec_case(limits.SCHEDULE_CRONS, "21 crons", dag(schedule=[f"{m} * * * *" for m in range(21)]), "schedule",
                  words="21"),
        spec_case(limits.SCHEDULE_EVERY, "every 60 s", dag(schedule={"every": 60}), None),
        spec_case(limits.SCHEDULE_EVERY, "every 59 s", dag(schedule={"every": "59s"}), "schedule.every"),
        spec_case(limits.SCHEDULE_EVERY, "every 366 days", dag(schedule={"every": "366d"}), None),
        spec_case(limits.SCHEDULE_EVERY, "every 366 days and a second", dag(schedule={"every": "366d1s"}),
                  "schedule.every"),
        spec_case(limits.END_DATE, "end_date a second after start_date",
                  dag(schedule="@hourly", start_date=start, end_date="2026-01-01T00:00:01Z"), None),
        spec_case(limits.END_DATE, "end_date at start_date", dag(schedule="@hourly", start_date=start, end_date=start),
                  "end_date", words="after start_date"),
        spec_case(limits.END_DATE, "end_date in 2200", dag(end_date="2200-01-01T00:00:00Z"), "end_date"),
        spec_case(limits.STARTING_DEADLINE, "deadline of 366 days",
                  dag(schedule="@daily", starting_deadline_seconds=366 * 86_400), None),
        spec_case(limits.STARTING_DEADLINE, "deadline of 0", dag(schedule="@daily", starting_deadline_seconds=0),
                  "starting_deadline_seconds"),
        run_case(limits.LOGICAL_DATE, "logical_date in 1970", {"logical_date": "1970-01-01T00:00:00Z"}, None),
        run_case(limits.LOGICAL_DATE, "logical_date in 1969", {"logical_date": "1969-12-31T23:59:59Z"},
                 "logical_date"),
        run_case(limits.LOGICAL_DATE, "logical_date in 2200", {"logical_date": "2200-01-01T00:00:00Z"},
                 "logical_date"),
    ]


CASES: list[Case] = [
    spec_case(limits.DAG_ID, "dag_id 50", dag(dag_id="d" * 50), None),
    spec_case(limits.DAG_ID, "dag_id 51", dag(dag_id="d" * 51), "dag_id"),
    spec_case(limits.DAG_ID, "dag_id ends with -", dag(dag_id="etl-"), "dag_id"),
    spec_case(limits.DAG_ID, "dag_id with a newline", dag(dag_id="etl\n"), "dag_id"),
    spec_case(limits.TASK_ID, "task id 50", with_task(id="t" * 50), None),
    spec_case(limits.TASK_ID, "task id 51", with_task(id="t" * 51), "tasks[0].id"),
    spec_case(limits.TASK_ID, "dependency id 51", dag(tasks=[{"id": "a", "kind": "empty", "depends_on": ["b" * 51]}]),
              "tasks[0].depends_on[0]"),
    run_case(limits.RUN_ID, "run_id 250", {"run_id": "r" * 250}, None),
    run_case(limits.RUN_ID, "run_id 251", {"run_id": "r" * 251}, "run_id"),
    run_case(limits.RUN_ID, "run_id starting with _", {"run_id": "_r"}, "run_id"),
    run_case(limits.RUN_ID, "run_id with a newline", {"run_id": "r\n"}, "run_id"),
    spec_case(limits.DESCRIPTION, "description 2,000", dag(description="d" * 2000), None),
    spec_case(limits.DESCRIPTION, "description 2,001", dag(description="d" * 2001), "description"),
    spec_case(limits.SCHEDULE, "cron 256 characters", dag(schedule=_cron(256)), None),
    spec_case(limits.SCHEDULE, "cron 257 characters", dag(schedule=_cron(257)), "schedule"),
    spec_case(limits.SCHEDULE, "31 February", dag(schedule="0 0 31 2 *"), "schedule"),
    spec_case(limits.SCHEDULE, "31 April and June", dag(schedule="0 0 31 4,6 *"), "schedule"),
    spec_case(limits.SCHEDULE, "29 February from 2026", dag(schedule="0 0 29 2 *"), None,
              now=datetime(2026, 3, 1, tzinfo=UTC)),
    # 2100 is no leap year: from March 2097 the next 29 February is in 2104, 7 years away.
    spec_case(limits.SCHEDULE, "29 February from 2097", dag(schedule="0 0 29 2 *"), "schedule",
              now=datetime(2097, 3, 1, tzinfo=UTC)),
    spec_case(limits.SCHEDULE, "29 February from a start_date in 2097",
              dag(schedule="0 0 29 2 *", start_date="2097-03-01T00:00:00Z"), "schedule"),
    spec_case(limits.TIMEZONE, "the longest IANA name", dag(timezone="America/Argentina/ComodRivadavia"), None),
    spec_case(limits.TIMEZONE, "time zone of 64 characters (not too long, unknown)", dag(timezone="A" * 64),
              "timezone", words="unknown time zone"),
    spec_case(limits.TIMEZONE, "time zone of 65 characters", dag(timezone="A" * 65), "timezone",
              words="at most 64 characters"),
    spec_case(limits.START_DATE, "start 1970-01-01", dag(start_date="1970-01-01T00:00:00Z"), None),
    spec_case(limits.START_DATE, "start a microsecond before 1970",
              dag(start_date="1969-12-31T23:59:59.999999Z"), "start_date"),
    spec_case(limits.START_DATE, "start a microsecond before 2200",
              dag(schedule="@yearly", start_date="2199-12-31T23:59:59.999999Z"), None),
    spec_case(limits.START_DATE, "start 2200-01-01", dag(start_date="2200-01-01T00:00:00Z"), "start_date"),
    spec_case(limits.START_DATE, "start overflowing UTC", dag(start_date="9999-12-31T23:59:59-12:00"), "start_date"),
    *_range_cases(limits.MAX_ACTIVE_RUNS, lambda v: dag(max_active_runs=v), "max_active_runs"),
    *_range_cases(limits.MAX_ACTIVE_TASKS, lambda v: dag(max_active_tasks=v), "max_active_tasks"),
    *_range_cases(limits.PRIORITY, lambda v: with_task(priority=v), "tasks[0].priority"),
    spec_case(limits.POOL_NAME, "pool 50", with_task(pool="p" * 50), None),
    spec_case(limits.POOL_NAME, "pool 51", with_task(pool="p" * 51), "tasks[0].pool"),
    spec_case(limits.POOL_NAME, "pool with a capital", with_task(pool="GPU"), "tasks[0].pool"),
    Case(limits.POOL_NAME, "pool request name 51", lambda: pool_request(name="p" * 51), "name"),
    Case(limits.POOL_SLOTS, "slots 0", lambda: pool_request(slots=0), None),
    Case(limits.POOL_SLOTS, "slots -1", lambda: pool_request(slots=-1), "slots"),
    Case(limits.POOL_SLOTS, "slots 100,000", lambda: pool_request(slots=100_000), None),
    Case(limits.POOL_SLOTS, "slots 100,001", lambda: pool_request(slots=100_001), "slots"),
    Case(limits.POOL_SLOTS, "slots 1.5", lambda: pool_request(slots=1.5), "slots"),
    Case(limits.POOL_DESCRIPTION, "description 500", lambda: pool_request(description="d" * 500), None),
    Case(limits.POOL_DESCRIPTION, "description 501", lambda: pool_request(description="d" * 501), "description"),
    Case(limits.POOL_DESCRIPTION, "description with NUL", lambda: pool_request(description="a\x00"), "description"),
    Case(limits.POOL_DESCRIPTION, "description with a lone surrogate", lambda: pool_request(description="\ud800"),
         "description"),
    *_range_cases(limits.RETRIES, lambda v: with_task(retries=v), "tasks[0].retries"),
    *_range_cases(limits.RETRIES, lambda v: dag(default_retries=v), "default_retries"),
    *_range_cases(limits.RETRY_DELAY, lambda v: with_task(retry_delay_seconds=v), "tasks[0].retry_delay_seconds"),
    *_range_cases(limits.MAX_RETRY_DELAY, lambda v: with_task(max_retry_delay_seconds=v),
                  "tasks[0].max_retry_delay_seconds"),
    *_range_cases(limits.TIMEOUT, lambda v: with_task(timeout_seconds=v), "tasks[0].timeout_seconds"),
    spec_case(limits.TIMEOUT, "timeout 1e12", with_task(timeout_seconds=1e12), "tasks[0].timeout_seconds"),
    *_range_cases(limits.RUN_TIMEOUT, lambda v: dag(run_timeout_seconds=v), "run_timeout_seconds"),
    spec_case(limits.RUN_TIMEOUT, "run deadline 1e12", dag(run_timeout_seconds=1e12), "run_timeout_seconds"),
    run_case(limits.RUN_TIMEOUT, "trigger deadline 31,622,400 s", {"run_timeout_seconds": 366 * 86400}, None),
    run_case(limits.RUN_TIMEOUT, "trigger deadline 0", {"run_timeout_seconds": 0}, "run_timeout_seconds"),
    run_case(limits.RUN_TIMEOUT, "trigger deadline a string", {"run_timeout_seconds": "60"}, "run_timeout_seconds"),
    run_case(limits.RUN_TIMEOUT, "trigger deadline true", {"run_timeout_seconds": True}, "run_timeout_seconds"),
    run_case(limits.RUN_TIMEOUT, "trigger deadline NaN", {"run_timeout_seconds": float("nan")},
             "run_timeout_seconds"),
    spec_case(limits.RETRIES, "retries 3.0 (an integer, as JSON Schema counts)", with_task(retries=3.0), None),
    spec_case(limits.RETRIES, "retries 1000.0 + 1", with_task(retries=1001.0), "tasks[0].retries"),
    spec_case(limits.MAX_ACTIVE_RUNS, "max_active_runs of 5,000 digits", dag(max_active_runs=10**5000),
              "max_active_runs"),
    spec_case(limits.TASKS, "10,000 tasks", chain(10_000), None),
    spec_case(limits.TASKS, "10,001 tasks", chain(10_001), "tasks"),
    spec_case(limits.EDGES, "50,000 dependencies", edges(50_000), None),
    spec_case(limits.EDGES, "50,001 dependencies", edges(50_001), "tasks"),
    spec_case(limits.IMAGE, "image 500", with_task(image="i" * 500), None),
    spec_case(limits.IMAGE, "image 501", with_task(image="i" * 501), "tasks[0].image"),
    # ["x…"] is the string's length plus 4 bytes of JSON.
    spec_case(limits.COMMAND, "command of 65,536 bytes", with_task(command=["x" * 65_532]), None),
    spec_case(limits.COMMAND, "command of 65,537 bytes", with_task(command=["x" * 65_533]), "tasks[0].command"),
    spec_case(limits.COMMAND, "args of 1,000 items", with_task(args=["x"] * 1_000), None),
    spec_case(limits.COMMAND, "args of 1,001 items", with_task(args=["x"] * 1_001), "tasks[0].args"),
    # {"A":"x…"} is the value's length plus 8 bytes.
    spec_case(limits.ENV, "env of 65,536 bytes", with_task(env={"A": "x" * 65_528}), None),
    spec_case(limits.ENV, "env of 65,537 bytes", with_task(env={"A": "x" * 65_529}), "tasks[0].env"),
    spec_case(limits.ENV, "env of 4,096 variables", with_task(env={f"V{i}": "" for i in range(4_096)}), None),
    spec_case(limits.ENV, "env of 4,097 variables", with_task(env={f"V{i}": "" for i in range(4_097)}),
              "tasks[0].env"),
    size_case(limits.ENV, "env list form nested 8 deep", [{"name": "A", "valueFrom": nested(6)}], False),
    size_case(limits.ENV, "env list form nested 9 deep", [{"name": "A", "valueFrom": nested(7)}], True),
    spec_case(limits.RESOURCES, "resources with 64 entries",
              with_task(resources={"limits": {f"r{i}": "1" for i in range(63)}}), None),
    spec_case(limits.RESOURCES, "resources with 65 entries",
              with_task(resources={"limits": {f"r{i}": "1" for i in range(64)}}), "tasks[0].resources"),
    size_case(limits.RESOURCES, "resources of 8,192 bytes", {"a": "x" * 8_184}, False),
    size_case(limits.RESOURCES, "resources of 8,193 bytes", {"a": "x" * 8_185}, True),
    size_case(limits.RESOURCES, "resources nested 3 deep", {"limits": {"cpu": ["1"]}}, True),
    spec_case(limits.QUANTITY, "quantity of 32 characters", with_task(resources={"limits": {"cpu": "1" * 32}}), None),
    spec_case(limits.QUANTITY, "quantity of 33 characters", with_task(resources={"limits": {"cpu": "1" * 33}}),
              "tasks[0].resources.limits.cpu"),
    spec_case(limits.QUANTITY, "quantity 10^32 - 1", with_task(resources={"limits": {"cpu": 10**32 - 1}}), None),
    spec_case(limits.QUANTITY, "quantity 10^32", with_task(resources={"limits": {"cpu": 10**32}}),
              "tasks[0].resources.limits.cpu"),
    spec_case(limits.QUANTITY, "quantity -1", with_task(resources={"limits": {"cpu": -1}}),
              "tasks[0].resources.limits.cpu"),
    spec_case(limits.QUANTITY, "quantity NaN", with_task(resources={"limits": {"cpu": float("nan")}}),
              "tasks[0].resources.limits.cpu"),
    # A float is stored as its plain digits (the stored spec is parsed again by the scheduler):
    # 1e-05 becomes '0.00001'; 5e-324 has 326 of them and is refused up front, not after storing.
    spec_case(limits.QUANTITY, "quantity 1e-05", with_task(resources={"limits": {"cpu": 1e-05}}), None),
    spec_case(limits.QUANTITY, "quantity 5e-324", with_task(resources={"limits": {"cpu": 5e-324}}),
              "tasks[0].resources.limits.cpu"),
    # '{"type":"object","description":""}' is 34 bytes besides the x's.
    spec_case(limits.PARAMS, "params of 32 KiB", dag(params={"type": "object", "description": "x" * 32_734}), None),
    spec_case(limits.PARAMS, "params of 32 KiB + 1", dag(params={"type": "object", "description": "x" * 32_735}),
              "params"),
    # Inside a spec the document's own depth (16) is reached first; the schema alone is held to its own.
    Case(limits.PARAMS, "params nested 16 deep", lambda: parse_params({"type": "object", "default": nested(15)}),
         None),
    Case(limits.PARAMS, "params nested 17 deep", lambda: parse_params({"type": "object", "default": nested(16)}),
         "params.default" + ".a" * 16, "nests deeper than 16"),
    spec_case(limits.PARAMS, "params of 10,000 keys and items", dag(params={"type": "object", "default": [0] * 9_998}),
              None),
    spec_case(limits.PARAMS, "params of 10,001 keys and items", dag(params={"type": "object", "default": [0] * 9_999}),
              "params", words="10,000 keys and items"),
    size_case(limits.SPEC, "document of 8 MiB", {"a": "x" * (limits.SPEC.max_bytes - 8)}, False),
    size_case(limits.SPEC, "document of 8 MiB + 1", {"a": "x" * (limits.SPEC.max_bytes - 7)}, True),
    size_case(limits.SPEC, "document nested 16 deep", nested(16), False),
    size_case(limits.SPEC, "document nested 17 deep", nested(17), True),
    spec_case(limits.SPEC, "10,000 tasks of 1 KiB env each",
              dag(tasks=[{"id": f"t{i}", "image": "x", "command": ["true"], "env": {"A": "x" * 1024}}
                         for i in range(10_000)]), "tasks[7730].env.A",
              words="the whole document is larger than 8,388,608 bytes"),
    spec_case(limits.SPEC, "a NUL character in any string", with_task(args=["\u0000"]), "tasks[0].args[0]"),
    spec_case(limits.SPEC, "a lone surrogate in any string", dag(description="\ud800"), "description"),
    run_case(limits.CONF, "conf of 65,536 bytes", {"conf": {"a": "x" * 65_528}}, None),
    run_case(limits.CONF, "conf of 65,537 bytes", {"conf": {"a": "x" * 65_529}}, "conf"),
    run_case(limits.CONF, "conf nested 32 deep", {"conf": nested(32)}, None),
    run_case(limits.CONF, "conf nested 33 deep", {"conf": nested(33)}, "conf"),
    run_case(limits.CONF, "conf of 10,000 keys and items", {"conf": {"a": [0] * 9_999}}, None),
    run_case(limits.CONF, "conf of 10,001 keys and items", {"conf": {"a": [0] * 10_000}}, "conf"),
    run_case(limits.CONF, "conf with an integer key", {"conf": {1: "a"}}, "conf.1"),
    run_case(limits.CONF, "conf with infinity", {"conf": {"a": float("inf")}}, "conf.a"),
    run_case(limits.CONF, "conf with a set (what YAML's !!set builds)", {"conf": {"a": {1, 2}}}, "conf.a"),
    run_case(limits.CONF, "conf with a tuple", {"conf": {"a": (1, 2)}}, "conf.a"),
    Case(limits.CLEAR_TASKS, "clear of 10,000 task ids",
         lambda: parse_clear({"tasks": [f"t{i}" for i in range(10_000)]}), None),
    Case(limits.CLEAR_TASKS, "clear of 10,001 task ids",
         lambda: parse_clear({"tasks": [f"t{i}" for i in range(10_001)]}), "tasks"),
    Case(limits.CLEAR_TASKS, "clear of no task ids", lambda: parse_clear({"tasks": []}), "tasks"),
    Case(limits.DOCUMENT, "document nested 64 deep", lambda: check_document_shape(nested(64), "body", limits.DOCUMENT),
         None),
    Case(limits.DOCUMENT, "document nested 65 deep", lambda: check_document_shape(nested(65), "body", limits.DOCUMENT),
         "body"),
    Case(limits.DOCUMENT, "document of 500,000 values",
         lambda: check_document_shape([0] * 499_999, "body", limits.DOCUMENT), None),
    Case(limits.DOCUMENT, "document of 500,001 values",
         lambda: check_document_shape([0] * 500_000, "body", limits.DOCUMENT), "body"),
    spec_case(limits.WHEN, "when of 1,024 characters", with_task(when="true".ljust(1_024)), None),
    spec_case(limits.WHEN, "when of 1,025 characters", with_task(when="true".ljust(1_025)), "tasks[0].when",
              words="1,025"),
    spec_case(limits.WHEN_MACROS, "when with 4 macros", with_task(when=" && ".join(["[1].all(x, x > 0)"] * 4)), None),
    spec_case(limits.WHEN_MACROS, "when with 5 macros", with_task(when=" && ".join(["[1].all(x, x > 0)"] * 5)),
              "tasks[0].when", words="more than 4 macros"),
    Case(limits.WHEN_ACTIVATION, "when reading 256 KiB", lambda: _activation(256 * 1024), None),
    Case(limits.WHEN_ACTIVATION, "when reading 256 KiB + 1", lambda: _activation(256 * 1024 + 1), "when",
         "262,145 bytes"),
    spec_case(limits.TEMPLATE_REFS, "64 references in one string", with_task(args=["{{ run.id }}" * 64]), None),
    spec_case(limits.TEMPLATE_REFS, "65 references in one string", with_task(args=["{{ run.id }}" * 65]),
              "tasks[0].args[0]"),
    Case(limits.RENDERED_ARG, "a rendered element of 128 KiB - 1", lambda: _rendered(128 * 1024 - 1), None),
    Case(limits.RENDERED_ARG, "a rendered element of 128 KiB", lambda: _rendered(128 * 1024), "args[0]"),
    spec_case(limits.OUTPUT_NAME, "output name of 64", with_task(outputs={"o" * 64: {"type": "string"}}), None),
    spec_case(limits.OUTPUT_NAME, "output name of 65", with_task(outputs={"o" * 65: {"type": "string"}}),
              "tasks[0].outputs"),
    spec_case(limits.OUTPUT_DECLS, "64 declared outputs",
              with_task(outputs={f"o{i}": {"type": "any"} for i in range(64)}), None),
    spec_case(limits.OUTPUT_DECLS, "65 declared outputs",
              with_task(outputs={f"o{i}": {"type": "any"} for i in range(65)}), "tasks[0].outputs"),
    Case(limits.OUTPUTS, "outputs of 4,095 bytes", lambda: _outputs(4_095), None),
    Case(limits.OUTPUTS, "outputs of 4,096 bytes", lambda: _outputs(4_096), "outputs"),
    spec_case(limits.SKIP_EXIT_CODES, "32 skip exit codes", with_task(skip_on_exit_code=list(range(32))), None),
    spec_case(limits.SKIP_EXIT_CODES, "33 skip exit codes", with_task(skip_on_exit_code=list(range(33))),
              "tasks[0].skip_on_exit_code"),
    spec_case(limits.ON_EXIT, "20 exit tasks", dag(on_exit=[{"id": f"e{i}", "kind": "empty"} for i in range(20)]),
              None),
    spec_case(limits.ON_EXIT, "21 exit tasks", dag(on_exit=[{"id": f"e{i}", "kind": "empty"} for i in range(21)]),
              "on_exit", words="21"),
    spec_case(limits.RETRY_FACTOR, "retry factor 10", with_task(retry_policy={"factor": 10}), None),
    spec_case(limits.RETRY_FACTOR, "retry factor 10.5", with_task(retry_policy={"factor": 10.5}),
              "tasks[0].retry_policy.factor"),
    spec_case(limits.RETRY_FACTOR, "retry factor 1", with_task(retry_policy={"factor": 1}), None),
    spec_case(limits.RETRY_FACTOR, "retry factor 0.99", with_task(retry_policy={"factor": 0.99}),
              "tasks[0].retry_policy.factor"),
    spec_case(limits.RETRY_MAX_DURATION, "retry budget of 7 days",
              with_task(retry_policy={"max_duration_seconds": 7 * 86_400}), None),
    spec_case(limits.RETRY_MAX_DURATION, "retry budget of 7 days + 1 s",
              with_task(retry_policy={"max_duration_seconds": 7 * 86_400 + 1}),
              "tasks[0].retry_policy.max_duration_seconds"),
    spec_case(limits.RETRY_EXIT_CODES, "32 retry exit codes",
              with_task(retry_policy={"on_exit_codes": list(range(32))}), None),
    spec_case(limits.RETRY_EXIT_CODES, "33 retry exit codes",
              with_task(retry_policy={"on_exit_codes": list(range(33))}), "tasks[0].retry_policy.on_exit_codes"),
    spec_case(limits.MAP_ITEMS, "map over 10,000 items", with_task(map_over=list(range(10_000))), None),
    spec_case(limits.MAP_ITEMS, "map over 10,001 items", with_task(map_over=list(range(10_001))),
              "tasks[0].map_over", words="10,001"),
    spec_case(limits.MAP_ITEMS, "count 10,000", with_task(map_over={"count": 10_000}), None),
    spec_case(limits.MAP_ITEMS, "count 10,001", with_task(map_over={"count": 10_001}), "tasks[0].map_over.count"),
    spec_case(limits.MAX_PARALLEL, "max_parallel 10,000", with_task(map_over=[1], max_parallel=10_000), None),
    spec_case(limits.MAX_PARALLEL, "max_parallel 10,001", with_task(map_over=[1], max_parallel=10_001),
              "tasks[0].max_parallel"),
    spec_case(limits.MAX_PARALLEL, "max_parallel 0", with_task(map_over=[1], max_parallel=0),
              "tasks[0].max_parallel"),
    spec_case(limits.MAP_SOURCE, "a literal list of 256 KiB", with_task(map_over=["a" * (256 * 1024 - 4)]), None),
    spec_case(limits.MAP_SOURCE, "a literal list of 256 KiB + 1", with_task(map_over=["a" * (256 * 1024 - 3)]),
              "tasks[0].map_over", words="262,14"),
    spec_case(limits.TEMPLATES, "200 templates", dag(templates=_templates(200)), None),
    spec_case(limits.TEMPLATES, "201 templates", dag(templates=_templates(201)), "templates", words="201"),
    spec_case(limits.TEMPLATE_NAME, "template name of 50", dag(templates=[_template("t" * 50)]), None),
    spec_case(limits.TEMPLATE_NAME, "template name of 51", dag(templates=[_template("t" * 51)]), "templates[0].name"),
    spec_case(limits.TEMPLATE_INPUTS, "64 inputs", dag(templates=[_template("t", inputs=64)]), None),
    spec_case(limits.TEMPLATE_INPUTS, "65 inputs", dag(templates=[_template("t", inputs=65)]),
              "templates[0].inputs", words="65"),
    spec_case(limits.TEMPLATE_INPUTS, "65 inputs given", _using({f"i{n}": "v" for n in range(65)}),
              "tasks[0].inputs", words="65"),
    spec_case(limits.INPUT_NAME, "input name of 64", dag(templates=[{**_template("t"), "inputs": {"i" * 64: {}}}]),
              None),
    spec_case(limits.INPUT_NAME, "input name of 65", dag(templates=[{**_template("t"), "inputs": {"i" * 65: {}}}]),
              "templates[0].inputs." + "i" * 65),
    Case(limits.CLUSTER_TEMPLATE, "cluster template of 256 KiB",
         lambda: check_cluster_template({"image": "busybox", "args": ["a" * (256 * 1024 - 31)]}), None),
    Case(limits.CLUSTER_TEMPLATE, "cluster template of 256 KiB + 1",
         lambda: check_cluster_template({"image": "busybox", "args": ["a" * (256 * 1024 - 30)]}), "args[0]",
         words="262,144 bytes"),
    Case(limits.CLUSTER_TEMPLATE_NAMES, "1,000 cluster templates", lambda: check_template_count(1_000), None),
    Case(limits.CLUSTER_TEMPLATE_NAMES, "1,001 cluster templates", lambda: check_template_count(1_001), "name",
         words="1,001"),
    *_access_cases(),
    *_oidc_cases(),
    *_dataset_cases(),
    *_wait_cases(),
    *_schedule_cases(),
    *_artifact_cases(),
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c.limit.subject} {c.label}"[:90] for c in CASES])
def test_limit_boundary(case: Case) -> None:
    if case.refused_at is None:
        case.check()
        return
    with pytest.raises(ValidationFailed) as info:
        case.check()
    assert info.value.path == case.refused_at, str(info.value)[:300]
    assert case.words in info.value.problem
    assert len(str(info.value)) < 1_000


def test_every_limit_has_an_accepted_and_a_refused_boundary_case() -> None:
    by_subject: dict[str, set[bool]] = {}
    for case in CASES:
        by_subject.setdefault(case.limit.subject, set()).add(case.refused_at is None)
    # The query parameters are checked over HTTP only (tests/inputs/test_poison_api.py).
    for limit, name in ((limits.PAGE_LIMIT, "limit="), (limits.TRY_NUMBER, "try="), (limits.LOG_OFFSET, "offset="),
                        (limits.LOG_LENGTH, "length="), (limits.LOG_TAIL, "tail="),
                        (limits.LOG_CONTAINER, "container=")):
        for poison in corpus():
            if name in poison.path:
                by_subject.setdefault(limit.subject, set()).add(poison.field != name[:-1])
    for limit in limits.LIMITS:
        if limit in AT_RUN_TIME:
            continue
        assert by_subject.get(limit.subject) == {True, False}, limit.subject


#: Limits no validator can refuse, because the value is only known while a try runs: a pod's
#: Kubernetes events are cut, and an artifact's size and entries are measured as it is packed (the
#: try fails with the reason). Each names the test that holds it at its boundary.
AT_RUN_TIME: dict[limits.Limit, str] = {
    limits.POD_EVENTS: "tests/executor/test_pod_events.py::test_events_kept_per_try_are_bounded",
    limits.POD_EVENT_MESSAGE: "tests/inputs/test_limits.py::test_a_pod_events_message_is_cut_at_its_limit",
    limits.ARTIFACT_BYTES:
        "tests/storage/test_artifacts.py::test_an_output_over_its_limit_is_refused_before_any_upload",
    limits.ARTIFACT_TRY_BYTES:
        "tests/storage/test_artifacts.py::test_an_output_over_its_limit_is_refused_before_any_upload",
    limits.ARTIFACT_FILES: "tests/inputs/test_limits.py::test_an_artifacts_entries_are_counted_to_their_limit",
}


def test_limits_held_at_run_time_name_a_test_that_exists() -> None:
    root = Path(__file__).resolve().parents[2]
    for limit, node in AT_RUN_TIME.items():
        path, name = node.split("::")
        assert f"def {name}(" in (root / path).read_text(encoding="utf-8"), f"{limit.subject}: {node}"


def test_a_pod_events_message_is_cut_at_its_limit() -> None:
    most = limits.POD_EVENT_MESSAGE.maximum
    whole = parse_event(1, {"metadata": {"uid": "u"}, "reason": "BackOff", "message": "m" * most})
    cut = parse_event(1, {"metadata": {"uid": "u"}, "reason": "BackOff", "message": "m" * (most + 1)})
    assert whole is not None and whole.message == "m" * most
    assert cut is not None and len(cut.message) == most and cut.message.endswith("…")


def test_an_artifacts_entries_are_counted_to_their_limit(tmp_path: Path) -> None:
    """``measure`` counts a directory's entries (itself included) and stops walking once past the
    limit, so an output of a million files costs one walk to the limit, not a million."""
    (tmp_path / "a").mkdir()
    for i in range(3):
        (tmp_path / "a" / f"f{i}").write_bytes(b"x" * 10)
    assert measure(tmp_path / "a") == ("directory", 30, 4)
    assert measure(tmp_path / "a" / "f0") == ("file", 10, 1)
    big = tmp_path / "big"
    big.mkdir()
    most = limits.ARTIFACT_FILES.maximum
    for i in range(most + 1):  # the directory itself is an entry: most + 2 entries in all
        (big / f"{i}").touch()
    kind, _, entries = measure(big)
    assert kind == "directory" and entries > most
