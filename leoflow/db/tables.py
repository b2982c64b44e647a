"""The metadata schema, as SQLAlchemy 2 typed models: the tables alone.

The SQL fragments the stores share (state lists, the observer's predicates, a run's deadline)
are in :mod:`leoflow.db.fragments`; the partial indexes below use the same ones.

Design choices (see docs/adr for the long form):

- **Duplicates are impossible in the database itself**, not just in code: unique
  ``(dag_id, run_id)``, a partial unique ``(dag_id, logical_date)`` for scheduled runs, unique
  ``(run, task_id)`` for task instances and ``(task_instance, try_number)`` for tries. Two racing
  leaders therefore cannot create a run or a try twice; the loser gets a conflict it treats as
  a no-op.
- **Task instance = one row per (run, task) plus one row per try.** ``task_instances`` holds
  the *current* state and try counter, which is what the scheduler's hot queries scan;
  ``task_tries`` keeps the history of every try (times, exit code, reason, pod name, the term
  that launched it). Keeping the hot table narrow keeps the scheduler's scans cheap.
- **Fencing**: ``cluster_leadership`` has one row per cluster carrying the newest term. A new
  leader ``UPDATE``s it (row lock); every fenced write transaction reads it ``FOR SHARE`` and
  checks the term is its own, so no write of an older term can commit after a newer term has
  committed. ``leader_terms`` is the append-only history (one row per term).
- Timestamps are ``timestamptz``; defaults use ``clock_timestamp()`` where the moment matters
  inside a long transaction (terms, events).
- **Observed endings** (``dag_runs.observed_at``, ``task_tries.observed_at``): the leader's
  outcome observer (:mod:`leoflow.notify.observer`) turns every run that ended and every try
  that failed into notification outbox rows and per-DAG metric counters exactly once, by a
  compare-and-set of ``observed_at`` in the same fenced transaction. A run counts as unobserved
  while ``observed_at`` is NULL or older than its ``ended_at``, so a run that is reopened (a
  backfill's rerun, a clear) and ends again is observed again; code that reopens a run should
  still set ``observed_at`` to NULL. Rows that ended before this column existed carry
  ``infinity`` (never re-announced after an upgrade).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from leoflow.db.fragments import sql_list, unobserved_runs_sql, unobserved_tries_sql
from leoflow.model.states import (
    ACTIVE_RUN_STATES,
    ACTIVE_TASK_STATES,
    LIVE_TRY_STATES,
    SLOT_TASK_STATES,
    TERMINAL_RUN_STATES,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

_NOW = text("now()")
_CLOCK = text("clock_timestamp()")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: DateTime(timezone=True),
        dict[str, Any]: JSONB,
    }


# --------------------------------------------------------------------------- DAG definitions

class Dag(Base):
    """A DAG's identity and mutable flags; its spec lives in versions."""

    __tablename__ = "dags"

    dag_id: Mapped[str] = mapped_column(String(50), primary_key=True)
    current_version_id: Mapped[int | None] = mapped_column(
        BigInteger, ForeignKey("dag_versions.id", use_alter=True, ondelete="SET NULL"))
    paused: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    deleted: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    schedule: Mapped[str | None] = mapped_column(Text)  # a cron, or the encoding of a schedule form
    # The logical date of the next scheduled run the leader should create (None: not scheduled).
    next_run_at: Mapped[datetime | None]
    # ``combine: and``: the cron slot waiting for the DAG's datasets (its logical date and data
    # interval start; None: no slot waits). Set and cleared by the leader's fenced step.
    pending_slot_at: Mapped[datetime | None]
    pending_slot_start: Mapped[datetime | None]
    # The sync source label that owns this DAG (``dags sync --source``, LEOFLOW_DAGS_SOURCE);
    # None for a DAG applied by hand. Pruning deletes only DAGs of the pruning sync's source.
    source: Mapped[str | None] = mapped_column(String(63))
    # Why the leader stopped scheduling this DAG (a scheduler error; cleared by re-applying it).
    schedule_error: Mapped[str | None] = mapped_column(Text)
    # The current version's ``max_active_tasks`` (None: no limit), kept here for the queueing
    # statement, which must not open a version's spec per task (leoflow.model.spec.fairness).
    max_active_tasks: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    updated_at: Mapped[datetime] = mapped_column(server_default=_NOW)

    __table_args__ = (
        Index("ix_dags_due", "next_run_at", postgresql_where=text("NOT paused AND NOT deleted")),
    )


class DagVersion(Base):
    """An immutable snapshot of a DAG spec. Runs point at the version they started with."""

    __tablename__ = "dag_versions"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    dag_id: Mapped[str] = mapped_column(String(50), ForeignKey("dags.dag_id", ondelete="CASCADE"))
    version: Mapped[int] = mapped_column(Integer)
    spec: Mapped[dict[str, Any]]
    spec_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    # The run conf a run gets when nobody passes one (scheduled and backfill runs): the defaults
    # of the spec's ``params`` JSON Schema, computed once when the version is applied.
    default_conf: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))

    __table_args__ = (UniqueConstraint("dag_id", "version"),)


