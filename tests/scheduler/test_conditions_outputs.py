"""``when:`` over upstream outputs in the scheduler, one tick at a time on real PostgreSQL.

A condition reads the *current* outputs of the ancestors it names (those of the try that made the
instance ``success``), stored by the step that recorded that success (ADR 0014, decisions 1 and 4).
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from leoflow.model.tries import StatusUpdate
from leoflow.settings import Settings
from tests.scheduler.stepper import stepper
from tests.scheduler.test_conditions import dag, started


def test_a_condition_reads_an_upstreams_current_outputs(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            runs = {}
            for n, conf in ((3, {}), (1, {})):
                runs[n] = await started(st, dag(f"outs-{n}", "tasks.a.outputs.n > 2"), conf)
                key = st.key(f"outs-{n}", runs[n], "a")
                st.core.inbox.append(StatusUpdate(key=key, state="running", at=st.clock.now()))
                st.core.inbox.append(StatusUpdate(key=key, state="success", at=st.clock.now() + timedelta(seconds=1),
                                                  exit_code=0, outputs=f'{{"n": {n}}}'.encode()))
                await st.tick()
            assert (await st.tasks(runs[3]))["b"][0] == "queued"
            assert (await st.tasks(runs[1]))["b"] == ("skipped", "when was false")

    asyncio.run(main())


def test_a_missing_optional_output_names_the_upstream(settings: Settings) -> None:
    async def main() -> None:
        async with stepper(settings) as st:
            run = await started(st, dag("none", "tasks.a.outputs.n > 2"))
            key = st.key("none", run, "a")
            st.core.inbox.append(StatusUpdate(key=key, state="running", at=st.clock.now()))
            st.core.inbox.append(StatusUpdate(key=key, state="success", at=st.clock.now() + timedelta(seconds=1),
                                              exit_code=0, outputs=b"{}"))
            await st.tick()
            assert (await st.tasks(run))["b"] == ("failed", "when failed: no such key: 'n'")

    asyncio.run(main())
