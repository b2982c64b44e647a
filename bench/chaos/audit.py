"""A commit-ordered audit of term-carrying writes, installed by the soak into its own database.

Why: the tables keep only each row's *latest* term and timestamp, and some later writes (the
API's cancel, the scheduler's upstream counter) touch a row without changing its term, so the
final rows cannot prove that no stale term ever committed a write. This module adds, to the
soak's private database only, an append-only ``chaos_audit`` table filled by triggers:

- every new fencing term (``INSERT`` into ``leader_terms``);
- every ``INSERT`` into, and every ``UPDATE`` that *sets* the term column of, ``dag_runs``,
  ``task_instances`` and ``task_tries`` (the scheduler's and executor's scheduling writes).

An audit row is written inside the audited transaction, so it exists iff that transaction
committed, and with ``track_commit_timestamp = on`` its ``xmin`` gives the commit time. A write
of term T is **stale** iff some term T' > T committed before it did. The check is exact: no
clocks of different processes are compared.

**Whose term.** A write's term is its transaction's fence (``leoflow.fenced_term``, set by
:mod:`leoflow.db.connection.fencing`), and the row's ``term`` only for an unfenced write. They differ since
ADR 0013 step 2: a queued try's row is first written by the executor's claim, a report or a
cancellation, perhaps under a later term than the one that queued it, and the row keeps the
queueing term. The one unfenced writer of such rows is a user's run cancel through the API, which
writes them ``cancelled``; like its updates of existing rows, it is no scheduling write and is
not judged.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import Any

import psycopg

from leoflow.db.connection.fencing import FENCED_TERM_SETTING

ENABLE_COMMIT_TIMESTAMPS = "ALTER SYSTEM SET track_commit_timestamp = on"

INSTALL = f"""
CREATE TABLE IF NOT EXISTS chaos_audit (
    id bigserial PRIMARY KEY,
    tbl text NOT NULL,
    row_id bigint NOT NULL,
    op text NOT NULL,
    term bigint,
    old_term bigint,
    state text,
    fenced_term bigint DEFAULT nullif(current_setting('{FENCED_TERM_SETTING}', true), '')::bigint,
    app text DEFAULT current_setting('application_name'),
    backend_pid int DEFAULT pg_backend_pid(),
    ts timestamptz DEFAULT clock_timestamp()
);

CREATE OR REPLACE FUNCTION chaos_audit_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO chaos_audit (tbl, row_id, op, term, state)
        VALUES (TG_TABLE_NAME, NEW.id, 'insert', NEW.term, to_jsonb(NEW)->>'state');
    ELSIF NEW.term IS DISTINCT FROM OLD.term THEN
        INSERT INTO chaos_audit (tbl, row_id, op, term, old_term, state)
        VALUES (TG_TABLE_NAME, NEW.id, 'update', NEW.term, OLD.term, to_jsonb(NEW)->>'state');
    END IF;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION chaos_audit_term() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO chaos_audit (tbl, row_id, op, term, state)
    VALUES ('leader_terms', NEW.term, 'insert', NEW.term, NEW.node_id);
    RETURN NULL;
END $$;

DROP TRIGGER IF EXISTS chaos_audit ON dag_runs;
DROP TRIGGER IF EXISTS chaos_audit ON task_instances;
DROP TRIGGER IF EXISTS chaos_audit ON task_tries;
DROP TRIGGER IF EXISTS chaos_audit ON leader_terms;
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE ON dag_runs FOR EACH ROW EXECUTE FUNCTION chaos_audit_write();
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE ON task_instances FOR EACH ROW EXECUTE FUNCTION chaos_audit_write();
CREATE TRIGGER chaos_audit AFTER INSERT OR UPDATE ON task_tries FOR EACH ROW EXECUTE FUNCTION chaos_audit_write();
CREATE TRIGGER chaos_audit AFTER INSERT ON leader_terms FOR EACH ROW EXECUTE FUNCTION chaos_audit_term();
"""

#: The judged writes, each with the term it acted under (see the module's docstring).
_ACTS = """
    SELECT a.*, coalesce(a.fenced_term, a.term) AS acting_term, pg_xact_commit_timestamp(a.xmin) AS committed
    FROM chaos_audit a
    WHERE a.tbl <> 'leader_terms' AND coalesce(a.fenced_term, a.term) IS NOT NULL
      AND NOT (a.fenced_term IS NULL AND a.tbl = 'task_tries' AND a.op = 'insert' AND a.state = 'cancelled')
