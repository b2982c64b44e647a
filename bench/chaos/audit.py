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
