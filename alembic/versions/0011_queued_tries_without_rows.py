"""Queued tries without rows: code older than 0010 may no longer run on this schema

ADR 0013, step 2. From this revision on, the statements that queue a task leave its try's row to
the try's first writer (the executor's claim, a report, a cancellation). Code at 0010 reads and
writes such *implicit* tries; code before it would neither find them to claim nor resubmit them
after a failover. So this revision changes no table: it declares only 0010 compatible, which
keeps older builds out of the Service (``/readyz``) and from the leader lock (the elector checks
the declaration after every grant, ADR 0006).

The downgrade writes every implicit try's row, as the statement that queued it would have, so the
schema it leaves (0010, which declares code back to 0006 compatible) holds what that code reads.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-28 14:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = '0011'
down_revision: str | Sequence[str] | None = '0010'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: it writes back the queued tries' rows older code needs and drops nothing.
drops_data_on_downgrade = False

#: Only code that copes with a queued try without its row (ADR 0013, step 1 and later).
compatible_code = ("0010",)


def upgrade() -> None:
    """Nothing to change: what this revision changes is who may run on the schema."""


def downgrade() -> None:
    op.execute("""
        INSERT INTO task_tries (id, task_instance_id, try_number, state, term, queued_at)
        SELECT coalesce(ti.queued_try_id, nextval(pg_get_serial_sequence('task_tries', 'id')::regclass)),
               ti.id, ti.try_number, 'queued', ti.term, coalesce(ti.queued_at, now())
        FROM task_instances ti
        WHERE ti.state = 'queued' AND ti.try_number > 0 AND NOT EXISTS (
            SELECT 1 FROM task_tries tt WHERE tt.task_instance_id = ti.id AND tt.try_number = ti.try_number)
        ON CONFLICT (task_instance_id, try_number) DO NOTHING""")