"""

#: Writes that committed after a term newer than the one they acted under had committed.
STALE_WRITES = f"""
WITH acts AS ({_ACTS}), terms AS (
    SELECT term, pg_xact_commit_timestamp(xmin) AS committed FROM chaos_audit WHERE tbl = 'leader_terms'
)
SELECT w.tbl, w.row_id, w.op, w.acting_term, w.term, w.state, w.app, extract(epoch FROM w.committed)::float8,
       (SELECT max(t.term) FROM terms t WHERE t.committed < w.committed) AS newest
FROM acts w
WHERE EXISTS (SELECT 1 FROM terms t WHERE t.term > w.acting_term AND t.committed < w.committed)
ORDER BY w.id
"""

#: Rows written under a later term than the one in their ``term`` column (ADR 0013 step 2).
LATER_WRITERS = "SELECT count(*) FROM chaos_audit WHERE fenced_term > term"

#: (term, node, commit time as epoch seconds) of every term, in commit order.
TERM_COMMITS = """
SELECT term, state AS node_id, extract(epoch FROM pg_xact_commit_timestamp(xmin))::float8
FROM chaos_audit WHERE tbl = 'leader_terms' ORDER BY pg_xact_commit_timestamp(xmin), term
"""


def term_acts(conn: psycopg.Connection[Any]) -> list[tuple[int, float]]:
    """(term, commit time) of every audited term-carrying write."""
    rows = conn.execute(f"SELECT acting_term, extract(epoch FROM committed)::float8 FROM ({_ACTS}) acts").fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def enable_commit_timestamps(conn: psycopg.Connection[Any]) -> None:
    """Needs a server restart to take effect."""
    conn.execute(ENABLE_COMMIT_TIMESTAMPS)


def install(conn: psycopg.Connection[Any]) -> None:
    conn.execute(INSTALL)
    row = conn.execute("SHOW track_commit_timestamp").fetchone()
    if not row or row[0] != "on":
        raise RuntimeError("track_commit_timestamp is off: restart PostgreSQL after enable_commit_timestamps()")


def stale_writes(conn: psycopg.Connection[Any]) -> list[dict[str, Any]]:
    keys = ("table", "row_id", "op", "acting_term", "row_term", "state", "app", "committed", "newest_term_then")
    return [dict(zip(keys, row, strict=True)) for row in conn.execute(STALE_WRITES).fetchall()]


def term_commits(conn: psycopg.Connection[Any]) -> list[tuple[int, str, float]]:
    return [(int(r[0]), str(r[1]), float(r[2])) for r in conn.execute(TERM_COMMITS).fetchall()]


def later_writers(conn: psycopg.Connection[Any]) -> int:
    """Audited writes whose row carries an older term than the fence they were made under."""
    row = conn.execute(LATER_WRITERS).fetchone()
    return int(row[0]) if row else 0


def audited_writes(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM chaos_audit WHERE tbl <> 'leader_terms'").fetchone()
    return int(row[0]) if row else 0


# --------------------------------------------------------------------------- the log archive

#: Checksummed lines each layered task of the workload prints (after its hello line).
PRINTED_LINES = 12
#: What a flaky task's first try prints last (the soak's Kubernetes hook rewrites its marker to this).
FAILING_BY_DESIGN = "failing try 1 by design"


def printed_lines(dag_id: str, task_id: str) -> list[str]:
    """The lines a layered task prints, each carrying the CRC-32 of what precedes it on the line.

    Known in advance, so the audit compares an archived log with what the task printed, not with
    another copy the same code made (the PostgreSQL tail comes from the same pod log).
    """
    lines = [f"{dag_id} {task_id} says hello"]
    for i in range(1, PRINTED_LINES + 1):
        body = f"{dag_id} {task_id} line {i:03d}"
        lines.append(f"{body} crc={zlib.crc32(body.encode()):08x}")
    return lines


def checksum_ok(line: str) -> bool:
    """A printed line whose checksum does not match was corrupted on the way (lines without one pass)."""
    body, sep, crc = line.rpartition(" crc=")
    return not sep or crc == f"{zlib.crc32(body.encode()):08x}"


_ARCHIVED_TRIES = """
SELECT tt.id, r.dag_id, ti.task_id, tt.try_number, tt.state, tl.content, tl.truncated,
       la.size_bytes, la.chunks, la.complete
