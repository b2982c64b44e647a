"""Outputs of a local try reported by the replica that ran it, after it lost leadership.

``try_outcomes.outputs`` carries what the process wrote, byte for byte — invalid UTF-8 and NUL
included, which PostgreSQL's ``text`` cannot hold as such — so the next leader's check sees what
the task wrote (and refuses it with the same reason the first leader would have given).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.db.stores import try_outcomes
from leoflow.executor.local.executor import LocalExecutor
from leoflow.executor.local.outcomes import report_once
from leoflow.executor.local.process import TryFiles
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.executor.test_local_outage import heartbeat, replica
from tests.executor.world import Recorder, run_with_term, seed_tries, set_term

#: Valid JSON, then a byte that is not UTF-8 and a NUL (printf's octal escapes).
SCRIPT = """printf '{"uri": "s3://b/p0"}\\377\\000' > "$LEOFLOW_OUTPUTS"; sleep 1"""
WRITTEN = b'{"uri": "s3://b/p0"}\xff\x00'


def test_the_outcome_row_carries_the_outputs_byte_for_byte(settings: Settings, tmp_path: Path) -> None:
    a = replica(settings, "a", tmp_path / "host-a")
    b = replica(settings, "b", tmp_path / "host-b")

    async def body(engine: AsyncEngine) -> None:
        (seeded,) = await seed_tries(engine, 1)
        await heartbeat(engine, "a")
        rec_a = Recorder(engine)
        ex_a = LocalExecutor(a, kill_grace=2.0)
        await ex_a.start(LeaderContext(1, a, Database(engine)), rec_a)
        await ex_a.submit(seeded.launch(["sh", "-c", SCRIPT], term=1, outputs_declared=True))
        await rec_a.wait_for(lambda: "running" in rec_a.states(seeded.key), what="a's process running")
        await ex_a.stop()  # 'a' loses leadership while its process runs
        files = TryFiles(a.home, try_name("default", seeded.key))
        await rec_a.wait_for(lambda: files.read_outcome() is not None, what="the process ended on a's host")
        assert files.read_outputs() == WRITTEN

        await set_term(engine, "default", 2, "b")
        rec_b = Recorder(engine)
        rec_b.track([seeded])
        ex_b = LocalExecutor(b, kill_grace=2.0)
        await ex_b.start(LeaderContext(2, b, Database(engine)), rec_b)
        assert await report_once(a, Database(engine)) == [files.root.name]
        async with engine.connect() as conn:
            reported = await try_outcomes.reported_outcome(conn, seeded.task_try_id)
        assert reported is not None and reported.outputs == WRITTEN
        final = await rec_b.wait_final(seeded.key, timeout=15)
        assert (final.state, final.outputs) == ("success", WRITTEN)
        await ex_b.stop()

    run_with_term(a, body, pool_size=4)


def test_the_stored_form_round_trips_any_bytes() -> None:
    for raw in (b"", WRITTEN, "é ✓".encode(), bytes(range(256)), b"\xed\xa0\x80"):
        stored = try_outcomes.outputs_text(raw)
        assert stored.isascii() and "\x00" not in stored
        assert try_outcomes.outputs_bytes(stored) == raw