# --------------------------------------------------------------------------- runs and tasks

class DagRun(Base):
    __tablename__ = "dag_runs"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    dag_id: Mapped[str] = mapped_column(String(50), ForeignKey("dags.dag_id", ondelete="CASCADE"))
    run_id: Mapped[str] = mapped_column(String(250))
    dag_version_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("dag_versions.id"))
    run_type: Mapped[str] = mapped_column(String(20))  # scheduled | manual
    logical_date: Mapped[datetime | None]
    state: Mapped[str] = mapped_column(String(20), server_default=text("'queued'"))
    conf: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    # The fencing term of the last scheduler write (None for API-created, untouched runs).
    term: Mapped[int | None] = mapped_column(BigInteger)
    # Why the run ended as it did (e.g. ``run deadline exceeded``); None when nothing to say.
    reason: Mapped[str | None] = mapped_column(Text)
    # The backfill that created (or re-ran) this run, if any.
    backfill_id: Mapped[int | None] = mapped_column(BigInteger, ForeignKey("backfills.id", ondelete="SET NULL"))
    # The ``ended_at`` the outcome observer last announced (see the module docstring).
    observed_at: Mapped[datetime | None]
    # The trigger's own run deadline in seconds (None: the DAG version's ``run_timeout_seconds``).
    run_timeout_seconds: Mapped[float | None] = mapped_column(Float)
    # When the leader fails the run (``run deadline exceeded``): set at its start, database time.
    deadline_at: Mapped[datetime | None]
    # What the run's body (every task but its ``on_exit`` ones) decided, recorded when the body
    # ended and the exit tasks' rows were created; the run's state is derived from it when the exit
    # tasks end (ADR 0014, decision 7). None: no exit tasks, or the body has not ended.
    body_state: Mapped[str | None] = mapped_column(Text)
    body_reason: Mapped[str | None] = mapped_column(Text)
    # A dataset-triggered run's triggering events, one entry per URI (leoflow.db.stores.datasets);
    # None for every other run.
    triggering_events: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    # The span of data the run is for (leoflow.model.spec.timetable): a scheduled run's previous and
    # current fire time, a manual run's logical date twice. None on runs written before 0020.
    data_interval_start: Mapped[datetime | None]
    data_interval_end: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("dag_id", "run_id"),
        # Running runs with a deadline, soonest first (the leader's periodic deadline check).
        Index("ix_dag_runs_deadline", "deadline_at",
              postgresql_where=text("state = 'running' AND deadline_at IS NOT NULL")),
        Index("uq_dag_runs_scheduled_logical_date", "dag_id", "logical_date", unique=True,
              postgresql_where=text("run_type = 'scheduled'")),
        # A DAG's queued runs, oldest first, and its running ones, each one index range: starting
        # runs reads a DAG's room and its oldest queued runs, not every queued run (a backlog of
        # 100,000 made it 0.65 s a call with (dag_id, id)).
        Index("ix_dag_runs_active", "dag_id", "state", "id",
              postgresql_where=text(f"state IN {sql_list(ACTIVE_RUN_STATES)}")),
        Index("ix_dag_runs_dag_id_id", "dag_id", "id"),
        # Every queued run, oldest first: starting runs reads as many as it may start, whatever the
        # number of DAGs with a queued run (walking them one by one cost ~160 ms a call at 10,000).
        Index("ix_dag_runs_queued", "id", postgresql_where=text("state = 'queued'")),
        # Retention's scan: finished runs, oldest first (leoflow.db.stores.retention).
        Index("ix_dag_runs_finished", "ended_at", "id",
              postgresql_where=text(f"state IN {sql_list(TERMINAL_RUN_STATES)}")),
        # Which runs still reference a DAG version (retention keeps those versions).
        Index("ix_dag_runs_dag_version_id", "dag_version_id"),
        Index("ix_dag_runs_backfill", "backfill_id", "id", postgresql_where=text("backfill_id IS NOT NULL")),
        # Runs the outcome observer has yet to announce: only the endings in flight.
        Index("ix_dag_runs_unobserved", "id", postgresql_where=text(unobserved_runs_sql())),
    )


