"""Task outputs: what a try's success hands on, stored with it

ADR 0014, decision 1: a task that declares ``outputs:`` writes one JSON object of at most 4,095
bytes, which the leader checks and stores in ``task_tries.outputs`` by the same statement that
records the try's success, with ``task_tries.outputs_bytes``, its size as written (aggregate sizes
are summed by SQL without detoasting the values). ``try_outcomes.outputs`` carries what a local
try wrote when another replica reports its outcome. All three are NULL for every existing row and
every task without declarations: adding them rewrites no table.

Only code at this revision may run on it (ADR 0006): older code re-validates stored specs with
``no_unknown`` and would fail the runs of every DAG version that declares outputs, and it would
record their successes without them.

The downgrade drops the three columns, and with them every stored output.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29 02:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0014'
down_revision: str | Sequence[str] | None = '0013'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: Stored outputs are lost on the way down.
drops_data_on_downgrade = True

#: Only code that knows ``outputs:`` (see the docstring).
compatible_code: tuple[str, ...] = ()


def upgrade() -> None:
    op.add_column('task_tries', sa.Column('outputs', postgresql.JSONB(astext_type=sa.Text()), nullable=True))
    op.add_column('task_tries', sa.Column('outputs_bytes', sa.Integer(), nullable=True))
    op.add_column('try_outcomes', sa.Column('outputs', sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column('try_outcomes', 'outputs')
    op.drop_column('task_tries', 'outputs_bytes')
    op.drop_column('task_tries', 'outputs')
