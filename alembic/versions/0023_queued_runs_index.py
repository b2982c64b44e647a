"""Queued runs, oldest first: one partial index for starting runs when many DAGs have one

``ix_dag_runs_queued`` (``id`` where ``state = 'queued'``) lets the leader read the oldest queued
runs in id order and stop at what it may start, instead of walking every DAG that has a queued
run (10,000 DAGs due at one minute made that walk ~160 ms, several times a step). Only queued runs
are in it, so it stays as small as the queue.

An index only: code at 0022 runs on this schema unchanged (it simply does not use it), and the
downgrade drops the index and no data.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29 08:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0023'
down_revision: str | Sequence[str] | None = '0022'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: An index only.
drops_data_on_downgrade = False

#: Older code neither reads nor needs the index.
compatible_code: tuple[str, ...] = ("0022",)


def upgrade() -> None:
    op.create_index('ix_dag_runs_queued', 'dag_runs', ['id'], unique=False,
                    postgresql_where=sa.text("state = 'queued'"))


def downgrade() -> None:
    op.drop_index('ix_dag_runs_queued', table_name='dag_runs')
