"""Pools, priorities and max_active_tasks

pools: named pools of task slots (the ``default`` pool is LEOFLOW_PARALLELISM and not stored).
task_instances.pool / .priority: copied from the spec when a run starts; ix_task_instances_ready
becomes (pool, priority DESC, id), so the scheduler takes the best ready tasks of each pool with
free slots by one index range each; ix_task_instances_pool_slots counts the slots in use per pool.
dags.max_active_tasks: the current version's limit, read by the queueing statement.

Backward compatible with the previous release: new nullable columns and a constant default (no
table rewrite). Rows without a pool (written before this migration, or by the previous release
during a rolling upgrade) are classified by the scheduler from their spec when they are ready;
until then a queued or running one counts against the default pool.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 15:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0008'
down_revision: str | Sequence[str] | None = '0007'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: pools, task priorities and pools, max_active_tasks.
drops_data_on_downgrade = True

#: Code at 0007 runs correctly on this schema (ADR 0006): it never reads the new columns or table,
#: its ready scan still has an index to use, and the rows it writes without a pool are classified
#: by a new leader; a rolling upgrade keeps it ready. Code at 0006 as well, as 0007 declares.
compatible_code = ("0006", "0007")

READY = "state = 'pending' AND pending_upstreams = 0"
SLOTS = "state IN ('queued', 'running')"


def upgrade() -> None:
    op.create_table('pools',
    sa.Column('name', sa.String(length=50), nullable=False),
    sa.Column('slots', sa.Integer(), nullable=False),
    sa.Column('description', sa.Text(), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_pools')),
    )
    op.add_column('dags', sa.Column('max_active_tasks', sa.Integer(), nullable=True))
    op.add_column('task_instances', sa.Column('pool', sa.String(length=50), nullable=True))
    op.add_column('task_instances', sa.Column('priority', sa.Integer(), server_default=sa.text('0'), nullable=False))
    op.drop_index('ix_task_instances_ready', table_name='task_instances', postgresql_where=sa.text(READY))
    op.create_index('ix_task_instances_ready', 'task_instances', ['pool', sa.text('priority DESC'), 'id'],
                    unique=False, postgresql_where=sa.text(READY))
    op.create_index('ix_task_instances_pool_slots', 'task_instances', ['pool'], unique=False,
                    postgresql_where=sa.text(SLOTS))


def downgrade() -> None:
    op.drop_index('ix_task_instances_pool_slots', table_name='task_instances', postgresql_where=sa.text(SLOTS))
    op.drop_index('ix_task_instances_ready', table_name='task_instances', postgresql_where=sa.text(READY))
    op.create_index('ix_task_instances_ready', 'task_instances', ['id'], unique=False,
                    postgresql_where=sa.text(READY))
    op.drop_column('task_instances', 'priority')
    op.drop_column('task_instances', 'pool')
    op.drop_column('dags', 'max_active_tasks')
    op.drop_table('pools')
