"""``leoflow.model.cron``: the one module speaking to croniter answers, never raises, for any schedule."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from leoflow.model import cron
from leoflow.model.env_names import ENV_PREFIX, is_env_name, is_reserved


@pytest.mark.parametrize(("expression", "valid"), [
    ("0 0 * * *", True), ("*/5 9-17 * * 1-5", True), ("0 25 * * *", False), ("* * * * 8", False),
    ("a b c d e", False), ("*/0 * * * *", False), ("99999999999999999999 * * * *", False), ("\x00 * * * *", False),
])
def test_is_valid(expression: str, valid: bool) -> None:
    assert cron.is_valid(expression) is valid


def test_fires_within_catches_croniters_errors_and_the_end_of_the_calendar() -> None:
    assert cron.fires_within("0 0 29 2 *", datetime(2026, 1, 1, tzinfo=UTC), 10)
    assert not cron.fires_within("0 0 31 2 *", datetime(2026, 1, 1, tzinfo=UTC), 10)  # CroniterBadDateError
    assert not cron.fires_within("0 0 29 2 *", datetime(9999, 12, 30, tzinfo=UTC), 10)  # year 10000: ValueError


def test_presets_and_fire_times() -> None:
    assert cron.cron_expression("@daily") == "0 0 * * *" and cron.cron_expression("5 * * * *") == "5 * * * *"
    moment = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)
    assert cron.next_fire("0 * * * *", moment) == datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
    assert cron.previous_fire("0 * * * *", moment) == datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def test_env_names() -> None:
    assert ENV_PREFIX == "LEOFLOW_"
    assert is_env_name("_A1") and not is_env_name("1A") and not is_env_name("A-B") and not is_env_name("")
    assert is_reserved("LEOFLOW_RUN_ID") and is_reserved("leoflow_x") and not is_reserved("MY_LEOFLOW_X")


def test_compiling_many_specs_walks_each_schedule_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler compiles 10,000 stored specs at a cold boundary, most sharing one cron: the
    "fires within N years" walk is asked once per expression, zone and reference, not per spec
    (uncached it was ~60 % of a compile). The zone is part of the key: one instant in two zones
    is two local times, and each is walked."""
    from leoflow.model import bounds
    from leoflow.model.spec.dag import parse_dag_spec

    walked: list[tuple[str, datetime]] = []
    real = cron.fires_within

    def counting(expression: str, local_reference: datetime, years: int) -> bool:
        walked.append((expression, local_reference))
        return real(expression, local_reference, years)

    monkeypatch.setattr(cron, "fires_within", counting)
    bounds._fires_within.cache_clear()
    for i in range(50):
        for zone in ("UTC", "Asia/Tokyo"):
            parse_dag_spec({"dag_id": f"d{i}", "schedule": "17 3 * * *", "timezone": zone,
                            "tasks": [{"id": "t", "kind": "empty"}]}, stored=True)
    assert [(e, str(r.tzinfo)) for e, r in walked] == [("17 3 * * *", "UTC"), ("17 3 * * *", "Asia/Tokyo")]
    assert walked[0][1] == walked[1][1]  # the same instant, two local times
