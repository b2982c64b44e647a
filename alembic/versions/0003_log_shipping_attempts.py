"""log shipping: per-try attempts, next attempt, and logs marked unavailable

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24 09:00:00

``task_tries.log_attempts`` / ``log_next_attempt_at`` give each try's log shipping its own
backoff and attempt budget (one unreadable log no longer stops shipping for the others);
``logs_unavailable`` says why a try's output could not be collected (its logs then count as
settled, so garbage collection proceeds). Existing rows: no attempts yet, nothing unavailable.
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0003'
down_revision: str | Sequence[str] | None = '0002'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: task_tries' log-shipping attempts and their logs-unavailable marks.
drops_data_on_downgrade = True


def upgrade() -> None:
    op.add_column('task_tries', sa.Column('log_attempts', sa.Integer(), server_default=sa.text('0'), nullable=False))
    op.add_column('task_tries', sa.Column('log_next_attempt_at', sa.DateTime(timezone=True), nullable=True))
    op.add_column('task_tries', sa.Column('logs_unavailable', sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column('task_tries', 'logs_unavailable')
    op.drop_column('task_tries', 'log_next_attempt_at')
    op.drop_column('task_tries', 'log_attempts')
