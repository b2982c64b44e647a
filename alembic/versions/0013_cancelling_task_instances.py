"""Task instances in ``cancelling``: a cleared task waits for its old try to be gone

Issue 44, item 6: clearing a running task made it ``pending`` and the same step queued its next
try, while the old one — a process ignoring SIGTERM, a pod with 30 s of grace — still ran. From
this revision on, a task cleared while a try of it is live becomes ``cancelling``, an *active*
state that is never queued, until the executor has confirmed the old try gone; then the leader
makes it ``pending`` (ADR 0015). The two partial indexes on the active states take the new state:
"is this run complete?" and the scan for cancelling tasks each stay one index range.

Only code at this revision may run on it (ADR 0006): older code would not count ``cancelling``
as active — it would finish the run around the task — and would never release it.

The downgrade leaves every ``cancelling`` task ``pending``, as older code's clear did; its next
try may then start before the old one is gone, as it could before.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29 00:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0013'
down_revision: str | Sequence[str] | None = '0012'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The downgrade changes states, it drops no table or column.
drops_data_on_downgrade = False

#: Only code that knows ``cancelling`` (see the docstring).
compatible_code: tuple[str, ...] = ()

BEFORE = "state IN ('pending', 'queued', 'running', 'up_for_retry')"
AFTER = "state IN ('pending', 'queued', 'running', 'up_for_retry', 'cancelling')"


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


def downgrade() -> None:
    op.execute("UPDATE task_instances SET state = 'pending', reason = NULL WHERE state = 'cancelling'")
    _drop_indexes()
    _indexes(BEFORE)
