"""task_instances.queued_try_id: the id of a queued task instance's current try

ADR 0013: a queued try's row may be written by its first writer (the executor's claim, a report, a
cancellation) rather than by the statement that queues it. The id is chosen when the task is
queued — the executor is handed it with the launch — so it is kept on the task instance, and
whichever writer comes first gives the row that id.

Backward compatible with the previous release (ADR 0006): one new nullable column, no default, so
no table rewrite; code at 0009 never reads it, and this release still writes every queued try's
row when it queues it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-28 11:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0010'
down_revision: str | Sequence[str] | None = '0009'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True): task_instances.queued_try_id.
drops_data_on_downgrade = True

#: A new nullable column that older code neither reads nor needs (ADR 0006).
compatible_code = ("0006", "0007", "0008", "0009")


def upgrade() -> None:
    op.add_column('task_instances', sa.Column('queued_try_id', sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column('task_instances', 'queued_try_id')
