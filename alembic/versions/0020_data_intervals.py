"""Data intervals: the span of data a run is for, stored on the run

``dag_runs.data_interval_start``/``data_interval_end``: for a scheduled run, the previous and the
current fire time of its schedule (the end is the logical date); for a manual run, both its logical
date. Stored rather than recomputed, because a schedule edited later must not change what an old
run was for. ``dags.schedule`` becomes ``text``: it holds the encoding of the schedule forms
(a list of up to 20 crons does not fit the 100 characters one cron did).

Two nullable columns older code never reads or writes, and a wider column (runs it creates get NULL, which every reader
here shows as the logical date), so code at 0019 may run on this schema.

The downgrade drops the two columns (the runs' data intervals are lost) and cuts ``dags.schedule`` back
to 100 characters (a schedule list longer than that is cut; code at 0019 cannot plan a list anyway).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29 08:15:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0020'
down_revision: str | Sequence[str] | None = '0019'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The runs' data intervals are lost on the way down.
drops_data_on_downgrade = True

#: Two nullable columns older code never reads (see the docstring).
compatible_code: tuple[str, ...] = ("0019",)


def upgrade() -> None:
    op.add_column('dag_runs', sa.Column('data_interval_start', sa.DateTime(timezone=True), nullable=True))
    op.add_column('dag_runs', sa.Column('data_interval_end', sa.DateTime(timezone=True), nullable=True))
    op.alter_column('dags', 'schedule', type_=sa.Text(), existing_type=sa.String(length=100), existing_nullable=True)


def downgrade() -> None:
    op.alter_column('dags', 'schedule', type_=sa.String(length=100), existing_type=sa.Text(), existing_nullable=True,
                    postgresql_using='left(schedule, 100)')
    op.drop_column('dag_runs', 'data_interval_end')
    op.drop_column('dag_runs', 'data_interval_start')
