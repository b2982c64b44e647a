"""Trigger rules, run deadlines and run commands (clear, mark)

task_instances.upstream_successes / upstream_failures / upstream_skips: how a task's finished
direct upstream tasks ended, counted by the scheduler as they end (``pending_upstreams`` keeps
counting those not finished); a task's trigger rule decides on them.
task_instances.is_leaf: nothing depends on the task; a run's final state is its leaves'.
dag_runs.run_timeout_seconds: a trigger's own run deadline; dag_runs.deadline_at: when the
leader fails the run (set at its start from the database's clock), with a partial index for
the leader's check.
run_commands: clears and marks the API records and the leader applies under its term.

Expand-only (columns with defaults, a table, indexes): ``is_leaf`` true makes every task of a
run in flight at the upgrade a leaf, i.e. the previous "any task not successful fails the run"
verdict. Code at 0006 runs on it (ADR 0006) with what it knows: while a replica of the previous
release leads during a rolling upgrade, recorded clears and marks wait (applied by the first new
leader), run deadlines are not enforced (the first new leader fails the runs already past
theirs), and DAG versions that use ``trigger_rule`` / ``run_timeout_seconds`` fail their new
runs with a readable "unknown field" reason; DAGs without the new fields run as before.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 15:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0007'
down_revision: str | Sequence[str] | None = '0006'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: run commands, run deadlines and timeouts, trigger-rule counters.
drops_data_on_downgrade = True

#: Code at these heads runs on this schema (see above for what it does not do).
compatible_code = ("0006",)

_DEADLINE = "state = 'running' AND deadline_at IS NOT NULL"


def upgrade() -> None:
    for column in ('upstream_successes', 'upstream_failures', 'upstream_skips'):
        op.add_column('task_instances', sa.Column(column, sa.Integer(), server_default=sa.text('0'), nullable=False))
    op.add_column('task_instances', sa.Column('is_leaf', sa.Boolean(), server_default=sa.text('true'),
                                              nullable=False))
    op.add_column('dag_runs', sa.Column('run_timeout_seconds', sa.Float(), nullable=True))
    op.add_column('dag_runs', sa.Column('deadline_at', sa.DateTime(timezone=True), nullable=True))
    op.create_index('ix_dag_runs_deadline', 'dag_runs', ['deadline_at'], unique=False,
                    postgresql_where=sa.text(_DEADLINE))
    op.create_table('run_commands',
    sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
    sa.Column('run_pk', sa.BigInteger(), nullable=False),
    sa.Column('kind', sa.String(length=10), nullable=False),
    sa.Column('body', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
    sa.Column('requested_by', sa.String(length=100), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('applied_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('term', sa.BigInteger(), nullable=True),
    sa.Column('outcome', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
    sa.Column('error', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['run_pk'], ['dag_runs.id'], name=op.f('fk_run_commands_run_pk_dag_runs'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_run_commands'))
    )
    op.create_index('ix_run_commands_pending', 'run_commands', ['id'], unique=False,
                    postgresql_where=sa.text('applied_at IS NULL'))
    op.create_index('ix_run_commands_run_pk', 'run_commands', ['run_pk'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_run_commands_run_pk', table_name='run_commands')
    op.drop_index('ix_run_commands_pending', table_name='run_commands', postgresql_where=sa.text('applied_at IS NULL'))
    op.drop_table('run_commands')
    op.drop_index('ix_dag_runs_deadline', table_name='dag_runs', postgresql_where=sa.text(_DEADLINE))
    op.drop_column('dag_runs', 'deadline_at')
    op.drop_column('dag_runs', 'run_timeout_seconds')
    for column in ('is_leaf', 'upstream_skips', 'upstream_failures', 'upstream_successes'):
        op.drop_column('task_instances', column)
