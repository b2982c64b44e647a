"""The API's view of datasets: each URI with its producers, consumers, last event and queued events.

A URI is listed when a DAG names it (``dataset_references``) or events wait for it
(``dataset_queue``); a URI known only from its history (an outside system reporting a URI no DAG
names) is shown when asked for by name (``?uri=``), because listing every distinct URI of an
append-only history is a scan of the history. Each listed URI costs four index probes.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

_DOCUMENT = """
    SELECT u.uri,
        (SELECT coalesce(json_agg(json_build_object('dag_id', r.dag_id, 'task_id', r.task_id)
                                  ORDER BY r.dag_id, r.task_id), '[]'::json)
         FROM dataset_references r WHERE r.uri = u.uri AND r.role = 'producer') AS producers,
        (SELECT coalesce(json_agg(r.dag_id ORDER BY r.dag_id), '[]'::json)
         FROM dataset_references r WHERE r.uri = u.uri AND r.role = 'consumer') AS consumers,
        (SELECT json_build_object('id', e.id, 'source', e.source, 'dag_id', e.dag_id, 'run_id', e.run_id,
                                  'task_id', e.task_id, 'created_at', e.created_at)
         FROM dataset_events e WHERE e.uri = u.uri ORDER BY e.id DESC LIMIT 1) AS last_event,
        (SELECT coalesce(json_agg(json_build_object('dag_id', q.dag_id, 'events', q.events, 'first_at', q.first_at,
                                                    'last_at', q.last_at) ORDER BY q.dag_id), '[]'::json)
         FROM dataset_queue q WHERE q.uri = u.uri) AS queued
    FROM uris u
    ORDER BY u.uri
"""

_LIST = text("""
    WITH uris AS (
        SELECT uri FROM (
            SELECT uri FROM dataset_references WHERE uri > :after
            UNION SELECT uri FROM dataset_queue WHERE uri > :after
        ) known ORDER BY uri LIMIT :limit
    )""" + _DOCUMENT)

_ONE = text("""
    WITH uris AS (
        SELECT CAST(:uri AS text) AS uri
        WHERE EXISTS (SELECT 1 FROM dataset_references WHERE uri = :uri)
           OR EXISTS (SELECT 1 FROM dataset_queue WHERE uri = :uri)
           OR EXISTS (SELECT 1 FROM dataset_events WHERE uri = :uri)
    )""" + _DOCUMENT)


_OF_DAG = text("""
    WITH uris AS (
        SELECT DISTINCT uri FROM dataset_references WHERE dag_id = :dag_id AND uri > :after
        ORDER BY uri LIMIT :limit
    )""" + _DOCUMENT)


async def list_datasets(conn: AsyncConnection, *, after: str | None, limit: int,
                        uri: str | None = None, dag_id: str | None = None) -> list[dict[str, Any]]:
    """Up to ``limit`` URIs after ``after`` (by URI) — all, or those ``dag_id`` produces or consumes —
    or the one ``uri`` if anything knows it."""
    if uri is not None:
        result = await conn.execute(_ONE, {"uri": uri})
    elif dag_id is not None:
        result = await conn.execute(_OF_DAG, {"dag_id": dag_id, "after": after or "", "limit": limit})
    else:
        result = await conn.execute(_LIST, {"after": after or "", "limit": limit})
    out = []
    for r in result:
        document = dict(r._mapping)
        document["no_producer"] = not document["producers"]
        out.append(document)
    return out