FROM task_tries tt JOIN task_instances ti ON ti.id = tt.task_instance_id JOIN dag_runs r ON r.id = ti.run_pk
LEFT JOIN task_logs tl ON tl.task_try_id = tt.id
LEFT JOIN log_archives la ON la.task_try_id = tt.id AND la.container = 'task'
WHERE tt.executor_ref IS NOT NULL AND tt.ended_at IS NOT NULL AND tt.state IN ('success', 'failed')
ORDER BY tt.id
"""
_CHUNKS = """SELECT start_offset, end_offset, object_key FROM log_archive_chunks
             WHERE task_try_id = %s AND container = 'task' ORDER BY start_offset"""
#: The tail the executor stores when the container never started: nothing was printed to archive.
NEVER_STARTED = "[leoflow] no logs:"


def archived_bytes(conn: psycopg.Connection[Any], archive_root: Path, task_try_id: int,
                   size: int, chunks: int) -> tuple[bytes | None, str | None]:
    """The try's archived ``task`` log read object by object as a reader would, or the defect found:
    a gap or overlap between chunks, an index that disagrees with its chunks, or an object that is
    missing or does not hold exactly its chunk's bytes (a half object taken for a whole)."""
    parts, at = [], 0
    rows = conn.execute(_CHUNKS, (task_try_id,)).fetchall()
    for start, end, key in rows:
        if start != at:
            return None, f"{'gap' if start > at else 'overlap'} at byte {at} (next chunk starts at {start})"
        try:
            data = zlib.decompress((archive_root / key).read_bytes(), zlib.MAX_WBITS | 16)
        except (OSError, zlib.error) as exc:
            return None, f"object {key} unreadable: {exc}"
        if len(data) != end - start:
            return None, f"object {key} holds {len(data)} bytes, its chunk {end - start}"
        parts.append(data)
        at = end
    if at != size or len(rows) != chunks:
        return None, f"index says {size} bytes in {chunks} chunks, its chunks hold {at} in {len(rows)}"
    return b"".join(parts), None


def archive_audit(conn: psycopg.Connection[Any], archive_root: Path,
                  layered: dict[tuple[str, str], bool]) -> dict[str, Any]:
    """Every finished try's archived ``task`` log against what the task printed.

    ``layered`` maps (dag, task) of the workload's checksummed tasks to whether the task is flaky
    by design. Such a try's archive must be complete and equal its :func:`printed_lines` exactly
    (plus :data:`FAILING_BY_DESIGN` on a flaky task's first try); every other finished try's must
    be complete, whole, and equal the tail in PostgreSQL when that tail is the whole output.
    """
    checked, compared_with_tail, never_started = 0, 0, 0
    problems: list[dict[str, Any]] = []
    for tid, dag, task, try_number, state, tail, truncated, size, chunks, complete in conn.execute(_ARCHIVED_TRIES):
        name = f"{dag}.{task}#{try_number}"
        if size is None:
            if tail is not None and tail.startswith(NEVER_STARTED):
                never_started += 1
            else:
                problems.append({"try": name, "problem": "no archive"})
            continue
        if not complete:
            problems.append({"try": name, "problem": f"incomplete at {size} bytes"})
            continue
        data, defect = archived_bytes(conn, archive_root, tid, size, chunks)
        if defect is not None or data is None:
            problems.append({"try": name, "problem": defect})
            continue
        text = data.decode(errors="replace")
        bad = [line for line in text.splitlines() if not checksum_ok(line)]
        if bad:
            problems.append({"try": name, "problem": "checksum mismatch", "line": bad[0][:200]})
            continue
        if (dag, task) in layered:
            lines = printed_lines(dag, task)
            if layered[(dag, task)] and try_number == 1 and state == "failed":
                lines.append(FAILING_BY_DESIGN)
            expected = "".join(f"{line}\n" for line in lines)
            checked += 1
        elif tail is not None and not truncated:
            expected = tail
            compared_with_tail += 1
        else:
            continue
        if text != expected:
            problems.append({"try": name, "problem": "differs from what the task printed",
                             "archived": text[:300], "printed": expected[:300]})
    return {"checksummed_tries": checked, "compared_with_tail": compared_with_tail,
            "never_started": never_started, "problems": problems[:20], "problem_count": len(problems)}
