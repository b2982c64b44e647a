"""A DAG's pending slot: the cron slot of a ``combine: and`` schedule that waits for its datasets

``dags.pending_slot_at`` (the slot's logical date) and ``dags.pending_slot_start`` (its data
interval's start) hold at most one cron slot per DAG whose run starts once the DAG's dataset
condition is met (leoflow.model.spec.schedules.forms, leoflow.scheduler.datasets). Both null: no
slot waits. The leader sets them in the fenced statement that moves ``next_run_at`` past the slot
and clears them in the one that creates the slot's run, so a slot is run at most once.

Code at 0024 never writes a ``combine: and`` schedule and ignores the columns. The downgrade drops
them: a slot waiting at that moment is lost (its DAG waits for the next slot).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29 11:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0025'
down_revision: str | Sequence[str] | None = '0024'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: A slot waiting for its datasets is dropped with the columns.
drops_data_on_downgrade = True

#: Older code neither reads nor writes the columns.
compatible_code: tuple[str, ...] = ("0024",)


def upgrade() -> None:
    op.add_column('dags', sa.Column('pending_slot_at', sa.DateTime(timezone=True), nullable=True))
    op.add_column('dags', sa.Column('pending_slot_start', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('dags', 'pending_slot_start')
    op.drop_column('dags', 'pending_slot_at')
