"""ADR 0013: every path that meets a queued try copes with its row not written yet.

The statements that queue a task no longer write its try's row (since step 2); step-1 code still
did. So each scenario here runs twice on one database, once with the rows written in the
transaction that queued (:func:`queued_rows`, as step-1 code wrote them) and once as this code
queues, and the two must
end the same: the same task states, the same tries as the API lists them, the same launches and
kills, the same claims as the executor sees them — and, with or without the row, a try's row has
the id its launch carried.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st_
from sqlalchemy import text

from leoflow.db import migrations, queued_tries
from leoflow.db.stores import task_logs as log_store
from leoflow.db.stores import tries as try_store
from leoflow.db.stores.runs import lifecycle as run_store
from leoflow.db.stores.task_instances import reads as ti_reads
from leoflow.errors import Conflict
from leoflow.executor.naming import try_name
from leoflow.model.tries import TaskLaunch
from leoflow.settings import Settings
from tests.scheduler.harness import rows
from tests.scheduler.stepper import Stepper, container, stepper
from tests.scheduler.test_commands import command, started

TASKS = ("a", "b", "c")

Op = tuple[Any, ...]


#: What step-1 code's queueing statements inserted besides queueing: the row of every try queued
#: without one, from its task instance (the id drawn when queued, the term, the time).
STEP1_ROWS = f"""
    INSERT INTO task_tries (id, task_instance_id, try_number, state, term, queued_at)
    SELECT ti.queued_try_id, ti.id, ti.try_number, 'queued', ti.term, ti.queued_at
    FROM task_instances ti WHERE {queued_tries.implicit_try_sql('ti')}"""


@contextlib.contextmanager
def queued_rows(st: Stepper, written: bool) -> Iterator[None]:
    """With ``written``, every fenced step of ``st``'s scheduler writes the rows of the tries it
    queued before it commits, as step-1 code did; without, the scheduler runs as it is."""
    if not written:
        yield
        return
    db = st.core.ctx.db
    fenced = db.fenced

    @contextlib.asynccontextmanager
    async def with_rows(cluster: str, term: int) -> AsyncIterator[Any]:
        async with fenced(cluster, term) as conn:
            yield conn
            await conn.execute(text(STEP1_ROWS))

    db.fenced = with_rows  # type: ignore[method-assign]
    try:
        yield
    finally:
        del db.fenced


def spec(dag_id: str) -> dict[str, Any]:
    """a → b, a → c; ``a`` may retry once at once."""
    return {"dag_id": dag_id, "tasks": [container("a", retries=1, retry_delay_seconds=0), container("b", "a"),
                                        container("c", "a")]}


def latest(st: Stepper, dag_id: str, run_id: str, task: str) -> TaskLaunch | None:
    mine = [x for x in st.executor.launched if (x.key.dag_id, x.key.run_id, x.key.task_id) == (dag_id, run_id, task)]
    return max(mine, key=lambda x: x.key.try_number) if mine else None


async def play(st: Stepper, dag_id: str, ops: list[Op]) -> dict[str, Any]:
    """Run ``ops`` on a fresh run of ``dag_id``; what an operator and the executor would see."""
    run_id = await started(st, spec(dag_id))
    seen: list[Any] = []
    for op in ops:
        kind = op[0]
        launched = kind in ("claim", "local_claim", "running", "end")
        launch = latest(st, dag_id, run_id, op[1]) if launched else None
        if launched and launch is None:
            seen.append((kind, "never launched"))
            continue
        if kind == "claim":
            assert launch is not None
            async with st.engine.begin() as conn:
                claims = await try_store.record_launches(
                    conn, cluster="default", term=1, node_id="n1",
                    launches=[(launch.task_try_id, try_name("default", launch.key), launch.key)])
            claim = claims.get(launch.task_try_id)
            seen.append((kind, op[1], launch.key.try_number,
                         None if claim is None else (claim.was_claimed, claim.state)))
        elif kind == "local_claim":  # the local executor claims one try before it spawns it
            assert launch is not None
            async with st.engine.begin() as conn:
                claimed = await try_store.claim_try(
                    conn, cluster="default", term=1, task_try_id=launch.task_try_id, key=launch.key,
                    executor_ref=try_name("default", launch.key), node_id="n1")
            seen.append((kind, op[1], launch.key.try_number, claimed))
        elif kind == "running":
            assert launch is not None
            st.report(launch.key, "running")
        elif kind == "end":
            assert launch is not None
            st.report(launch.key, op[2], exit_code=0 if op[2] == "success" else 1)
        elif kind == "cancel":
            try:
                async with st.engine.begin() as conn:
                    await run_store.cancel_run(conn, dag_id, run_id)
                seen.append((kind, "cancelled"))
            except Conflict:
                seen.append((kind, "already ended"))
        elif kind == "clear":
            answer = await command(st, run_id, "clear", {"tasks": [op[1]]})
            seen.append((kind, answer.get("error"), answer.get("tasks")))
        elif kind == "mark_run":
            answer = await command(st, run_id, "mark_run", {"state": op[1]})
            seen.append((kind, answer.get("error")))
        elif kind == "resubmit":  # a failover: the new leader hands every queued try over again
            before = len(st.executor.launched)
            await st.core.resubmit_queued()
            seen.append((kind, sorted((x.key.task_id, x.key.try_number) for x in st.executor.launched[before:]
                                      if x.key.dag_id == dag_id)))
        elif kind == "tick":
            await st.tick(periodic=True)
        await kills_done(st)
    await st.tick(periodic=True)
    await kills_done(st)
    return {"seen": seen, "run": await st.run(run_id), "tasks": await view(st, dag_id, run_id),
            "launched": sorted((x.key.task_id, x.key.try_number) for x in st.executor.launched
                               if x.key.dag_id == dag_id),
            "killed": sorted((k.task_id, k.try_number) for k in st.executor.cancelled if k.dag_id == dag_id),
            "ids": await ids_agree(st, dag_id)}


async def kills_done(st: Stepper) -> None:
    """Wait for the kills a tick started (they run beside the loop): each op then meets the same
    state in both runs, whatever the timing."""
    for _ in range(200):
        if not st.core.kills.killing:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"kills still running: {list(st.core.kills.killing)}")


async def view(st: Stepper, dag_id: str, run_id: str) -> dict[str, Any]:
    """Each task as the API shows it: state, try number, and its tries (number, state, has a log)."""
    [(run_pk,)] = await rows(st.engine, "SELECT id FROM dag_runs WHERE dag_id = :d AND run_id = :r", d=dag_id, r=run_id)
    shown: dict[str, Any] = {}
    async with st.engine.connect() as conn:
        for task in TASKS:
            ti = await ti_reads.get_task_instance(conn, run_pk, task)
            assert ti is not None
            newest = await log_store.get_task_log(conn, ti, None)
            shown[task] = (ti["state"], ti["try_number"], [(t["try_number"], t["state"]) for t in ti["tries"]],
                           None if newest is None else (newest["try_number"], newest["state"]))
    return shown


async def ids_agree(st: Stepper, dag_id: str) -> bool:
    """Every try row has the id that the launches of its try carried (resubmissions included)."""
    for launch in st.executor.launched:
        if launch.key.dag_id != dag_id:
            continue
        found = await rows(st.engine, """
            SELECT tt.id FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id
            JOIN dag_runs r ON r.id = ti.run_pk
            WHERE r.dag_id = :d AND ti.task_id = :t AND tt.try_number = :n
        """, d=dag_id, t=launch.key.task_id, n=launch.key.try_number)
        if found and found[0][0] != launch.task_try_id:
            return False
    return True


async def both_ways(settings: Settings, ops: list[Op], name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    async with stepper(settings) as st:
        with queued_rows(st, True):
            written = await play(st, f"{name}-rows", ops)
    async with stepper(settings) as st:
        with queued_rows(st, False):
            implicit = await play(st, f"{name}-implicit", ops)
    return written, implicit


T: Op = ("tick",)
SCENARIOS: dict[str, list[Op]] = {
    "success": [("claim", "a"), ("running", "a"), ("end", "a", "success"), T, ("claim", "b"), ("end", "b", "success"),
                ("end", "c", "success"), T],
    "retry then success": [("end", "a", "failed"), T, T, ("claim", "a"), ("end", "a", "success"), T,
                           ("end", "b", "success"), ("end", "c", "success"), T],
    "cancel before the claim": [("cancel",), ("claim", "a"), T],
    "cancel after the claim": [("claim", "a"), ("cancel",), T, ("end", "a", "failed"), T],
    "cancel while queued, no claim": [("end", "a", "success"), T, ("cancel",), T],
    "clear a queued try": [("clear", "a"), ("claim", "a"), ("end", "a", "success"), T],
    "mark the run while queued": [("mark_run", "failed"), ("claim", "a"), T],
    "local claims": [("local_claim", "a"), ("local_claim", "a"), ("end", "a", "failed"), T, T,
                     ("local_claim", "a"), ("end", "a", "success"), T, ("cancel",), ("local_claim", "b"), T],
    "failover resubmits queued tries": [("resubmit",), ("claim", "a"), ("resubmit",), ("end", "a", "success"), T,
                                        ("resubmit",)],
}


def test_every_scenario_ends_the_same_with_or_without_the_queued_rows(settings: Settings) -> None:
    async def main() -> None:
        for n, (name, ops) in enumerate(SCENARIOS.items()):
            written, implicit = await both_ways(settings, ops, f"s{n}")
            assert written["ids"] and implicit["ids"], name
            assert written == implicit, name

    asyncio.run(main())


def test_the_scenarios_exercise_what_they_name(settings: Settings) -> None:
    """A guard on the equivalence test above: its scenarios reach the paths ADR 0013 changes."""
    async def main() -> None:
        _, implicit = await both_ways(settings, SCENARIOS["cancel before the claim"], "g1")
        assert implicit["seen"][1] == ("claim", "a", 1, (False, "cancelling"))  # the cancel wrote the row
        assert implicit["tasks"]["a"][2] == [(1, "cancelled")]
        assert implicit["killed"] == [("a", 1)]
        _, implicit = await both_ways(settings, SCENARIOS["success"], "g2")
        assert implicit["seen"][0] == ("claim", "a", 1, (False, "queued"))  # the claim wrote the row
        _, implicit = await both_ways(settings, SCENARIOS["local claims"], "g4")
        assert implicit["seen"][:2] == [("local_claim", "a", 1, True), ("local_claim", "a", 1, False)]
        assert implicit["seen"][2] == ("local_claim", "a", 2, True)  # the retry's row, written by its claim
        _, implicit = await both_ways(settings, [], "g3")  # a queued try the API shows from its task
        assert implicit["tasks"]["a"] == ("queued", 1, [(1, "queued")], (1, "queued"))
        rows_now = await rows_of(settings, "g3-implicit")
        assert rows_now == [], "with the flag off, queueing wrote a row"
        assert await rows_of(settings, "g3-rows") == [("a", 1, "queued")]

    asyncio.run(main())


async def rows_of(settings: Settings, dag_id: str) -> list[tuple[Any, ...]]:
    """The try rows of ``dag_id``'s runs: (task, try number, state)."""
    return await rows_at(settings, """
        SELECT ti.task_id, tt.try_number, tt.state FROM task_tries tt
        JOIN task_instances ti ON ti.id = tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk
        WHERE r.dag_id = :d ORDER BY 1, 2""", d=dag_id)


