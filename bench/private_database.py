"""A database for a benchmark: the one given, or a fresh one on a private embedded PostgreSQL.

Shared by the benchmarks that need nothing but a migrated database (scheduler, retention): the
private server runs with ``fast_unsafe`` settings (no fsync — a benchmark's data is disposable)
in a temporary directory, and is stopped and removed when the block ends.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from leoflow.db import migrations
from leoflow.standalone.embedded import EmbeddedPostgres


@contextmanager
def benchmark_database(url: str | None, *, prefix: str) -> Iterator[str]:
    """``url`` (or a private server's new database ``bench``), migrated to the head revision."""
    workdir = Path(tempfile.mkdtemp(prefix=prefix))
    workdir.chmod(0o755)  # the server may run as an unprivileged user when we are root
    pg: EmbeddedPostgres | None = None
    try:
        if url is None:
            pg = EmbeddedPostgres(workdir / "data", fast_unsafe=True, socket_dir=workdir / "sock")
            pg.start()
            pg.wait_ready()
            url = pg.create_database("bench")
        migrations.upgrade(url)
        yield url
    finally:
        if pg is not None:
            pg.stop("immediate")
        shutil.rmtree(workdir, ignore_errors=True)
