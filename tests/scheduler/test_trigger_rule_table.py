"""The trigger rule decision table (leoflow.model.spec.trigger_rules), row by row, and its invariants.

The rows restate Airflow's documented semantics (``trigger_rule_dep.py``; the README's table)
independently of the implementation's branch order, so a reordered ``if`` that changes an
answer fails here.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import parse_dag_spec
from leoflow.model.spec.trigger_rules import RUN_WHEN_ALL_SUCCEED, TRIGGER_RULES, UpstreamCounts, decide

C = UpstreamCounts

# (rule, counts(pending, success, failed, skipped), decision)
TABLE = [
    # all_success: fails at the first failure, skips at the first skip, runs when all succeeded
    ("all_success", C(2, 0, 0, 0), "wait"),
    ("all_success", C(1, 1, 0, 0), "wait"),
    ("all_success", C(0, 2, 0, 0), "run"),
    ("all_success", C(1, 0, 1, 0), "upstream_failed"),
    ("all_success", C(1, 0, 0, 1), "skipped"),
    ("all_success", C(0, 0, 1, 1), "upstream_failed"),
    # all_failed: skips at the first success or skip, runs when all failed
    ("all_failed", C(1, 0, 1, 0), "wait"),
    ("all_failed", C(0, 0, 2, 0), "run"),
    ("all_failed", C(1, 1, 0, 0), "skipped"),
    ("all_failed", C(1, 0, 0, 1), "skipped"),
    # all_done: waits for everything, whatever it ended as
    ("all_done", C(1, 0, 1, 0), "wait"),
    ("all_done", C(0, 1, 1, 1), "run"),
    ("all_done", C(0, 0, 0, 2), "run"),
    # one_success: runs at the first success, fails if none succeeded, skips if all skipped
    ("one_success", C(2, 1, 0, 0), "run"),
    ("one_success", C(1, 0, 1, 0), "wait"),
    ("one_success", C(0, 0, 1, 1), "upstream_failed"),
    ("one_success", C(0, 0, 0, 2), "skipped"),
    # one_failed: runs at the first failure, skips when all ended without one
    ("one_failed", C(2, 0, 1, 0), "run"),
    ("one_failed", C(1, 1, 0, 0), "wait"),
    ("one_failed", C(0, 1, 0, 1), "skipped"),
    # none_failed: fails at the first failure, runs when all succeeded or were skipped
    ("none_failed", C(1, 1, 0, 0), "wait"),
    ("none_failed", C(1, 0, 1, 0), "upstream_failed"),
    ("none_failed", C(0, 1, 0, 1), "run"),
    ("none_failed", C(0, 0, 0, 2), "run"),
    # none_failed_min_one_success: as none_failed, but all skipped skips
    ("none_failed_min_one_success", C(1, 0, 1, 0), "upstream_failed"),
    ("none_failed_min_one_success", C(0, 1, 0, 1), "run"),
    ("none_failed_min_one_success", C(0, 0, 0, 2), "skipped"),
    ("none_failed_min_one_success", C(1, 0, 0, 1), "wait"),
]


@pytest.mark.parametrize(("rule", "counts", "expected"), TABLE,
                         ids=[f"{r}-{c.pending}p{c.success}s{c.failed}f{c.skipped}k" for r, c, _ in TABLE])
def test_decision_table(rule: str, counts: UpstreamCounts, expected: str) -> None:
    assert decide(rule, counts) == expected


def test_every_rule_has_rows() -> None:
    assert {r for r, _, _ in TABLE} == set(TRIGGER_RULES)


@pytest.mark.parametrize("rule", TRIGGER_RULES)
def test_a_task_without_upstreams_runs(rule: str) -> None:
    assert decide(rule, C(0)) == "run"


counts = st.builds(UpstreamCounts, st.integers(0, 5), st.integers(0, 5), st.integers(0, 5), st.integers(0, 5))


@given(rule=st.sampled_from(TRIGGER_RULES), c=counts)
def test_nothing_waits_once_every_upstream_ended(rule: str, c: UpstreamCounts) -> None:
    """The scheduler's invariant: pending with pending_upstreams = 0 means ready to queue."""
    done = UpstreamCounts(0, c.success, c.failed, c.skipped)
    assert decide(rule, done) != "wait"


