"""From an event to the consumer's run, on a running leader whose periodic interval is long (10 s):
the event's transaction NOTIFYs the leader, which creates the run at once. Measures both ways in —
an outside event, and a producing task's success — and prints the latencies; the asserted bound is
loose (a loaded machine), the issue's target is p99 < 100 ms."""

from __future__ import annotations

import asyncio
import time

from leoflow.clock import SystemClock
from leoflow.db.stores.datasets.events import record_api_event
from leoflow.executor.memory import MemoryExecutor
from leoflow.settings import Settings
from tests.scheduler.harness import apply, fast, rows, running_scheduler, trigger
from tests.scheduler.stepper import container

SAMPLES = 20


async def _until_runs(engine: object, dag_id: str, started: float) -> float:
    while True:
        found = await rows(engine, "SELECT 1 FROM dag_runs WHERE dag_id = :d AND run_type = 'dataset'",  # type: ignore[arg-type]
                           d=dag_id)
        if found:
            return time.perf_counter() - started
        if time.perf_counter() - started > 5:
            raise AssertionError(f"no dataset run of {dag_id} within 5 s")
        await asyncio.sleep(0.002)


def test_an_event_starts_the_consumer_without_waiting_for_the_interval(settings: Settings) -> None:
    async def main() -> tuple[list[float], list[float]]:
        slow = fast(settings, interval=10.0)
        async with running_scheduler(slow, MemoryExecutor()) as running:
            engine = running.ctx.db.engine
            outside: list[float] = []
            for i in range(SAMPLES):
                await apply(engine, {"dag_id": f"c{i}", "schedule": {"datasets": {"any": [f"s3://x/{i}"]}},
                                     "tasks": [container("r")]})
            await asyncio.sleep(0.5)
            for i in range(SAMPLES):
                started = time.perf_counter()
                async with engine.begin() as conn:
                    await record_api_event(conn, f"s3://x/{i}", {}, created_by="t", now=SystemClock().now())
                outside.append(await _until_runs(engine, f"c{i}", started))
            produced: list[float] = []
            for i in range(SAMPLES):
                await apply(engine, {"dag_id": f"p{i}", "tasks": [container("p", produces=[f"s3://y/{i}"])]})
                await apply(engine, {"dag_id": f"q{i}", "schedule": {"datasets": {"all": [f"s3://y/{i}"]}},
                                     "tasks": [container("r")]})
                await trigger(engine, f"p{i}")
                started = time.perf_counter()  # the memory executor ends the try at once ("instant")
                produced.append(await _until_runs(engine, f"q{i}", started))
            return outside, produced

    outside, produced = asyncio.run(main())
    for name, samples in (("outside event -> run", outside), ("trigger of producer -> consumer run", produced)):
        ordered = sorted(samples)
        print(f"\n{name}: p50 {ordered[len(ordered) // 2] * 1000:.1f} ms, max {ordered[-1] * 1000:.1f} ms")
    assert max(outside) < 2.0 and max(produced) < 4.0
