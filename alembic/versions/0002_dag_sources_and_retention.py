"""DAG sync sources and retention indexes

dags.source: the sync source label owning a DAG (NULL: applied by hand).
ix_dag_runs_finished: retention's oldest-finished-first scan.
ix_dag_runs_dag_version_id: which runs still reference a DAG version.

Backward compatible with the previous release (a nullable column and two indexes).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 12:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0002'
down_revision: str | Sequence[str] | None = '0001'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: dags.source: which sync source owns each DAG.
drops_data_on_downgrade = True


def upgrade() -> None:
    op.add_column('dags', sa.Column('source', sa.String(length=63), nullable=True))
    op.create_index('ix_dag_runs_finished', 'dag_runs', ['ended_at', 'id'], unique=False,
                    postgresql_where=sa.text("state IN ('success', 'failed', 'cancelled')"))
    op.create_index('ix_dag_runs_dag_version_id', 'dag_runs', ['dag_version_id'], unique=False)


def downgrade() -> None:
    op.drop_index('ix_dag_runs_dag_version_id', table_name='dag_runs')
    op.drop_index('ix_dag_runs_finished', table_name='dag_runs',
                  postgresql_where=sa.text("state IN ('success', 'failed', 'cancelled')"))
    op.drop_column('dags', 'source')
