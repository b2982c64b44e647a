"""ix_dag_runs_active by (dag_id, state, id)

Starting runs needs, per DAG with queued runs, how many of its runs are running and its oldest
queued ones. With the index on (dag_id, id) both were a walk over every active run of the DAG,
and the scan ranked every queued run of every DAG on each call: 0.65 s a call for a backlog of
100,000 queued runs (a catch-up, a loop of triggers), on every tick that finished a run. With
``state`` between the two, each is one index range, and the call reads what it starts.

The index is partial (queued and running runs only), so rebuilding it scans ``dag_runs`` once
and holds writes to it for that long.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28 05:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0009'
down_revision: str | Sequence[str] | None = '0008'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True): an index is rebuilt, nothing else.
drops_data_on_downgrade = False

#: Only an index's columns change: code at 0008 (and the code 0008 accepts) runs the same
#: statements on this schema, through the new index or another one.
compatible_code = ("0006", "0007", "0008")

ACTIVE = "state IN ('queued', 'running')"


def upgrade() -> None:
    op.drop_index('ix_dag_runs_active', table_name='dag_runs', postgresql_where=sa.text(ACTIVE))
    op.create_index('ix_dag_runs_active', 'dag_runs', ['dag_id', 'state', 'id'], unique=False,
                    postgresql_where=sa.text(ACTIVE))


def downgrade() -> None:
    op.drop_index('ix_dag_runs_active', table_name='dag_runs', postgresql_where=sa.text(ACTIVE))
    op.create_index('ix_dag_runs_active', 'dag_runs', ['dag_id', 'id'], unique=False,
                    postgresql_where=sa.text(ACTIVE))
