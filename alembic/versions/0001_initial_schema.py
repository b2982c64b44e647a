"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-21 23:43:08.456220
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0001'
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True): every Leoflow table.
drops_data_on_downgrade = True


def upgrade() -> None:
    op.create_table('cluster_events',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('cluster', sa.String(length=63), nullable=False),
    sa.Column('ts', sa.DateTime(timezone=True), server_default=sa.text('clock_timestamp()'), nullable=False),
    sa.Column('kind', sa.String(length=40), nullable=False),
    sa.Column('node_id', sa.String(length=253), nullable=True),
    sa.Column('term', sa.BigInteger(), nullable=True),
    sa.Column('details', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_cluster_events'))
    )
    op.create_index('ix_cluster_events_cluster_id', 'cluster_events', ['cluster', 'id'], unique=False)
    op.create_table('cluster_leadership',
    sa.Column('cluster', sa.String(length=63), nullable=False),
    sa.Column('term', sa.BigInteger(), nullable=False),
    sa.Column('node_id', sa.String(length=253), nullable=False),
    sa.Column('since', sa.DateTime(timezone=True), server_default=sa.text('clock_timestamp()'), nullable=False),
    sa.PrimaryKeyConstraint('cluster', name=op.f('pk_cluster_leadership'))
    )
    op.create_table('cluster_nodes',
    sa.Column('cluster', sa.String(length=63), nullable=False),
    sa.Column('node_id', sa.String(length=253), nullable=False),
    sa.Column('api_url', sa.String(length=500), nullable=True),
    sa.Column('version', sa.String(length=50), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('last_seen', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('is_leader', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('state', sa.String(length=10), server_default=sa.text("'up'"), nullable=False),
    sa.PrimaryKeyConstraint('cluster', 'node_id', name=op.f('pk_cluster_nodes'))
    )
    op.create_table('dags',
    sa.Column('dag_id', sa.String(length=50), nullable=False),
    sa.Column('current_version_id', sa.BigInteger(), nullable=True),
    sa.Column('paused', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('deleted', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('schedule', sa.String(length=100), nullable=True),
    sa.Column('next_run_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('dag_id', name=op.f('pk_dags'))
    )
    op.create_index('ix_dags_due', 'dags', ['next_run_at'], unique=False, postgresql_where=sa.text('NOT paused AND NOT deleted'))
    op.create_table('leader_terms',
    sa.Column('term', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('cluster', sa.String(length=63), nullable=False),
    sa.Column('node_id', sa.String(length=253), nullable=False),
    sa.Column('backend_pid', sa.Integer(), nullable=True),
    sa.Column('acquired_at', sa.DateTime(timezone=True), server_default=sa.text('clock_timestamp()'), nullable=False),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('end_reason', sa.Text(), nullable=True),
    sa.PrimaryKeyConstraint('term', name=op.f('pk_leader_terms'))
    )
    op.create_index('ix_leader_terms_cluster_term', 'leader_terms', ['cluster', 'term'], unique=False)
    op.create_table('dag_versions',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('dag_id', sa.String(length=50), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('spec', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('spec_hash', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['dag_id'], ['dags.dag_id'], name=op.f('fk_dag_versions_dag_id_dags'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dag_versions')),
    sa.UniqueConstraint('dag_id', 'version', name=op.f('uq_dag_versions_dag_id_version'))
    )
    # dags <-> dag_versions reference each other; this side is added once both exist.
    op.create_foreign_key(op.f('fk_dags_current_version_id_dag_versions'), 'dags', 'dag_versions',
                          ['current_version_id'], ['id'], ondelete='SET NULL')
    op.create_table('dag_runs',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('dag_id', sa.String(length=50), nullable=False),
    sa.Column('run_id', sa.String(length=250), nullable=False),
    sa.Column('dag_version_id', sa.BigInteger(), nullable=False),
    sa.Column('run_type', sa.String(length=20), nullable=False),
    sa.Column('logical_date', sa.DateTime(timezone=True), nullable=True),
    sa.Column('state', sa.String(length=20), server_default=sa.text("'queued'"), nullable=False),
    sa.Column('conf', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('term', sa.BigInteger(), nullable=True),
    sa.ForeignKeyConstraint(['dag_id'], ['dags.dag_id'], name=op.f('fk_dag_runs_dag_id_dags'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['dag_version_id'], ['dag_versions.id'], name=op.f('fk_dag_runs_dag_version_id_dag_versions')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_dag_runs')),
    sa.UniqueConstraint('dag_id', 'run_id', name=op.f('uq_dag_runs_dag_id_run_id'))
    )
    op.create_index('ix_dag_runs_active', 'dag_runs', ['dag_id', 'id'], unique=False, postgresql_where=sa.text("state IN ('queued', 'running')"))
    op.create_index('ix_dag_runs_dag_id_id', 'dag_runs', ['dag_id', 'id'], unique=False)
    op.create_index('uq_dag_runs_scheduled_logical_date', 'dag_runs', ['dag_id', 'logical_date'], unique=True, postgresql_where=sa.text("run_type = 'scheduled'"))
    op.create_table('task_instances',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('run_pk', sa.BigInteger(), nullable=False),
    sa.Column('task_id', sa.String(length=50), nullable=False),
    sa.Column('state', sa.String(length=20), server_default=sa.text("'pending'"), nullable=False),
    sa.Column('try_number', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('max_tries', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('pending_upstreams', sa.Integer(), server_default=sa.text('0'), nullable=False),
    sa.Column('next_try_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('queued_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('timeout_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('term', sa.BigInteger(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['dag_runs.id'], name=op.f('fk_task_instances_run_pk_dag_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_task_instances')),
    sa.UniqueConstraint('run_pk', 'task_id', name=op.f('uq_task_instances_run_pk_task_id'))
    )
    op.create_index('ix_task_instances_active', 'task_instances', ['state', 'id'], unique=False, postgresql_where=sa.text("state IN ('pending', 'queued', 'running', 'up_for_retry')"))
    op.create_index('ix_task_instances_ready', 'task_instances', ['id'], unique=False, postgresql_where=sa.text("state = 'pending' AND pending_upstreams = 0"))
    op.create_table('task_tries',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('task_instance_id', sa.BigInteger(), nullable=False),
    sa.Column('try_number', sa.Integer(), nullable=False),
    sa.Column('state', sa.String(length=20), server_default=sa.text("'queued'"), nullable=False),
    sa.Column('executor_ref', sa.String(length=253), nullable=True),
    sa.Column('term', sa.BigInteger(), nullable=False),
    sa.Column('queued_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('ended_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('claimed_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('claimed_by', sa.String(length=253), nullable=True),
    sa.Column('logs_shipped_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('resource_deleted_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['task_instance_id'], ['task_instances.id'], name=op.f('fk_task_tries_task_instance_id_task_instances'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_task_tries')),
    sa.UniqueConstraint('task_instance_id', 'try_number', name=op.f('uq_task_tries_task_instance_id_try_number'))
    )
    op.create_index('ix_task_tries_unshipped', 'task_tries', ['ended_at'], unique=False, postgresql_where=sa.text('ended_at IS NOT NULL AND logs_shipped_at IS NULL'))
    op.create_index('ix_task_tries_live', 'task_tries', ['id'], unique=False, postgresql_where=sa.text("state IN ('queued', 'running', 'cancelling')"))
    op.create_table('task_logs',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('task_try_id', sa.BigInteger(), nullable=False),
    sa.Column('content', sa.Text(), server_default=sa.text("''"), nullable=False),
    sa.Column('truncated', sa.Boolean(), server_default=sa.text('false'), nullable=False),
    sa.Column('size_bytes', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.ForeignKeyConstraint(['task_try_id'], ['task_tries.id'], name=op.f('fk_task_logs_task_try_id_task_tries'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_task_logs')),
    sa.UniqueConstraint('task_try_id', name=op.f('uq_task_logs_task_try_id'))
    )


def downgrade() -> None:
    op.drop_constraint(op.f('fk_dags_current_version_id_dag_versions'), 'dags', type_='foreignkey')
    op.drop_table('task_logs')
    op.drop_index('ix_task_tries_live', table_name='task_tries', postgresql_where=sa.text("state IN ('queued', 'running', 'cancelling')"))
    op.drop_index('ix_task_tries_unshipped', table_name='task_tries', postgresql_where=sa.text('ended_at IS NOT NULL AND logs_shipped_at IS NULL'))
    op.drop_table('task_tries')
    op.drop_index('ix_task_instances_ready', table_name='task_instances', postgresql_where=sa.text("state = 'pending' AND pending_upstreams = 0"))
    op.drop_index('ix_task_instances_active', table_name='task_instances', postgresql_where=sa.text("state IN ('pending', 'queued', 'running', 'up_for_retry')"))
    op.drop_table('task_instances')
    op.drop_index('uq_dag_runs_scheduled_logical_date', table_name='dag_runs', postgresql_where=sa.text("run_type = 'scheduled'"))
    op.drop_index('ix_dag_runs_dag_id_id', table_name='dag_runs')
    op.drop_index('ix_dag_runs_active', table_name='dag_runs', postgresql_where=sa.text("state IN ('queued', 'running')"))
    op.drop_table('dag_runs')
    op.drop_table('dag_versions')
    op.drop_index('ix_leader_terms_cluster_term', table_name='leader_terms')
    op.drop_table('leader_terms')
    op.drop_index('ix_dags_due', table_name='dags', postgresql_where=sa.text('NOT paused AND NOT deleted'))
    op.drop_table('dags')
    op.drop_table('cluster_nodes')
    op.drop_table('cluster_leadership')
    op.drop_index('ix_cluster_events_cluster_id', table_name='cluster_events')
    op.drop_table('cluster_events')