class TaskInstance(Base):
    """The current state of one task in one run; ``try_number`` counts tries started (0 = none)."""

    __tablename__ = "task_instances"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    run_pk: Mapped[int] = mapped_column(BigInteger, ForeignKey("dag_runs.id", ondelete="CASCADE"))
    task_id: Mapped[str] = mapped_column(String(50))
    state: Mapped[str] = mapped_column(String(20), server_default=text("'pending'"))
    try_number: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    max_tries: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    # Direct upstream tasks not yet finished; the scheduler decrements it instead of re-joining the
    # DAG. 0 on a pending row means ready to queue (leoflow.model.spec.trigger_rules keeps it so).
    pending_upstreams: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # How the finished direct upstream tasks ended: what the task's trigger rule decides on.
    upstream_successes: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    upstream_failures: Mapped[int] = mapped_column(Integer, server_default=text("0"))  # failed, upstream_failed
    upstream_skips: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # Nothing depends on this task: the leaves decide the run's final state.
    is_leaf: Mapped[bool] = mapped_column(Boolean, server_default=text("true"))
    next_try_at: Mapped[datetime | None]
    queued_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    timeout_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    term: Mapped[int | None] = mapped_column(BigInteger)
    reason: Mapped[str | None] = mapped_column(Text)
    # The pool whose slot the task holds while queued or running, and its priority in that pool
    # (copied from the spec when the run starts). None: a ``kind: empty`` task (no slot), or a row
    # an older release wrote, which the scheduler classifies from the spec when it is ready.
    pool: Mapped[str | None] = mapped_column(String(50))
    priority: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # The id of the current try, chosen when the task is queued and handed to the executor with the
    # launch: whichever writer creates the try's row gives it this id (ADR 0013, leoflow.db.queued_tries).
    queued_try_id: Mapped[int | None] = mapped_column(BigInteger)
    # No retry starts after this: the first try's start + ``retry_policy.max_duration_seconds``,
    # database time (ADR 0014, decision 5). None: no such budget.
    retry_deadline_at: Mapped[datetime | None]
    # A mapped task's instances are rows 0..N-1 of the same task id (ADR 0014, decision 3); -1: an
    # unmapped task, or a mapped one not expanded yet. ``map_count``: N once expanded (NULL: not yet,
    # or cleared for a re-expansion).
    map_index: Mapped[int] = mapped_column(Integer, server_default=text("-1"))
    map_count: Mapped[int | None] = mapped_column(Integer)
    # ``max_parallel`` of a mapped task, on each of its instances: the queueing statement's bound.
    max_parallel: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        UniqueConstraint("run_pk", "task_id", "map_index"),
        Index("ix_task_instances_active", "state", "id",
              postgresql_where=text(f"state IN {sql_list(ACTIVE_TASK_STATES)}")),
        # Is this run complete? One probe, checked with every task transition that may complete it.
        Index("ix_task_instances_run_active", "run_pk",
              postgresql_where=text(f"state IN {sql_list(ACTIVE_TASK_STATES)}")),
        # The scheduler's hot "ready to queue" scan, per pool in priority order (highest first,
        # then oldest); stays small however many tasks wait upstream.
        Index("ix_task_instances_ready", "pool", text("priority DESC"), "id",
              postgresql_where=text("state = 'pending' AND pending_upstreams = 0")),
        # Slots in use per pool: only the task instances queued or running.
        Index("ix_task_instances_pool_slots", "pool",
              postgresql_where=text(f"state IN {sql_list(SLOT_TASK_STATES)}")),
        # Instances of mapped tasks with a max_parallel holding a slot: what the queueing statement
        # counts per mapped task (never the waiting instances).
        Index("ix_task_instances_map_slots", "run_pk", "task_id",
              postgresql_where=text(f"max_parallel IS NOT NULL AND state IN {sql_list(SLOT_TASK_STATES)}")),
    )


