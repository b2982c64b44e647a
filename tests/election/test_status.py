"""Cluster status answered from the database's truth (pg_locks + newest term), not from memory."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg

from leoflow.db.connection.engine import make_async_engine
from leoflow.db.stores import cluster_events, leader_terms
from leoflow.settings import Settings


def _lock_conn(url: str, node: str) -> psycopg.Connection[Any]:
    """A lock session as the elector sets one up (its token is the node name here)."""
    conn = psycopg.connect(url, autocommit=True, application_name=f"leoflow-lock:{node}")
    leader_terms.configure_session(conn, token=node, lock_timeout_ms=5000, keepalive_idle=10, keepalive_interval=3,
                                     keepalive_count=4, user_timeout_ms=20000)
    return conn


def _leader(settings: Settings) -> Any:
    async def go() -> Any:
        engine = make_async_engine(settings.database, pool_size=1)
        try:
            async with engine.connect() as conn:
                return (await leader_terms.current_leader(conn, "c1"),
                        await cluster_events.list_events(conn, "c1", 10, None))
        finally:
            await engine.dispose()
    return asyncio.run(go())


def test_leader_is_the_granted_holder_with_its_own_term(database_url: str, settings: Settings) -> None:
    assert _leader(settings)[0] is None
    a = _lock_conn(database_url, "a")
    b = _lock_conn(database_url, "b")
    try:
        assert leader_terms.wait_lock(a, "c1", "a")
        # Holding the lock without a recorded term is not leading yet.
        assert _leader(settings)[0] is None
        term_a = leader_terms.start_term(a, "c1", "a", {}, lock_timeout=5, token="a", timeline=None)
        leader, events = _leader(settings)
        assert leader is not None and leader["node_id"] == "a" and leader["term"] == term_a
        assert events[0]["kind"] == "leader_elected" and events[0]["term"] == term_a
        # A follower blocked in pg_advisory_lock is a waiter (granted = false), not the leader.
        b.execute("SET lock_timeout = 200")
        assert not leader_terms.wait_lock(b, "c1", "b")
        assert _leader(settings)[0]["node_id"] == "a"
        # The holder's session ends: nobody leads until b records its (higher) term.
        a.close()
        b.execute("SET lock_timeout = 5000")
        assert leader_terms.wait_lock(b, "c1", "b")
        assert _leader(settings)[0] is None
        term_b = leader_terms.start_term(b, "c1", "b", {}, lock_timeout=5, token="b", timeline=None)
        assert term_b > term_a
        leader, events = _leader(settings)
        assert leader["node_id"] == "b" and leader["term"] == term_b
        assert [e["kind"] for e in events[:2]] == ["leader_elected", "leader_elected"]
        # Paging by before_id.
        async def page() -> list[dict[str, Any]]:
            engine = make_async_engine(settings.database, pool_size=1)
            try:
                async with engine.connect() as conn:
                    return await cluster_events.list_events(conn, "c1", 5, events[0]["id"])
            finally:
                await engine.dispose()
        assert [e["id"] for e in asyncio.run(page())] == [events[1]["id"]]
    finally:
        a.close()
        b.close()
