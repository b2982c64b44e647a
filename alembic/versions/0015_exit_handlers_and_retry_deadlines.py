"""Exit handlers and retry deadlines: the body's verdict kept apart, a retry's time budget

ADR 0014, decisions 5 and 7. ``on_exit:`` tasks run once the rest of a run is final; the leader
records what the body decided in ``dag_runs.body_state`` and ``dag_runs.body_reason`` in the same
fenced transaction that creates the exit tasks' rows, and the run's final state is derived from
them when the exit tasks end (an exit task can turn a success into a failure, never the reverse).
``task_instances.retry_deadline_at`` is ``retry_policy.max_duration_seconds`` after the first
try's start, on the database clock: no retry starts after it. All three are NULL for every
existing row and every DAG that uses neither field: adding them rewrites no table.

Only code at this revision may run on it (ADR 0006), for the same reason as 0014: older code
re-validates stored specs with ``no_unknown`` and would fail the runs of every DAG version that
declares ``on_exit`` or ``retry_policy``; it would also finish a run as soon as its body ended,
around the exit tasks.

The downgrade drops the three columns: a running run's body verdict is lost (its exit tasks,
already rows, still end it as older code ends any run) and retries lose their time budget.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29 02:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0015'
down_revision: str | Sequence[str] | None = '0014'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: A running run's body verdict and the retries' deadlines are lost on the way down.
drops_data_on_downgrade = True

#: Only code that knows ``on_exit`` and ``retry_policy`` (see the docstring).
compatible_code: tuple[str, ...] = ()


def upgrade() -> None:
    op.add_column('dag_runs', sa.Column('body_state', sa.Text(), nullable=True))
    op.add_column('dag_runs', sa.Column('body_reason', sa.Text(), nullable=True))
    op.add_column('task_instances', sa.Column('retry_deadline_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column('task_instances', 'retry_deadline_at')
    op.drop_column('dag_runs', 'body_reason')
    op.drop_column('dag_runs', 'body_state')
