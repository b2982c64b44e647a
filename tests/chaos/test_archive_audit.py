"""The soak's log-archive audit catches what it claims to: a gap, an overlap, a missing or half
object, an incomplete archive, a changed or duplicated line — and passes a log archived whole.

The archive is written by the real archiver (small chunks, so a log spans several objects) into a
``file://`` directory, indexed in a real PostgreSQL; each defect is then made by hand.
"""

from __future__ import annotations

import asyncio
import sys
import zlib
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.executor.log_archive import LogArchiver
from leoflow.settings import Settings
from leoflow.storage.objects import ObjectStore
from tests.executor.world import run_with_term, seed_tries

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.chaos import audit  # noqa: E402

DAG, TASK = "etl", "task0"


def archive_printed(settings: Settings, root: Path, tmp_path: Path, lines: list[str], *, state: str = "success",
                    try_number: int = 1) -> int:
    """A finished try of DAG.TASK whose pod printed ``lines``, archived in 64-byte chunks; its id."""
    log = tmp_path / f"printed-{try_number}.log"
    log.write_text("".join(f"{line}\n" for line in lines))
    found: list[int] = []

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1, try_number=try_number)
        async with engine.begin() as conn:
            await conn.execute(text("UPDATE task_tries SET state = :s, ended_at = now(), executor_ref = :p "
                                    "WHERE id = :id"), {"s": state, "p": f"pod-{t.task_try_id}", "id": t.task_try_id})
        done = asyncio.Event()
        done.set()
        await LogArchiver(ObjectStore(root.as_uri()), Database(engine), "default", chunk_bytes=64).follow_file(
            t.task_try_id, "task", log, done)
        found.append(t.task_try_id)

    run_with_term(settings, body, pool_size=2)
    return found[0]


def audit_of(database_url: str, root: Path, *, flaky: bool = False) -> dict[str, Any]:
    with psycopg.connect(database_url) as conn:
        return audit.archive_audit(conn, root, {(DAG, TASK): flaky})


def chunk_keys(database_url: str, task_try_id: int) -> list[tuple[int, str]]:
    with psycopg.connect(database_url) as conn:
        return [(r[0], r[1]) for r in conn.execute(
            "SELECT start_offset, object_key FROM log_archive_chunks WHERE task_try_id = %s ORDER BY start_offset",
            (task_try_id,))]


def test_a_log_archived_whole_passes_and_its_lines_carry_checksums(settings: Settings, database_url: str,
                                                                   tmp_path: Path) -> None:
    root = tmp_path / "archive"
    lines = audit.printed_lines(DAG, TASK)
    assert all(audit.checksum_ok(line) for line in lines)
    assert not audit.checksum_ok(lines[1].replace("line 001", "line 002"))
    tid = archive_printed(settings, root, tmp_path, lines)
    assert len(chunk_keys(database_url, tid)) > 5  # the log spans many objects
    found = audit_of(database_url, root)
    assert found["problem_count"] == 0 and found["checksummed_tries"] == 1, found


def test_a_flaky_first_try_is_expected_to_say_so(settings: Settings, database_url: str, tmp_path: Path) -> None:
    root = tmp_path / "archive"
    archive_printed(settings, root, tmp_path, [*audit.printed_lines(DAG, TASK), audit.FAILING_BY_DESIGN],
                    state="failed")
    assert audit_of(database_url, root, flaky=True)["problem_count"] == 0
    assert audit_of(database_url, root, flaky=False)["problems"][0]["problem"] == "differs from what the task printed"


def test_each_defect_is_named(settings: Settings, database_url: str, tmp_path: Path) -> None:
    root = tmp_path / "archive"
    tid = archive_printed(settings, root, tmp_path, audit.printed_lines(DAG, TASK))
    keys = chunk_keys(database_url, tid)

    def problem() -> str:
        found = audit_of(database_url, root)
        assert found["problem_count"] == 1, found
        return str(found["problems"][0]["problem"])

    # A half object (an upload cut short but indexed): the object holds fewer bytes than its chunk.
    second = root / keys[1][1]
    whole = second.read_bytes()
    raw = zlib.decompress(whole, zlib.MAX_WBITS | 16)
    packer = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    second.write_bytes(packer.compress(raw[:-5]) + packer.flush())
    assert "holds" in problem()
    # A changed byte: the line's checksum no longer matches.
    packer = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    second.write_bytes(packer.compress(raw.replace(b"crc=", b"crc=0", 1)[:len(raw)]) + packer.flush())
    assert problem() in ("checksum mismatch", "differs from what the task printed")
    second.write_bytes(whole)
    # A missing object.
    second.rename(second.with_suffix(".gone"))
    assert "unreadable" in problem()
    second.with_suffix(".gone").rename(second)
    assert audit_of(database_url, root)["problem_count"] == 0

    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute("SELECT end_offset, stored_bytes, object_key FROM log_archive_chunks "
                           "WHERE task_try_id = %s AND start_offset = %s", (tid, keys[2][0])).fetchone()
        assert row is not None
        # A gap: a chunk's row gone from the middle of the index.
        conn.execute("DELETE FROM log_archive_chunks WHERE task_try_id = %s AND start_offset = %s", (tid, keys[2][0]))
        assert problem().startswith("gap at byte")
        # An overlap: the same bytes indexed twice (a second writer's row starting inside the first's).
        conn.execute("INSERT INTO log_archive_chunks (task_try_id, container, start_offset, end_offset, stored_bytes, "
                     "object_key) VALUES (%s, 'task', %s, %s, %s, %s)", (tid, keys[2][0] - 3, row[0], row[1], row[2]))
        assert problem().startswith("overlap at byte")
        conn.execute("UPDATE log_archive_chunks SET start_offset = %s WHERE task_try_id = %s AND start_offset = %s",
                     (keys[2][0], tid, keys[2][0] - 3))
        assert audit_of(database_url, root)["problem_count"] == 0
        # Not marked complete: readers would be told the log is still being written.
        conn.execute("UPDATE log_archives SET complete = false WHERE task_try_id = %s", (tid,))
        assert problem().startswith("incomplete")
        # No archive at all for a try that printed something.
        conn.execute("DELETE FROM log_archives WHERE task_try_id = %s", (tid,))
        assert problem() == "no archive"


def test_a_duplicated_line_differs_from_what_was_printed(settings: Settings, database_url: str,
                                                         tmp_path: Path) -> None:
    root = tmp_path / "archive"
    lines = audit.printed_lines(DAG, TASK)
    archive_printed(settings, root, tmp_path, [*lines[:5], lines[4], *lines[5:]])
    found = audit_of(database_url, root)
    assert found["problem_count"] == 1 and found["problems"][0]["problem"] == "differs from what the task printed"