class RunCommand(Base):
    """An operator's clear or mark of a run's task instances, recorded by the API and applied by
    the leader under its term in one fenced transaction (leoflow.db.stores.commands)."""

    __tablename__ = "run_commands"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    run_pk: Mapped[int] = mapped_column(BigInteger, ForeignKey("dag_runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(10))  # clear | mark
    body: Mapped[dict[str, Any]]
    requested_by: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    # When and under which term the leader applied it; ``outcome`` what it did, ``error`` why not.
    applied_at: Mapped[datetime | None]
    term: Mapped[int | None] = mapped_column(BigInteger)
    outcome: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        # The leader's scan: only commands not applied yet.
        Index("ix_run_commands_pending", "id", postgresql_where=text("applied_at IS NULL")),
        Index("ix_run_commands_run_pk", "run_pk"),
    )


class TaskTry(Base):
    """One attempt at a task instance: what ran, where, under which term, and how it ended."""

    __tablename__ = "task_tries"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    task_instance_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("task_instances.id", ondelete="CASCADE"))
    try_number: Mapped[int] = mapped_column(Integer)
    state: Mapped[str] = mapped_column(String(20), server_default=text("'queued'"))
    # Deterministic executor handle: the pod name, or the local executor's process name.
    executor_ref: Mapped[str | None] = mapped_column(String(253))
    term: Mapped[int] = mapped_column(BigInteger)
    queued_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    # Executor bookkeeping: a claim makes a restart never launch the same try twice.
    claimed_at: Mapped[datetime | None]
    claimed_by: Mapped[str | None] = mapped_column(String(253))
    logs_shipped_at: Mapped[datetime | None]
    resource_deleted_at: Mapped[datetime | None]
    # Log shipping's own backoff per try, and why its output could not be collected (if so).
    log_attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    log_next_attempt_at: Mapped[datetime | None]
    logs_unavailable: Mapped[str | None] = mapped_column(Text)
    # When the outcome observer counted this try's failure (only failed tries are observed).
    observed_at: Mapped[datetime | None]
    # What a successful try of a task that declares outputs handed on (checked, ADR 0014), and its
    # size in bytes as written; NULL for every other try. Written with ``state = 'success'``.
    outputs: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    outputs_bytes: Mapped[int | None] = mapped_column(Integer)

    __table_args__ = (
        UniqueConstraint("task_instance_id", "try_number"),
        Index("ix_task_tries_unobserved_failures", "id", postgresql_where=text(unobserved_tries_sql())),
        Index("ix_task_tries_unshipped", "ended_at",
              postgresql_where=text("ended_at IS NOT NULL AND logs_shipped_at IS NULL")),
        # Tries the executor may still be running (resubmitted on failover, killed when cancelling).
        Index("ix_task_tries_live", "id",
              postgresql_where=text(f"state IN {sql_list(LIVE_TRY_STATES)}")),
    )


class TryOutcome(Base):
    """How a try's process ended, reported by the replica that ran it (local executor).

    Not a scheduling decision — a fact from the one host that can see the process — so any
    replica may write it, leader or not, unfenced; the leader's executor turns it into a status
    update under its own term. It lets a replica that lost leadership while its processes ran
    (a database outage) hand their outcomes to the next leader instead of having them called
    "vanished" and run again.
    """

    __tablename__ = "try_outcomes"

    task_try_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("task_tries.id", ondelete="CASCADE"),
                                             primary_key=True)
    state: Mapped[str] = mapped_column(String(20))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str | None] = mapped_column(Text)
    # What the try wrote to LEOFLOW_OUTPUTS, unchecked (leoflow.db.stores.try_outcomes says how it is kept as text).
    outputs: Mapped[str | None] = mapped_column(Text)
    reported_by: Mapped[str] = mapped_column(String(253))
    reported_at: Mapped[datetime] = mapped_column(server_default=_CLOCK)


class TaskLog(Base):
    """Captured output of one try, size-capped (the tail is kept)."""

    __tablename__ = "task_logs"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    task_try_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("task_tries.id", ondelete="CASCADE"), unique=True)
    content: Mapped[str] = mapped_column(Text, server_default=text("''"))
    truncated: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    size_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    updated_at: Mapped[datetime] = mapped_column(server_default=_NOW)


class LogArchive(Base):
    """The archived log of one container of one try, in object storage (leoflow.executor.log_archive).

    ``size_bytes`` is how much of the container's output is archived, contiguously from byte 0: a
    chunk is indexed only after its object is written, and only if it starts where the archive
    ends, so the index never shows a gap, a duplicate or an object that is not all there.
    ``complete``: the container ended and all of its output is archived.
    """

    __tablename__ = "log_archives"

    task_try_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("task_tries.id", ondelete="CASCADE"), primary_key=True)
    container: Mapped[str] = mapped_column(String(63), primary_key=True)
    size_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    stored_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    chunks: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    complete: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    updated_at: Mapped[datetime] = mapped_column(server_default=_NOW)


class LogArchiveChunk(Base):
    """One object of an archived log: bytes ``[start_offset, end_offset)`` of the output, gzip-compressed."""

    __tablename__ = "log_archive_chunks"

    task_try_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    container: Mapped[str] = mapped_column(String(63), primary_key=True)
    start_offset: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    end_offset: Mapped[int] = mapped_column(BigInteger)
    stored_bytes: Mapped[int] = mapped_column(BigInteger)
    object_key: Mapped[str] = mapped_column(String(400))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)

    __table_args__ = (
        ForeignKeyConstraint(["task_try_id", "container"], ["log_archives.task_try_id", "log_archives.container"],
                             ondelete="CASCADE"),
    )


class LogArchiveGarbage(Base):
    """An archived object whose rows retention deleted: the object is deleted from storage next."""

    __tablename__ = "log_archive_garbage"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    object_key: Mapped[str] = mapped_column(String(400))
    queued_at: Mapped[datetime] = mapped_column(server_default=_NOW)


