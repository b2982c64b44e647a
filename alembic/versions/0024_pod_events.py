"""Kubernetes events of each try's pod, kept with the try

``pod_events`` holds the core/v1 Events whose involvedObject is a try's pod (``Scheduled``,
``FailedScheduling``, ``Pulling``, ``FailedMount``, ``BackOff``, ``Killing``, …), one row per
event object (its uid): the API server aggregates a repeated event into one object whose ``count``
and ``lastTimestamp`` grow, and the row follows it. The executor keeps at most
``MAX_POD_EVENTS_PER_TRY`` rows per try, each message cut to ``MAX_POD_EVENT_MESSAGE`` characters
(:mod:`leoflow.model.limits`). Rows go with their try (cascade), so retention needs nothing new.

A new table older code never reads or writes: code at 0023 runs on this schema unchanged (it
collects no events). The downgrade drops the table and the events in it.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29 11:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0024'
down_revision: str | Sequence[str] | None = '0023'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The stored events are lost on the way down.
drops_data_on_downgrade = True

#: A new table older code never reads (see the docstring).
compatible_code: tuple[str, ...] = ("0023",)


def upgrade() -> None:
    op.create_table(
        'pod_events',
        sa.Column('task_try_id', sa.BigInteger(), nullable=False),
        sa.Column('uid', sa.String(length=64), nullable=False),
        sa.Column('type', sa.String(length=16), nullable=False),
        sa.Column('reason', sa.String(length=128), nullable=False),
        sa.Column('message', sa.Text(), nullable=False),
        sa.Column('container', sa.String(length=63), nullable=True),
        sa.Column('count', sa.Integer(), server_default=sa.text('1'), nullable=False),
        sa.Column('first_seen', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_seen', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['task_try_id'], ['task_tries.id'], name=op.f('fk_pod_events_task_try_id_task_tries'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_try_id', 'uid', name=op.f('pk_pod_events')),
    )


def downgrade() -> None:
    op.drop_table('pod_events')
