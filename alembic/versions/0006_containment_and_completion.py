"""Containment reasons and the completion index

dag_runs.reason (added by 0004) now also says why a run failed: its first failed task, or a
scheduler error stored on it.
dags.schedule_error: why the leader stopped creating scheduled runs of a DAG (a scheduler error).
ix_task_instances_run_active: a run's unfinished task instances, so deciding whether a run is
complete costs one index probe (the scheduler checks it in the same transaction as every task
transition that may complete a run).

Backward compatible with the previous release (a nullable column and an index).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24 09:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0006'
down_revision: str | Sequence[str] | None = '0005'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True): dags.schedule_error.
drops_data_on_downgrade = True

#: Code at these heads runs correctly on this schema (ADR 0006): older code never reads the new
#: column, and the index only speeds up its completion checks; a rolling upgrade keeps it ready.
compatible_code = ("0004", "0005")

ACTIVE = "state IN ('pending', 'queued', 'running', 'up_for_retry')"


def upgrade() -> None:
    op.add_column('dags', sa.Column('schedule_error', sa.Text(), nullable=True))
    op.create_index('ix_task_instances_run_active', 'task_instances', ['run_pk'], unique=False,
                    postgresql_where=sa.text(ACTIVE))


def downgrade() -> None:
    op.drop_index('ix_task_instances_run_active', table_name='task_instances', postgresql_where=sa.text(ACTIVE))
    op.drop_column('dags', 'schedule_error')