class PodEvent(Base):
    """One Kubernetes Event of a try's pod (leoflow.executor.kubernetes.pod_events), by event uid.

    The API server folds a repeated event into one object whose ``count`` grows; the row follows it.
    At most ``MAX_POD_EVENTS_PER_TRY`` rows per try, messages cut to ``MAX_POD_EVENT_MESSAGE``.
    """

    __tablename__ = "pod_events"

    task_try_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("task_tries.id", ondelete="CASCADE"), primary_key=True)
    uid: Mapped[str] = mapped_column(String(64), primary_key=True)
    type: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str] = mapped_column(String(128))
    message: Mapped[str] = mapped_column(Text)
    container: Mapped[str | None] = mapped_column(String(63))
    count: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    first_seen: Mapped[datetime] = mapped_column()
    last_seen: Mapped[datetime] = mapped_column()


class TaskArtifact(Base):
    """One output artifact of one try (leoflow.model.artifacts), in the log archive's bucket.

    ``complete``: the object is written whole and this row was added after it; a row without an
    object says in ``problem`` why (nothing at the path, over a limit, storage refused).
    """

    __tablename__ = "task_artifacts"

    task_try_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("task_tries.id", ondelete="CASCADE"), primary_key=True)
    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str | None] = mapped_column(String(16))
    object_key: Mapped[str | None] = mapped_column(String(400))
    size_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    stored_bytes: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    files: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    digest: Mapped[str | None] = mapped_column(String(80))
    complete: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    problem: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)


# --------------------------------------------------------------------------- cluster

class ClusterLeadership(Base):
    """One row per cluster: the newest fencing term. Fenced writes lock it ``FOR SHARE``."""

    __tablename__ = "cluster_leadership"

    cluster: Mapped[str] = mapped_column(String(63), primary_key=True)
    term: Mapped[int] = mapped_column(BigInteger)
    node_id: Mapped[str] = mapped_column(String(253))
    since: Mapped[datetime] = mapped_column(server_default=_CLOCK)
    # The server's WAL timeline when the term began: a term is valid only on that timeline, so
    # a promoted standby invalidates every term issued before (ADR 0003). None: not readable.
    timeline: Mapped[int | None] = mapped_column(Integer)


class LeaderTerm(Base):
    """Append-only history of leadership terms; term numbers strictly increase."""

    __tablename__ = "leader_terms"

    term: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(63))
    node_id: Mapped[str] = mapped_column(String(253))
    backend_pid: Mapped[int | None] = mapped_column(Integer)
    timeline: Mapped[int | None] = mapped_column(Integer)
    acquired_at: Mapped[datetime] = mapped_column(server_default=_CLOCK)
    ended_at: Mapped[datetime | None]
    end_reason: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (Index("ix_leader_terms_cluster_term", "cluster", "term"),)


class ClusterNode(Base):
    """Membership: one heartbeat row per replica."""

    __tablename__ = "cluster_nodes"

    cluster: Mapped[str] = mapped_column(String(63), primary_key=True)
    node_id: Mapped[str] = mapped_column(String(253), primary_key=True)
    api_url: Mapped[str | None] = mapped_column(String(500))
    version: Mapped[str | None] = mapped_column(String(50))
    started_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    last_seen: Mapped[datetime] = mapped_column(server_default=_NOW)
    is_leader: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    state: Mapped[str] = mapped_column(String(10), server_default=text("'up'"))  # up | down


class ClusterEvent(Base):
    """leader_elected, leader_lost, leader_released, node_joined, node_left, ..."""

    __tablename__ = "cluster_events"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    cluster: Mapped[str] = mapped_column(String(63))
    ts: Mapped[datetime] = mapped_column(server_default=_CLOCK)
    kind: Mapped[str] = mapped_column(String(40))
    node_id: Mapped[str | None] = mapped_column(String(253))
    term: Mapped[int | None] = mapped_column(BigInteger)
    details: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))

    __table_args__ = (Index("ix_cluster_events_cluster_id", "cluster", "id"),)


# --------------------------------------------------------------------------- day-2 operations

class TaskTemplate(Base):
    """One version of a cluster template (``/api/v2/templates``, leoflow.model.spec.reuse).

    A DAG apply reads the versions it names and inlines them into its tasks; the scheduler never
    reads this table, so a deleted or newer version changes no stored DAG version. Versions of a
    name count from 1 and are never reused: a delete marks every version ``deleted`` (kept for the
    audit trail), and a later ``PUT`` of the name continues after the highest.
    """

    __tablename__ = "task_templates"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    spec: Mapped[dict[str, Any]]
    spec_hash: Mapped[str] = mapped_column(String(64))
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    deleted: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))


