"""The soak's dataset check catches what it claims to: an event lost from a consumer's queue, and an
event counted in two of its runs — and passes when each event triggered the consumer exactly once."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import psycopg

from leoflow.settings import Settings
from tests.scheduler.harness import apply
from tests.scheduler.stepper import container, stepper
from tests.scheduler.test_datasets import event

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.chaos.checks import Verdict, check_datasets  # noqa: E402

URI = "chaos://chaos-a/slow"
CHECK = "dataset_events_trigger_once"


def verdict_of(url: str) -> Verdict:
    verdict = Verdict()
    with psycopg.connect(url) as conn:
        check_datasets(verdict, conn)
    return verdict


def test_the_dataset_check_passes_on_exactly_once_and_catches_lost_or_doubled_events(
        settings: Settings, database_url: str) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            await apply(st.engine, {"dag_id": "chaos-datasets", "schedule": {"datasets": {"any": [URI]}},
                                    "tasks": [container("consume")]})
            for _ in range(3):
                await event(st.engine, URI)
            await st.tick(periodic=True)  # one run consumes the three
            await event(st.engine, URI)  # one waits in the queue (the run is unfinished)

    asyncio.run(main())
    verdict = verdict_of(database_url)
    assert verdict.checks[CHECK], verdict.details
    assert verdict.details[CHECK]["events"] == 4 and verdict.details[CHECK]["dataset_runs"] == 1
    with psycopg.connect(database_url) as conn:  # a second run claiming the first one's events
        conn.execute("""INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, logical_date, state, conf,
                                              created_at, updated_at, triggering_events)
                        SELECT dag_id, run_id || '-again', dag_version_id, run_type, logical_date, 'success', conf,
                               created_at, updated_at, triggering_events
                        FROM dag_runs WHERE run_type = 'dataset'""")
    doubled = verdict_of(database_url)
    assert not doubled.checks[CHECK] and doubled.details[CHECK]["in_two_runs"]
    with psycopg.connect(database_url) as conn:  # undo it, then lose the queued event
        conn.execute("DELETE FROM dag_runs WHERE run_id LIKE '%-again'")
        conn.execute("DELETE FROM dataset_queue")
    lost = verdict_of(database_url)
    assert not lost.checks[CHECK]
    assert lost.details[CHECK]["wrong"] == [{"dag_id": "chaos-datasets", "uri": URI, "recorded": 4,
                                             "consumed_or_queued": 3}]
