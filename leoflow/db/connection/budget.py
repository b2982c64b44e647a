"""How one replica splits ``LEOFLOW_DB_POOL_SIZE`` between its users of the database.

Operators size PostgreSQL's ``max_connections`` as *replicas * (pool size + 1)*, so a replica
must never open more than ``LEOFLOW_DB_POOL_SIZE`` connections besides its one dedicated lock
connection. Inside that budget the API and the leader's work get **separate** shares, because
they must not be able to starve each other: a flood of API requests waits for API connections
only, and the scheduler always finds its own (the issue's "the API never blocks on
leader-only work, and leader-only work never stalls the API").

- ``listener``: 1, the scheduler's ``LISTEN`` connection while leading. Before the first term,
  the elector's one-off pooler probe uses this slot (the process is not leading yet).
- ``background``: the leader's scheduler and executor, membership heartbeats and replica
  services (log shipping): 30% of the budget, at least 2 (a fenced executor window holds one
  while the scheduler ticks on another), at most 8 (the leader's work is batched; more
  connections would only take them from the API).
- ``api``: the rest, for every HTTP request.

The smallest workable budget is therefore 4 (``MINIMUM_POOL_SIZE``); settings reject less.
"""

from __future__ import annotations

from dataclasses import dataclass

from leoflow.settings.declared import MINIMUM_POOL_SIZE

LISTENER_CONNECTIONS = 1
MIN_BACKGROUND, MAX_BACKGROUND = 2, 8


@dataclass(frozen=True)
class ConnectionBudget:
    """Connections per purpose; ``api + background + listener == pool_size``."""

    api: int
    background: int
    listener: int = LISTENER_CONNECTIONS

    @property
    def total(self) -> int:
        return self.api + self.background + self.listener

    @classmethod
    def split(cls, pool_size: int) -> ConnectionBudget:
        if pool_size < MINIMUM_POOL_SIZE:
            raise ValueError(f"a replica needs at least {MINIMUM_POOL_SIZE} pooled connections, got {pool_size}")
        background = min(MAX_BACKGROUND, max(MIN_BACKGROUND, pool_size * 3 // 10))
        return cls(api=pool_size - background - LISTENER_CONNECTIONS, background=background)
