"""Task waits: ``wait_for`` conditions, ``depends_on_past`` and approval gates, and the ``waiting`` state

``task_waits`` holds one row per condition of a task instance in the new active state ``waiting``
(its trigger rule said run; a condition holds it, without a slot, until met). The two partial
indexes on the active task states take the new state, as in 0013, so "is this run complete?"
stays one index range.

Only code at this revision may run on it (ADR 0006): older code would not count ``waiting`` as
active — it would finish a run around a waiting task — and would never release it.

The downgrade drops every wait (and approval decision) and leaves the waiting tasks ``pending``:
older code queues them at once, without their conditions.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-29 08:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0021'
down_revision: str | Sequence[str] | None = '0020'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The waits and approval decisions are lost on the way down.
drops_data_on_downgrade = True

#: Only code that knows ``waiting`` (see the docstring).
compatible_code: tuple[str, ...] = ()

BEFORE = "state IN ('pending', 'queued', 'running', 'up_for_retry', 'cancelling')"
AFTER = "state IN ('pending', 'queued', 'running', 'up_for_retry', 'cancelling', 'waiting')"


def _indexes(predicate: str) -> None:
    op.create_index('ix_task_instances_active', 'task_instances', ['state', 'id'], unique=False,
                    postgresql_where=sa.text(predicate))
    op.create_index('ix_task_instances_run_active', 'task_instances', ['run_pk'], unique=False,
                    postgresql_where=sa.text(predicate))


def _drop_indexes() -> None:
    op.drop_index('ix_task_instances_active', table_name='task_instances')
    op.drop_index('ix_task_instances_run_active', table_name='task_instances')


def upgrade() -> None:
    _drop_indexes()
    _indexes(AFTER)
    op.create_table(
        'task_waits',
        sa.Column('task_instance_id', sa.BigInteger(), nullable=False),
        sa.Column('position', sa.Integer(), nullable=False),
        sa.Column('dag_id', sa.String(length=50), nullable=False),
        sa.Column('kind', sa.String(length=10), nullable=False),
        sa.Column('target', sa.String(length=1000), server_default=sa.text("''"), nullable=False),
        sa.Column('target_date', sa.DateTime(timezone=True), nullable=True),
        sa.Column('states', postgresql.ARRAY(sa.String(length=20)), nullable=True),
        sa.Column('since', sa.DateTime(timezone=True), nullable=True),
        sa.Column('state', sa.String(length=10), server_default=sa.text("'waiting'"), nullable=False),
        sa.Column('reason', sa.Text(), nullable=True),
        sa.Column('soft_fail', sa.Boolean(), server_default=sa.text('false'), nullable=False),
        sa.Column('timeout_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('check_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('try_number', sa.Integer(), server_default=sa.text('0'), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('decision', sa.String(length=10), nullable=True),
        sa.Column('decided_by', sa.String(length=100), nullable=True),
        sa.Column('comment', sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(['task_instance_id'], ['task_instances.id'],
                                name=op.f('fk_task_waits_task_instance_id_task_instances'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_instance_id', 'position', name=op.f('pk_task_waits')),
    )
    op.create_index('ix_task_waits_due', 'task_waits', ['check_at'], unique=False,
                    postgresql_where=sa.text("state = 'waiting'"))
    op.create_index('ix_task_waits_target', 'task_waits', ['kind', 'target'], unique=False,
                    postgresql_where=sa.text("state = 'waiting'"))


def downgrade() -> None:
    op.drop_index('ix_task_waits_target', table_name='task_waits', postgresql_where=sa.text("state = 'waiting'"))
    op.drop_index('ix_task_waits_due', table_name='task_waits', postgresql_where=sa.text("state = 'waiting'"))
    op.drop_table('task_waits')
    op.execute("UPDATE task_instances SET state = 'pending', reason = NULL WHERE state = 'waiting'")
    _drop_indexes()
    _indexes(BEFORE)
