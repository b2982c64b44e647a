"""Chaos soak: ``python bench/chaos.py --duration SECONDS --seed N`` (as root).

Runs three ``leoflow serve`` replicas (Kubernetes executor, fake API server) on a real
PostgreSQL, injects faults into the leader at random (SIGKILL, SIGTERM, SIGSTOP past the lease,
``pg_terminate_backend`` on the lock session, PostgreSQL restart, a network partition from
PostgreSQL; with ``--standby`` also ``db_failover``: the primary lost and an asynchronous
streaming standby promoted, replicas on the multi-host URL), then proves exactly-once execution
from the fake server's request log and the database. Prints a JSON summary as the last line;
exits 0 iff every check holds. Details: ``bench/chaos/`` (start at ``soak.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.chaos.soak import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