class DatasetEvent(Base):
    """One event of a dataset (leoflow.db.stores.datasets): a producing task's success or an outside report.

    Append-only history: the queue (:class:`DatasetQueueEntry`) points into it and the run documents
    copy what they need, so pruning it (retention) never changes what a run was triggered by.
    """

    __tablename__ = "dataset_events"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    uri: Mapped[str] = mapped_column(String(1000))
    source: Mapped[str] = mapped_column(String(10))  # task | api
    dag_id: Mapped[str | None] = mapped_column(String(50))
    run_id: Mapped[str | None] = mapped_column(String(250))
    task_id: Mapped[str | None] = mapped_column(String(50))
    map_index: Mapped[int | None] = mapped_column(Integer)
    try_number: Mapped[int | None] = mapped_column(Integer)
    outputs: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    extra: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    created_by: Mapped[str | None] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)

    __table_args__ = (Index("ix_dataset_events_uri_id", "uri", "id"),)


class DatasetReference(Base):
    """Which DAG produces (a task's ``produces:``) or consumes (``schedule: {datasets: …}``) a URI.

    Written when a DAG is applied (its current version's references replace the old ones) and
    deleted with it, so "who consumes this URI" is one index probe when an event arrives.
    ``task_id`` is ``''`` for a consumer (part of the key).
    """

    __tablename__ = "dataset_references"

    uri: Mapped[str] = mapped_column(String(1000), primary_key=True)
    role: Mapped[str] = mapped_column(String(10), primary_key=True)  # consumer | producer
    dag_id: Mapped[str] = mapped_column(String(50), ForeignKey("dags.dag_id", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(50), primary_key=True)

    __table_args__ = (Index("ix_dataset_references_dag_id", "dag_id"),)


class DatasetQueueEntry(Base):
    """Events of one URI waiting to trigger one consuming DAG, coalesced into one row.

    At most one row per (DAG, URI it waits on): a burst of events moves ``last_event_id`` and
    counts them, so the queue is bounded by the DAG's condition (100 URIs) however many arrive.
    The leader deletes the rows a run consumed in the transaction that creates the run.
    """

    __tablename__ = "dataset_queue"

    dag_id: Mapped[str] = mapped_column(String(50), ForeignKey("dags.dag_id", ondelete="CASCADE"), primary_key=True)
    uri: Mapped[str] = mapped_column(String(1000), primary_key=True)
    first_event_id: Mapped[int] = mapped_column(BigInteger)
    last_event_id: Mapped[int] = mapped_column(BigInteger)
    events: Mapped[int] = mapped_column(BigInteger)
    first_at: Mapped[datetime]
    last_at: Mapped[datetime]


class TaskWait(Base):
    """One condition a ``waiting`` task instance waits for (``wait_for``, ``depends_on_past``; leoflow.scheduler.waits).

    Written when the task's trigger rule first says run (the task becomes ``waiting``), one row per
    condition, ``position`` its place in the task's list. The leader re-checks a row when
    ``check_at`` has come (a coarse timer, its timeout, or ``now`` when what it waits on changed:
    a run of the DAG it names ended, an event of its dataset, an approval) — never every row every
    tick. ``state``: ``waiting`` | ``met`` | ``failed``; an approval's decision is written by the API
    (compare-and-set on ``decision IS NULL``) and applied to the task by the leader's fenced step.
    """

    __tablename__ = "task_waits"

    task_instance_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("task_instances.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    dag_id: Mapped[str] = mapped_column(String(50))
    kind: Mapped[str] = mapped_column(String(10))  # dag | dataset | time | approval | past
    target: Mapped[str] = mapped_column(String(1000), server_default=text("''"))
    #: ``dag``: the logical date of the run waited for; ``time``: the moment.
    target_date: Mapped[datetime | None]
    states: Mapped[list[str] | None] = mapped_column(ARRAY(String(20)))
    #: ``dataset``: events after this moment count (the run's start).
    since: Mapped[datetime | None]
    state: Mapped[str] = mapped_column(String(10), server_default=text("'waiting'"))
    reason: Mapped[str | None] = mapped_column(Text)
    soft_fail: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    timeout_at: Mapped[datetime | None]
    check_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    #: The task instance's try number when it started waiting (a clear after it ran waits again).
    try_number: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    decided_at: Mapped[datetime | None]
    decision: Mapped[str | None] = mapped_column(String(10))  # approve | reject
    decided_by: Mapped[str | None] = mapped_column(String(100))
    comment: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        # The leader's one probe per periodic step: the rows whose check is due.
        Index("ix_task_waits_due", "check_at", postgresql_where=text("state = 'waiting'")),
        # A change re-checks exactly the rows that wait on it.
        Index("ix_task_waits_target", "kind", "target", postgresql_where=text("state = 'waiting'")),
    )


class Pool(Base):
    """A named pool of task slots (leoflow.model.spec.fairness); the ``default`` pool is not stored."""

    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(String(50), primary_key=True)
    slots: Mapped[int] = mapped_column(Integer)
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    updated_at: Mapped[datetime] = mapped_column(server_default=_NOW)


class Backfill(Base):
    """A request to run a DAG's cron slots in ``[start_at, end_at)``, driven by the leader.

    The leader's backfill service creates (or, with ``rerun_failed``, re-runs) the runs one slot
    at a time, keeping at most ``max_active_runs`` of this backfill's runs unfinished;
    ``next_logical_date`` is its cursor (None once every slot was handled). At most one backfill
    per DAG is ``running`` (a partial unique index).
    """

    __tablename__ = "backfills"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    dag_id: Mapped[str] = mapped_column(String(50), ForeignKey("dags.dag_id", ondelete="CASCADE"))
    start_at: Mapped[datetime]
    end_at: Mapped[datetime]
    max_active_runs: Mapped[int] = mapped_column(Integer)
    rerun_failed: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    state: Mapped[str] = mapped_column(String(20), server_default=text("'running'"))  # running|completed|cancelled
    next_logical_date: Mapped[datetime | None]
    slots_total: Mapped[int] = mapped_column(Integer)
    runs_created: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    runs_rerun: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    # Slots whose run already existed and was left alone (not failed, or rerun_failed off).
    slots_skipped: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    updated_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    completed_at: Mapped[datetime | None]
    term: Mapped[int | None] = mapped_column(BigInteger)

    __table_args__ = (
        Index("uq_backfills_running_dag", "dag_id", unique=True, postgresql_where=text("state = 'running'")),
        Index("ix_backfills_dag_id_id", "dag_id", "id"),
    )


class Notification(Base):
    """The outbox: one webhook delivery of one event, retried with backoff until delivered.

    ``target`` is ``dag`` (a ``notify`` entry of the DAG; ``webhook`` holds its URL and secret
    *references*) or ``default`` (``LEOFLOW_NOTIFY_WEBHOOK``, whose URL is a secret and is never
    stored). Secret values are resolved at delivery time and never written here.
    """

    __tablename__ = "notifications"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    run_pk: Mapped[int] = mapped_column(BigInteger, ForeignKey("dag_runs.id", ondelete="CASCADE"))
    dag_id: Mapped[str] = mapped_column(String(50))
    run_id: Mapped[str] = mapped_column(String(250))
    task_id: Mapped[str | None] = mapped_column(String(50))
    try_number: Mapped[int | None] = mapped_column(Integer)
    event: Mapped[str] = mapped_column(String(20))  # failure | success | retry | deadline
    target: Mapped[str] = mapped_column(String(20))  # dag | default
    webhook: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    payload: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(String(20), server_default=text("'pending'"))  # pending|delivered|failed
    attempts: Mapped[int] = mapped_column(Integer, server_default=text("0"))
    next_attempt_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    last_attempt_at: Mapped[datetime | None]
    last_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    delivered_at: Mapped[datetime | None]
    # Past this moment a failed attempt is the last one (state ``failed``); a manual retry
    # moves it.
    give_up_at: Mapped[datetime]

    __table_args__ = (
        Index("ix_notifications_due", "next_attempt_at", postgresql_where=text("state = 'pending'")),
        Index("ix_notifications_run_pk", "run_pk"),
        Index("ix_notifications_dag_id_id", "dag_id", "id"),
    )


class AuditEvent(Base):
    """Who (token name) did what (method, route, target), when, from where, with which outcome.

    A token's refused writes (403) are counted, not recorded one by one: one row per (token,
    method, route, status) and :data:`leoflow.db.stores.audit.DENIAL_WINDOW` (``denial_window``),
    its ``count`` raised by each refusal, ``ts`` the first and ``last_ts`` the last.
    """

    __tablename__ = "audit_events"

    id: Mapped[int] = mapped_column(BigInteger, Identity(), primary_key=True)
    ts: Mapped[datetime] = mapped_column(server_default=_CLOCK)
    actor: Mapped[str] = mapped_column(String(100))
    scope: Mapped[str] = mapped_column(String(10))
    method: Mapped[str] = mapped_column(String(10))
    route: Mapped[str] = mapped_column(String(200))
    path: Mapped[str] = mapped_column(String(1000))
    status: Mapped[int] = mapped_column(Integer)
    remote_addr: Mapped[str | None] = mapped_column(String(100))
    forwarded_for: Mapped[str | None] = mapped_column(String(300))
    user_agent: Mapped[str | None] = mapped_column(String(300))
    dag_id: Mapped[str | None] = mapped_column(String(50))
    run_id: Mapped[str | None] = mapped_column(String(250))
    details: Mapped[dict[str, Any]] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    count: Mapped[int] = mapped_column(Integer, server_default=text("1"))
    last_ts: Mapped[datetime | None]
    denial_window: Mapped[datetime | None]
    #: Who, beyond the display name: how they proved it (static, token, oidc, anonymous), a stable
    #: id (a token's id, an OIDC ``sub``) and the team the write concerned (NULL: none or older code).
    actor_kind: Mapped[str | None] = mapped_column(String(10))
    actor_subject: Mapped[str | None] = mapped_column(String(200))
    team: Mapped[str | None] = mapped_column(String(50))

    __table_args__ = (
        Index("ix_audit_events_dag_id_id", "dag_id", "id"),
        Index("ix_audit_events_actor_id", "actor", "id"),
        Index("ix_audit_events_ts", "ts"),
        Index("uq_audit_events_denials", "actor", "method", "route", "status", "denial_window", unique=True,
              postgresql_where=text("denial_window IS NOT NULL")),
    )


class ApiTokenRow(Base):
    """A runtime API token (``/api/v2/tokens``): never its secret, only the secret's SHA-256.

    Rows are kept after revocation or expiry (the audit log names token ids); every replica
    keeps the usable ones in memory (:mod:`leoflow.api.token_cache`) and reloads them when
    ``api_token_generation`` moves.
    """

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    name: Mapped[str] = mapped_column(String(50))
    team: Mapped[str | None] = mapped_column(String(50))
    role: Mapped[str] = mapped_column(String(10))
    #: SHA-256 of the secret, hex (see leoflow.model.access.tokens for why a fast hash is right).
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    #: The secret's first characters (``lft_`` and 8 more), for people to tell tokens apart.
    prefix: Mapped[str] = mapped_column(String(12))
    expires_at: Mapped[datetime]
    created_by: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(server_default=_NOW)
    #: Refreshed at most once a minute per token and replica, not per request.
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class ApiTokenGeneration(Base):
    """One row, one counter, raised in the transaction of every token creation and revocation.

    Replicas poll it to know when to reload their token cache. A counter on one row rather than
    ``max(changed_at)``: the row lock orders the writers, so the value a reader sees grows in
    commit order, whereas timestamps are taken before commit and a slower transaction can commit
    an older one after a reader has moved past it.
    """

    __tablename__ = "api_token_generation"

    singleton: Mapped[bool] = mapped_column(Boolean, primary_key=True, server_default=text("true"))
    generation: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))

    __table_args__ = (CheckConstraint("singleton", name="singleton"),)


