"""Password authentication for the embedded PostgreSQL of standalone mode (issue 17 §6).

The server used to be initialised with ``initdb --auth=trust``: every local user of the machine
could connect to 127.0.0.1 (or the socket) as the superuser and read or change every DAG, run and
log. Now every connection authenticates with ``scram-sha-256`` and a password that standalone
generates once: ``LEOFLOW_HOME/postgres/password`` (256 random bits, mode ``0600``, created with
``O_EXCL`` like the admin token), carried in the database URL the replica runtime uses.

:func:`require_password` runs **while the server is stopped**: it sets the password on the
``postgres`` role in single-user mode (no listener: there is no moment at which the server is
up and still trusts anyone), then replaces ``pg_hba.conf`` with password lines for the socket
and the loopback addresses. A new home gets it right after ``initdb``; an existing home,
initialised with ``trust`` by an older Leoflow, gets it on its next start (same data, same
port); a home whose password file was deleted gets a new password the same way.

Failure semantics: :class:`~leoflow.standalone.embedded.EmbeddedPostgresError` with the
server's own message when single-user mode fails; the data directory is never modified before
the password is set (``pg_hba.conf`` is replaced last, atomically).
"""

from __future__ import annotations

import os
from pathlib import Path

from leoflow.db.connection import admin
from leoflow.standalone.embedded import EmbeddedPostgres, EmbeddedPostgresError

#: The whole ``pg_hba.conf`` of a standalone server: a password for every connection.
HBA = """\
# Written by Leoflow standalone: every connection authenticates with the generated password
# (LEOFLOW_HOME/postgres/password). Rewritten at every start that finds it changed.
local   all             all                                     scram-sha-256
host    all             all             127.0.0.1/32            scram-sha-256
host    all             all             ::1/128                 scram-sha-256
local   replication     all                                     scram-sha-256
host    replication     all             127.0.0.1/32            scram-sha-256
host    replication     all             ::1/128                 scram-sha-256
"""


def requires_password(data_dir: Path) -> bool:
    """Does this data directory's ``pg_hba.conf`` already ask every client for the password?"""
    try:
        return (data_dir / "pg_hba.conf").read_text() == HBA
    except OSError:
        return False


def require_password(server: EmbeddedPostgres, password: str) -> None:
    """Set ``password`` on the ``postgres`` role and make the server ask for it. The server must be stopped."""
    result = server.run_single_user(
        admin.set_password_script("postgres", password),
        options=["-c", "password_encryption=scram-sha-256", "-c", "exit_on_error=on"])
    if result.returncode != 0 or "ERROR" in result.stderr:
        raise EmbeddedPostgresError(f"could not set the embedded PostgreSQL's password: "
                                    f"{result.stderr.strip()[-500:]}")
    hba = server.data_dir / "pg_hba.conf"
    staged = hba.with_name("pg_hba.conf.leoflow")
    staged.write_text(HBA)
    stat = hba.stat()
    if hasattr(os, "chown") and os.geteuid() == 0:  # keep the server's user as the owner
        os.chown(staged, stat.st_uid, stat.st_gid)
    staged.chmod(0o600)
    staged.replace(hba)
