"""day-2 operations: backfills, notification outbox, audit events, per-DAG metrics, observed endings

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 10:30:00

Adds the tables behind backfills, webhook notifications (an outbox), the audit log and the
per-DAG metrics, plus ``dag_runs.reason`` / ``backfill_id`` / ``observed_at``,
``task_tries.observed_at`` and ``dag_versions.default_conf``.

Upgrading a database with history: runs and failed tries that already ended are marked observed
(``observed_at = 'infinity'``, added as a constant default, so no table rewrite) and are
therefore never announced by a notification; the per-DAG metric counters are seeded from that
history in the same transaction, so ``leoflow_dag_last_success_timestamp_seconds`` is right from
the first scrape.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0004'
down_revision: str | Sequence[str] | None = '0003'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: backfills, notifications, audit events, per-DAG metrics, default_conf, observed_at.
drops_data_on_downgrade = True

#: A frozen copy of leoflow.model.dag_metrics.DURATION_BUCKETS (a test keeps them equal).
DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0,
                    86400.0)
_NOW = sa.text('now()')
_UNOBSERVED_RUNS = "ended_at IS NOT NULL AND (observed_at IS NULL OR observed_at < ended_at)"
_UNOBSERVED_TRIES = "state = 'failed' AND observed_at IS NULL"


def upgrade() -> None:
    op.create_table('backfills',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('dag_id', sa.String(length=50), nullable=False),
    sa.Column('start_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('end_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('max_active_runs', sa.Integer(), nullable=False),
    sa.Column('rerun_failed', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('state', sa.String(length=20), server_default=sa.text("'running'"), nullable=False),
    sa.Column('next_logical_date', sa.DateTime(timezone=True), nullable=True),
    sa.Column('slots_total', sa.Integer(), nullable=False),
    sa.Column('runs_created', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('runs_rerun', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('slots_skipped', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('created_by', sa.String(length=100), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    sa.Column('completed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('term', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['dag_id'], ['dags.dag_id'], name=op.f('fk_backfills_dag_id_dags'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_backfills'))
    )
    op.create_index('ix_backfills_dag_id_id', 'backfills', ['dag_id', 'id'], unique=False)
    op.create_index('uq_backfills_running_dag', 'backfills', ['dag_id'], unique=True,
                    postgresql_where=sa.text("state = 'running'"))

    op.add_column('dag_runs', sa.Column('reason', sa.Text(), nullable=True))
    op.add_column('dag_runs', sa.Column('backfill_id', sa.BigInteger(), nullable=True))
    op.create_foreign_key(op.f('fk_dag_runs_backfill_id_backfills'), 'dag_runs', 'backfills', ['backfill_id'],
                          ['id'], ondelete='SET NULL')
    op.create_index('ix_dag_runs_backfill', 'dag_runs', ['backfill_id', 'id'], unique=False,
                    postgresql_where=sa.text('backfill_id IS NOT NULL'))
    # A constant default fills existing rows without rewriting the table; new rows get NULL.
    op.add_column('dag_runs', sa.Column('observed_at', sa.DateTime(timezone=True),
                                        server_default=sa.text("'infinity'::timestamptz"), nullable=True))
    op.alter_column('dag_runs', 'observed_at', server_default=None)
    op.execute("UPDATE dag_runs SET observed_at = NULL WHERE state IN ('queued', 'running')")
    op.create_index('ix_dag_runs_unobserved', 'dag_runs', ['id'], unique=False,
                    postgresql_where=sa.text(_UNOBSERVED_RUNS))
    op.add_column('task_tries', sa.Column('observed_at', sa.DateTime(timezone=True),
                                          server_default=sa.text("'infinity'::timestamptz"), nullable=True))
    op.alter_column('task_tries', 'observed_at', server_default=None)
    op.execute("UPDATE task_tries SET observed_at = NULL WHERE state IN ('queued', 'running', 'cancelling')")
    op.create_index('ix_task_tries_unobserved_failures', 'task_tries', ['id'], unique=False,
                    postgresql_where=sa.text(_UNOBSERVED_TRIES))
    op.add_column('dag_versions', sa.Column('default_conf', postgresql.JSONB(astext_type=sa.Text()),
                                            server_default=sa.text("'{}'::jsonb"), nullable=False))

    op.create_table('notifications',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('run_pk', sa.BigInteger(), nullable=False),
    sa.Column('dag_id', sa.String(length=50), nullable=False),
    sa.Column('run_id', sa.String(length=250), nullable=False),
    sa.Column('task_id', sa.String(length=50), nullable=True),
    sa.Column('try_number', sa.Integer(), nullable=True),
    sa.Column('event', sa.String(length=20), nullable=False),
    sa.Column('target', sa.String(length=20), nullable=False),
    sa.Column('webhook', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"),
              nullable=False),
    sa.Column('payload', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('state', sa.String(length=20), server_default=sa.text("'pending'"), nullable=False),
    sa.Column('attempts', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_attempt_at', sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    sa.Column('last_attempt_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('last_status', sa.Integer(), nullable=True),
    sa.Column('last_error', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=_NOW, nullable=False),
    sa.Column('delivered_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('give_up_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['run_pk'], ['dag_runs.id'], name=op.f('fk_notifications_run_pk_dag_runs'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_notifications'))
    )
    op.create_index('ix_notifications_dag_id_id', 'notifications', ['dag_id', 'id'], unique=False)
    op.create_index('ix_notifications_due', 'notifications', ['next_attempt_at'], unique=False,
                    postgresql_where=sa.text("state = 'pending'"))
    op.create_index('ix_notifications_run_pk', 'notifications', ['run_pk'], unique=False)

    op.create_table('audit_events',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('ts', sa.DateTime(timezone=True), server_default=sa.text('clock_timestamp()'), nullable=False),
    sa.Column('actor', sa.String(length=100), nullable=False),
    sa.Column('scope', sa.String(length=10), nullable=False),
    sa.Column('method', sa.String(length=10), nullable=False),
    sa.Column('route', sa.String(length=200), nullable=False),
    sa.Column('path', sa.String(length=1000), nullable=False),
    sa.Column('status', sa.Integer(), nullable=False),
    sa.Column('remote_addr', sa.String(length=100), nullable=True),
    sa.Column('forwarded_for', sa.String(length=300), nullable=True),
    sa.Column('user_agent', sa.String(length=300), nullable=True),
    sa.Column('dag_id', sa.String(length=50), nullable=True),
    sa.Column('run_id', sa.String(length=250), nullable=True),
    sa.Column('details', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"),
              nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_audit_events'))
    )
    op.create_index('ix_audit_events_actor_id', 'audit_events', ['actor', 'id'], unique=False)
    op.create_index('ix_audit_events_dag_id_id', 'audit_events', ['dag_id', 'id'], unique=False)

    op.create_table('dag_run_stats',
    sa.Column('dag_id', sa.String(length=50), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('runs', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('duration_sum', sa.Float(), server_default=sa.text('0'), nullable=False),
    sa.Column('bins', postgresql.ARRAY(sa.BigInteger()), nullable=False),
    sa.Column('last_ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['dag_id'], ['dags.dag_id'], name=op.f('fk_dag_run_stats_dag_id_dags'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('dag_id', 'state', name=op.f('pk_dag_run_stats'))
    )
    op.create_table('task_failure_counts',
    sa.Column('dag_id', sa.String(length=50), nullable=False),
    sa.Column('task_id', sa.String(length=50), nullable=False),
    sa.Column('failures', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.ForeignKeyConstraint(['dag_id'], ['dags.dag_id'], name=op.f('fk_task_failure_counts_dag_id_dags'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('dag_id', 'task_id', name=op.f('pk_task_failure_counts'))
    )
    _seed_metrics()


def _seed_metrics() -> None:
    """The per-DAG counters from the history that was just marked observed."""
    bounds = "ARRAY[" + ", ".join(repr(b) for b in DURATION_BUCKETS) + "]::float8[]"
    op.execute(f"""
        WITH ended AS (
            SELECT dag_id, state, ended_at,
                   greatest(extract(epoch FROM ended_at - coalesce(started_at, created_at)), 0)::float8 AS d
            FROM dag_runs
            WHERE ended_at IS NOT NULL AND state IN ('success', 'failed', 'cancelled') AND observed_at IS NOT NULL
        ), per_bin AS (
            SELECT dag_id, state, (SELECT count(*) FROM unnest({bounds}) b WHERE b < d) AS i,
                   count(*) AS n, sum(d) AS s, max(ended_at) AS m
            FROM ended GROUP BY 1, 2, 3
        )
        INSERT INTO dag_run_stats (dag_id, state, runs, duration_sum, bins, last_ended_at)
        SELECT k.dag_id, k.state, coalesce(sum(p.n), 0), coalesce(sum(p.s), 0),
               array_agg(coalesce(p.n, 0) ORDER BY g.i), max(p.m)
        FROM (SELECT DISTINCT dag_id, state FROM per_bin) k
        CROSS JOIN generate_series(0, {len(DURATION_BUCKETS)}) AS g(i)
        LEFT JOIN per_bin p ON p.dag_id = k.dag_id AND p.state = k.state AND p.i = g.i
        GROUP BY k.dag_id, k.state
    """)
    op.execute("""
        INSERT INTO task_failure_counts (dag_id, task_id, failures)
        SELECT r.dag_id, ti.task_id, count(*)
        FROM task_tries tt
        JOIN task_instances ti ON ti.id = tt.task_instance_id
        JOIN dag_runs r ON r.id = ti.run_pk
        WHERE tt.state = 'failed' AND tt.observed_at IS NOT NULL
        GROUP BY r.dag_id, ti.task_id
    """)


def downgrade() -> None:
    op.drop_table('task_failure_counts')
    op.drop_table('dag_run_stats')
    op.drop_index('ix_audit_events_dag_id_id', table_name='audit_events')
    op.drop_index('ix_audit_events_actor_id', table_name='audit_events')
    op.drop_table('audit_events')
    op.drop_index('ix_notifications_run_pk', table_name='notifications')
    op.drop_index('ix_notifications_due', table_name='notifications', postgresql_where=sa.text("state = 'pending'"))
    op.drop_index('ix_notifications_dag_id_id', table_name='notifications')
    op.drop_table('notifications')
    op.drop_column('dag_versions', 'default_conf')
    op.drop_index('ix_task_tries_unobserved_failures', table_name='task_tries',
                  postgresql_where=sa.text(_UNOBSERVED_TRIES))
    op.drop_column('task_tries', 'observed_at')
    op.drop_index('ix_dag_runs_unobserved', table_name='dag_runs', postgresql_where=sa.text(_UNOBSERVED_RUNS))
    op.drop_column('dag_runs', 'observed_at')
    op.drop_index('ix_dag_runs_backfill', table_name='dag_runs', postgresql_where=sa.text('backfill_id IS NOT NULL'))
    op.drop_constraint(op.f('fk_dag_runs_backfill_id_backfills'), 'dag_runs', type_='foreignkey')
    op.drop_column('dag_runs', 'backfill_id')
    op.drop_column('dag_runs', 'reason')
    op.drop_index('uq_backfills_running_dag', table_name='backfills', postgresql_where=sa.text("state = 'running'"))
    op.drop_index('ix_backfills_dag_id_id', table_name='backfills')
    op.drop_table('backfills')
