"""Which Leoflow cluster a database (or schema) belongs to: the ``installation`` row (ADR 0010).

One database — or one schema of it, chosen with ``options=-csearch_path%3D<schema>`` in the URL
— holds exactly one cluster: DAGs, runs and task instances carry no cluster column, so two
clusters on one schema would run each other's work. The first replica of a cluster to start
*claims* the schema (:func:`claim`); every later replica compares its ``LEOFLOW_CLUSTER`` with the
owner and refuses to start on a mismatch (:class:`~leoflow.errors.ClusterMismatch`).

Names stay unique across the schemas of one database, because the election lock and the task
pods' names are derived from the cluster name alone: a claim refuses a name that the
``installation`` row of another schema already holds (:class:`~leoflow.errors.ClusterNameInUse`),
as far as this role may read the other schemas. Claims are serialised database-wide by a
transaction-level advisory lock, so two first replicas starting together cannot both win.

Failure semantics: driver errors propagate (callers translate them); a schema without the
table (not migrated yet) raises ``UndefinedTable``, which callers treat as "not known yet".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

from leoflow.db.connection.connect import connect_sync
from leoflow.db.connection.driver_errors import translated
from leoflow.errors import ClusterMismatch, ClusterNameInUse

#: Advisory lock key (two-int form) serialising claims across the schemas: 'LEOF', 'OWNR'.
CLAIM_LOCK = (0x4C454F46, 0x4F574E52)

_OTHER_INSTALLATIONS = """
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname = 'installation' AND c.relkind = 'r' AND n.nspname <> current_schema()
   AND has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
   AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'cluster' AND NOT a.attisdropped)
   AND EXISTS (SELECT 1 FROM pg_class l WHERE l.relnamespace = n.oid AND l.relname = 'cluster_leadership')
"""

_HISTORY = """
SELECT cluster FROM cluster_leadership UNION SELECT cluster FROM cluster_nodes
"""


@dataclass(frozen=True)
class Ownership:
    """The owner of the current schema; ``claimed`` is True when this call made the claim."""

    cluster: str
    claimed_by: str
    claimed_at: datetime
    schema: str
    claimed: bool = False
    #: Other cluster names found in the schema's history when it was claimed (shared before ADR 0010).
    others_in_history: tuple[str, ...] = field(default=())


def owner(conn: psycopg.Connection[Any]) -> Ownership | None:
    """The current owner, or None while the schema is unclaimed."""
    row = conn.execute("SELECT cluster, claimed_by, claimed_at, current_schema() FROM installation"
                       " WHERE id = 1").fetchone()
    return Ownership(row[0], row[1], row[2], row[3]) if row else None


def claim(conn: psycopg.Connection[Any], cluster: str, node_id: str) -> Ownership:
    """Claim the schema for ``cluster`` if unclaimed; raise unless ``cluster`` owns it now. One transaction."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", CLAIM_LOCK)
        current = owner(conn)
        if current is None:
            for schema in _schemas_using(conn, cluster):
                raise ClusterNameInUse(cluster, schema)
            row = conn.execute(
                "INSERT INTO installation (id, cluster, claimed_by) VALUES (1, %s, %s)"
                " RETURNING cluster, claimed_by, claimed_at, current_schema()", (cluster, node_id[:253])).fetchone()
            assert row is not None
            others = tuple(sorted(r[0] for r in conn.execute(_HISTORY).fetchall() if r[0] != cluster))
            return Ownership(row[0], row[1], row[2], row[3], claimed=True, others_in_history=others)
    if current.cluster != cluster:
        raise ClusterMismatch(cluster, current.cluster, schema=current.schema)
    return current


def _schemas_using(conn: psycopg.Connection[Any], cluster: str) -> list[str]:
    """Other schemas of this database whose installation row names ``cluster``."""
    found = []
    for (schema,) in conn.execute(_OTHER_INSTALLATIONS).fetchall():
        query = sql.SQL("SELECT cluster FROM {}.installation WHERE id = 1").format(sql.Identifier(schema))
        row = conn.execute(query).fetchone()
        if row and row[0] == cluster:
            found.append(str(schema))
    return found


def claim_at_start(database_url: str, cluster: str, node_id: str) -> Ownership:
    """:func:`claim` on a short connection of its own (a process starting); Leoflow errors only."""
    with translated(), connect_sync(database_url, None, application_name=f"leoflow-start:{node_id}") as conn:
        return claim(conn, cluster, node_id)


def owner_of(database_url: str) -> Ownership | None:
    """:func:`owner` on a short connection of its own (``leoflow db current``); Leoflow errors only."""
    with translated(), connect_sync(database_url, None, application_name="leoflow-cli") as conn:
        conn.execute("SET TimeZone = 'UTC'")
        return owner(conn)
