"""The election lock key: a documented, stable function of the cluster name.

We use PostgreSQL's two-``int4`` advisory lock form ``(namespace, cluster_hash)``:

- ``namespace`` = :data:`ELECTION_NAMESPACE` = ``0x4C46454C`` (ASCII ``LFEL``), fixed forever;
  it keeps Leoflow's locks apart from other applications' locks in the same database (the
  two-int key space is also disjoint from the single-``bigint`` one).
- ``cluster_hash`` = the first 4 bytes of ``sha256(cluster.encode("utf-8"))``, big-endian,
  as a *signed* 32-bit integer.

In ``pg_locks`` the lock shows as ``locktype = 'advisory'``, ``classid = namespace``,
``objid = cluster_hash`` (as unsigned oid), ``objsubid = 2``. Changing either part is a breaking
change: two versions of Leoflow would elect two leaders during an upgrade.
"""

from __future__ import annotations

import hashlib

ELECTION_NAMESPACE = 0x4C46454C  # 'LFEL'


def _signed32(value: int) -> int:
    return value - (1 << 32) if value >= (1 << 31) else value


def election_lock_key(cluster: str) -> tuple[int, int]:
    """``(classid, objid)`` arguments for ``pg_try_advisory_lock(int4, int4)``."""
    digest = hashlib.sha256(cluster.encode("utf-8")).digest()
    return ELECTION_NAMESPACE, _signed32(int.from_bytes(digest[:4], "big"))


def pg_locks_ids(cluster: str) -> tuple[int, int]:
    """The same key as it appears in ``pg_locks`` (``classid``, ``objid`` are unsigned oids)."""
    classid, objid = election_lock_key(cluster)
    return classid & 0xFFFFFFFF, objid & 0xFFFFFFFF