async def rows_at(settings: Settings, sql: str, **params: Any) -> list[tuple[Any, ...]]:
    async with stepper(settings) as st:
        return [tuple(r) for r in await rows(st.engine, sql, **params)]


_OPS = st_.one_of(
    st_.tuples(st_.just("claim"), st_.sampled_from(TASKS)),
    st_.tuples(st_.just("local_claim"), st_.sampled_from(TASKS)),
    st_.tuples(st_.just("running"), st_.sampled_from(TASKS)),
    st_.tuples(st_.just("end"), st_.sampled_from(TASKS), st_.sampled_from(["success", "failed"])),
    st_.tuples(st_.just("cancel")),
    st_.tuples(st_.just("clear"), st_.sampled_from(TASKS)),
    st_.tuples(st_.just("mark_run"), st_.sampled_from(["success", "failed"])),
    st_.tuples(st_.just("resubmit")),
    st_.just(("tick",)),
)


def test_any_sequence_ends_the_same_with_or_without_the_queued_rows(settings: Settings) -> None:
    """Hypothesis draws what the executor, operators and failovers do, in any order."""
    counter = iter(range(10**6))

    @hsettings(max_examples=25, deadline=None, derandomize=True,
               suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(st_.lists(_OPS, max_size=10))
    def check(ops: list[Op]) -> None:
        written, implicit = asyncio.run(both_ways(settings, ops, f"h{next(counter)}"))
        assert written["ids"] and implicit["ids"], ops
        assert written == implicit, ops

    check()


def test_a_claim_racing_a_cancel_on_a_queued_try_without_its_row_flags_it(settings: Settings) -> None:
    """The cancel and the claim each write the missing row; whichever commits second must still see
    the first's: a claimed row is flagged ``cancelling``, a cancelled one is claimed as such."""
    async def main() -> None:
        for first in ("claim", "cancel"):
            found, claims, launch = await race(settings, first)
            assert found == [(launch.task_try_id, "cancelling", True, "pod-a")], first
            assert claims[launch.task_try_id].state == ("queued" if first == "claim" else "cancelling"), first

    asyncio.run(main())


async def race(settings: Settings, first: str) -> tuple[list[Any], dict[int, Any], TaskLaunch]:
    """A claim and a cancel of the queued try of ``race-<first>``'s task ``a``, ``first`` first, each
    in its own transaction; returns the try rows, the claim's answer and the launch."""
    async with stepper(settings) as st:
        with queued_rows(st, False):
            dag_id = f"race-{first}"
            run_id = await started(st, spec(dag_id))
        launch = latest(st, dag_id, run_id, "a")
        assert launch is not None
        claims: dict[int, Any] = {}
        async with st.engine.connect() as claim_conn, st.engine.connect() as cancel_conn:
            await claim_conn.begin()
            await cancel_conn.begin()

            async def claim() -> None:
                claims.update(await try_store.record_launches(
                    claim_conn, cluster="default", term=1, node_id="n1",
                    launches=[(launch.task_try_id, "pod-a", launch.key)]))

            async def cancel() -> None:
                await run_store.cancel_run(cancel_conn, dag_id, run_id)

            (one, conn_one), (two, conn_two) = sorted(
                [(claim, claim_conn), (cancel, cancel_conn)], key=lambda pair: pair[0].__name__ != first)
            await one()
            # The second statement's snapshot shows no row (the first's is not committed): it inserts
            # one too, and waits on the first's in the unique index until that commits.
            second = asyncio.ensure_future(two())
            await asyncio.sleep(0.3)
            assert not second.done(), "the second writer did not wait for the first's row"
            await conn_one.commit()
            await second
            await conn_two.commit()
        found = await rows(st.engine, """
            SELECT tt.id, tt.state, tt.claimed_by IS NOT NULL, tt.executor_ref FROM task_tries tt
            JOIN task_instances ti ON ti.id = tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk
            WHERE r.dag_id = :d""", d=dag_id)
        return [tuple(r) for r in found], claims, launch


def test_a_report_about_a_try_that_never_was_writes_no_row(settings: Settings) -> None:
    """A report's try number is the executor's word: one the task instance never had (a stray pod, a
    bug) changes nothing, and must not become a try row now that reports may write the first one."""
    async def main() -> None:
        for written in (True, False):
            async with stepper(settings) as st:
                with queued_rows(st, written):
                    dag_id = f"stray-{str(written).lower()}"
                    run_id = await started(st, spec(dag_id))
                    key = st.key(dag_id, run_id, "a")
                    st.report(key._replace(try_number=7), "failed", exit_code=1)
                    st.report(key._replace(task_id="b", try_number=1), "success", exit_code=0)  # b is pending
                    await st.tick(periodic=True)
                assert await rows_of(settings, dag_id) == ([("a", 1, "queued")] if written else []), written
                assert (await st.tasks(run_id))["a"][0] == "queued"

    asyncio.run(main())


def test_a_downgrade_below_0011_writes_the_rows_older_code_reads(settings: Settings) -> None:
    """Revision 0011 declares only code at 0010 compatible; its downgrade hands the schema back to
    code that reads only rows, so every implicit try gets the row (with its launch's id) first."""
    url = settings.require_database_url()

    async def queue() -> int:
        async with stepper(settings) as st:
            launch = latest(st, "down", await started(st, spec("down")), "a")
            assert launch is not None
            return launch.task_try_id

    try_id = asyncio.run(queue())
    assert asyncio.run(rows_of(settings, "down")) == []
    migrations.downgrade(url, "0010")
    assert asyncio.run(rows_of(settings, "down")) == [("a", 1, "queued")]
    [(found,)] = asyncio.run(rows_at(settings, "SELECT id FROM task_tries"))
    assert found == try_id
    migrations.upgrade(url)  # and back: nothing to change, the row stays
    assert asyncio.run(rows_of(settings, "down")) == [("a", 1, "queued")]
    assert asyncio.run(rows_at(settings, "SELECT version_num FROM alembic_version")) == [(migrations.head_revision(),)]