@given(rule=st.sampled_from(TRIGGER_RULES), c=counts, outcome=st.sampled_from(["success", "failed", "skipped"]))
def test_a_final_decision_never_changes_as_more_upstreams_end(rule: str, c: UpstreamCounts, outcome: str) -> None:
    """Counted rows are decided once: a decision made early (run, fail, skip) must be the one the
    complete picture gives, or deciding at the first outcome would be wrong. The one exception is
    Airflow's too: all_success skips at the first skipped upstream, at once, and a failure that
    ends later does not turn that task upstream_failed (Airflow decides it once, as we do)."""
    first = decide(rule, c)
    if first == "wait" or c.pending == 0:
        return
    later = UpstreamCounts(c.pending - 1, c.success + (outcome == "success"), c.failed + (outcome == "failed"),
                           c.skipped + (outcome == "skipped"))
    if (rule, first, outcome) == ("all_success", "skipped", "failed"):
        assert decide(rule, later) == "upstream_failed"  # what a later evaluation would say; we never ask
        return
    assert decide(rule, later) == first


def test_the_spec_takes_a_rule_and_names_a_bad_one() -> None:
    spec = parse_dag_spec({"dag_id": "d", "tasks": [{"id": "a", "kind": "empty"},
                                                    {"id": "b", "kind": "empty", "depends_on": ["a"],
                                                     "trigger_rule": "all_done"}]})
    assert spec.task_map["b"].trigger_rule == "all_done"
    assert spec.to_canonical()["tasks"][1]["trigger_rule"] == "all_done"
    assert "trigger_rule" not in spec.to_canonical()["tasks"][0]  # defaults keep existing hashes
    for bad, problem in (("any", "must be one of all_success"), (3, "got an integer"), (["all_done"], "got a list")):
        with pytest.raises(ValidationFailed) as err:
            parse_dag_spec({"dag_id": "d", "tasks": [{"id": "a", "kind": "empty", "trigger_rule": bad}]})
        assert err.value.path == "tasks[0].trigger_rule"
        assert problem in err.value.problem


def test_the_spec_takes_a_run_timeout_and_names_a_bad_one() -> None:
    spec = parse_dag_spec({"dag_id": "d", "run_timeout_seconds": 3600, "tasks": [{"id": "a", "kind": "empty"}]})
    assert spec.run_timeout_seconds == 3600.0 and spec.to_canonical()["run_timeout_seconds"] == 3600
    assert "run_timeout_seconds" not in parse_dag_spec({"dag_id": "d", "tasks": [{"id": "a", "kind": "empty"}]
                                                        }).to_canonical()
    for bad in (0, -1, 1e12, float("inf"), float("nan"), "60", True, 366 * 86400 + 1):
        with pytest.raises(ValidationFailed) as err:
            parse_dag_spec({"dag_id": "d", "run_timeout_seconds": bad, "tasks": [{"id": "a", "kind": "empty"}]})
        assert err.value.path == "run_timeout_seconds"


def test_the_rules_that_run_when_every_upstream_succeeded_are_airflows() -> None:
    """The scheduler queues these in the write that counts the last success (issue 21)."""
    airflow = {"all_success", "all_done", "none_failed", "none_failed_min_one_success", "one_success"}
    assert airflow == RUN_WHEN_ALL_SUCCEED


@given(st.sampled_from(TRIGGER_RULES), st.integers(min_value=1, max_value=10_000))
def test_every_upstream_succeeded_runs_exactly_the_one_write_rules(rule: str, upstreams: int) -> None:
    runs = decide(rule, UpstreamCounts(pending=0, success=upstreams)) == "run"
    assert runs == (rule in RUN_WHEN_ALL_SUCCEED)
