"""One exception hierarchy for Leoflow.

Errors are translated at each boundary (psycopg, Kubernetes, HTTP) into these types, so callers
never need to know which library failed. A class docstring doubles as its default message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class LeoflowError(Exception):
    """Leoflow failed."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class SettingsError(LeoflowError):
    """A configuration value is invalid; names the variable and never echoes secrets."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        self.problem = problem
        super().__init__(f"{variable}: {problem}")


class ClusterMismatch(SettingsError):
    """This database (or schema) belongs to another Leoflow cluster (ADR 0010)."""

    def __init__(self, cluster: str, owner: str, *, schema: str | None = None) -> None:
        self.cluster = cluster
        self.owner = owner
        where = f"schema {schema!r} of this database" if schema and schema != "public" else "this database"
        super().__init__("LEOFLOW_CLUSTER", (
            f"is {cluster!r}, but {where} belongs to cluster {owner!r}; one database (or schema) holds one "
            f"Leoflow cluster: point LEOFLOW_DATABASE_URL at another database, or at another schema with "
            f"?options=-csearch_path%3D<schema>, or set LEOFLOW_CLUSTER={owner} to join that cluster"))


class ClusterNameInUse(SettingsError):
    """Another schema of this database holds a cluster of the same name (ADR 0010)."""

    def __init__(self, cluster: str, schema: str) -> None:
        self.cluster = cluster
        super().__init__("LEOFLOW_CLUSTER", (
            f"is {cluster!r}, a name already used by the Leoflow cluster in schema {schema!r} of this database; "
            "clusters sharing a database in different schemas need different LEOFLOW_CLUSTER names (the "
            "election lock and the task pods' names are per cluster name)"))


class DatabaseError(LeoflowError):
    """The database refused or failed a statement (translated from the driver in leoflow.db)."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached (or did not answer in time); retry later."""


class WriteConflict(DatabaseUnavailable):
    """A transaction met a concurrent one (a deadlock, a serialization failure) and was rolled
    back whole; running it again is safe and usually succeeds. A kind of DatabaseUnavailable, so
    a caller that retries on that retries on this too."""


class LockTimeout(DatabaseError):
    """A database lock was not granted within ``lock_timeout``."""


class SchemaNotCurrent(DatabaseError):
    """The database schema is not at the head migration; run `leoflow db upgrade`."""


class ValueRejected(DatabaseError):
    """A value is not acceptable to the database (out of range, bad encoding)."""


class UnsafeDatabaseSetup(LeoflowError):
    """The database connection cannot hold a session-level advisory lock safely."""


class FencedOut(LeoflowError):
    """A newer leadership term exists; this replica's write was refused."""


class NotFound(LeoflowError):
    """The requested object does not exist."""


class Conflict(LeoflowError):
    """The request conflicts with existing state (a duplicate, or a state that forbids it)."""


class ValidationFailed(LeoflowError):
    """The input is invalid.

    ``path`` and ``problem`` are the first problem found; ``also`` the others found in the same
    pass, when the validator collects them (a DAG spec's, up to a bound), in document order.
    """

    def __init__(self, path: str, problem: str, *, also: tuple[ValidationFailed, ...] = ()) -> None:
        self.path = path
        self.problem = problem
        self.also = also
        super().__init__(f"{path}: {problem}" if path else problem)


class DagFilesRejected(LeoflowError):
    """A set of DAG files was refused as a whole; ``problems`` lists every problem found.

    Each problem is a plain mapping (``file``, ``document``, ``path``, ``problem``, ``line``,
    ``column``), so an all-or-nothing sync can report every bad file in one answer.
    """

    def __init__(self, message: str, problems: Sequence[Mapping[str, object]]) -> None:
        self.problems = [dict(p) for p in problems]
        super().__init__(message)


class DagFilesInvalid(DagFilesRejected):
    """DAG files do not parse or do not validate; nothing was applied."""


class DagOwnershipConflict(DagFilesRejected):
    """DAG files define DAGs another sync source owns; nothing was applied."""


#: Faults of the leader itself, never blamed on one entity (a DAG, run, task or try): a newer term
#: exists, the database cannot be reached or is too slow, the schema is older than the code. A
#: containment boundary lets these through (the loop retries or steps down) and contains the rest.
LEADER_FAULTS: tuple[type[LeoflowError], ...] = (FencedOut, DatabaseUnavailable, LockTimeout, SchemaNotCurrent)


def is_leader_fault(exc: BaseException) -> bool:
    """True for :data:`LEADER_FAULTS` and for anything that is not an ``Exception`` (cancellation)."""
    return isinstance(exc, LEADER_FAULTS) or not isinstance(exc, Exception)