class DagRunStats(Base):
    """Finished runs per (DAG, final state): count, duration sum and histogram bins, last end.

    Maintained by the outcome observer (one increment per run ending) and read by every replica
    for ``leoflow_dag_run_duration_seconds`` / ``leoflow_dag_last_success_timestamp_seconds``.
    ``bins[i]`` counts durations in ``(bounds[i-1], bounds[i]]`` of
    :data:`leoflow.model.dag_metrics.DURATION_BUCKETS`; the last bin is above the last bound.
    """

    __tablename__ = "dag_run_stats"

    dag_id: Mapped[str] = mapped_column(String(50), ForeignKey("dags.dag_id", ondelete="CASCADE"), primary_key=True)
    state: Mapped[str] = mapped_column(String(20), primary_key=True)
    runs: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    duration_sum: Mapped[float] = mapped_column(Float, server_default=text("0"))
    bins: Mapped[list[int]] = mapped_column(ARRAY(BigInteger))
    last_ended_at: Mapped[datetime | None]


class TaskFailureCount(Base):
    """Failed tries per (DAG, task), for ``leoflow_task_failures_total``."""

    __tablename__ = "task_failure_counts"

    dag_id: Mapped[str] = mapped_column(String(50), ForeignKey("dags.dag_id", ondelete="CASCADE"), primary_key=True)
    task_id: Mapped[str] = mapped_column(String(50), primary_key=True)
    failures: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))


class Installation(Base):
    """The one cluster this database (or schema) belongs to; a single row (ADR 0010).

    Written by the migration that introduced it when the database held exactly one cluster's
    history, otherwise by the first replica of a cluster to start. A replica whose
    ``LEOFLOW_CLUSTER`` differs refuses to start.
    """

    __tablename__ = "installation"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, server_default=text("1"))
    cluster: Mapped[str] = mapped_column(String(63))
    claimed_at: Mapped[datetime] = mapped_column(server_default=_CLOCK)
    claimed_by: Mapped[str] = mapped_column(String(253))

    __table_args__ = (CheckConstraint("id = 1", name="single_row"),)


class SchemaCompatibility(Base):
    """The current revision's declaration: which older code heads run correctly on this schema.

    Recorded by every upgrade/downgrade (``alembic/env.py``) from the revision script's
    ``compatible_code``; read by ``/readyz`` (ADR 0006).
    """

    __tablename__ = "schema_compatibility"

    revision: Mapped[str] = mapped_column(String(32), primary_key=True)
    compatible_code: Mapped[list[str]] = mapped_column(JSONB, server_default=text("'[]'::jsonb"))
