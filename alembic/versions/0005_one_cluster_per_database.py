"""one cluster per database, term timelines, try outcomes, schema compatibility

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 09:00:00

- ``installation``: the one cluster this database belongs to (ADR 0010). An existing database
  whose history names exactly one cluster is assigned to it here. With several clusters (the
  README used to allow sharing) nothing is assigned: the first replica to start claims the
  database and every other cluster's replicas are refused with a line naming both — their
  DAGs and runs were never separable (no table had a cluster column), so nothing is lost
  that was not already mixed. With none (a fresh or unused database) the first replica claims.
- ``cluster_leadership.timeline`` / ``leader_terms.timeline``: the WAL timeline a term began
  on (ADR 0003: a term is valid only on that timeline).
- ``try_outcomes``: outcomes of local processes reported by the replica that ran them.
- ``schema_compatibility``: the current revision's declaration, read by ``/readyz`` (ADR 0006).

Expand-only: code at 0004 ignores all of it, hence ``compatible_code``.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0005'
down_revision: str | Sequence[str] | None = '0004'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: the installation's cluster claim, try outcomes and term timelines.
drops_data_on_downgrade = True

#: Code at these heads runs correctly on this schema (ADR 0006): a rolling upgrade from 0004
#: keeps the old replicas ready.
compatible_code = ("0004",)

_KNOWN_CLUSTERS = """
SELECT cluster FROM cluster_leadership UNION SELECT cluster FROM leader_terms
UNION SELECT cluster FROM cluster_nodes UNION SELECT cluster FROM cluster_events
"""


def upgrade() -> None:
    op.create_table('installation',
    sa.Column('id', sa.Integer(), server_default=sa.text('1'), nullable=False),
    sa.Column('cluster', sa.String(length=63), nullable=False),
    sa.Column('claimed_at', sa.DateTime(timezone=True), server_default=sa.text('clock_timestamp()'), nullable=False),
    sa.Column('claimed_by', sa.String(length=253), nullable=False),
    sa.CheckConstraint('id = 1', name=op.f('ck_installation_single_row')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_installation'))
    )
    op.create_table('schema_compatibility',
    sa.Column('revision', sa.String(length=32), nullable=False),
    sa.Column('compatible_code', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'[]'::jsonb"),
              nullable=False),
    sa.PrimaryKeyConstraint('revision', name=op.f('pk_schema_compatibility'))
    )
    op.create_table('try_outcomes',
    sa.Column('task_try_id', sa.BigInteger(), nullable=False),
    sa.Column('state', sa.String(length=20), nullable=False),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('reported_by', sa.String(length=253), nullable=False),
    sa.Column('reported_at', sa.DateTime(timezone=True), server_default=sa.text('clock_timestamp()'), nullable=False),
    sa.ForeignKeyConstraint(['task_try_id'], ['task_tries.id'], name=op.f('fk_try_outcomes_task_try_id_task_tries'),
                            ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('task_try_id', name=op.f('pk_try_outcomes'))
    )
    op.add_column('cluster_leadership', sa.Column('timeline', sa.Integer(), nullable=True))
    op.add_column('leader_terms', sa.Column('timeline', sa.Integer(), nullable=True))

    clusters = [row[0] for row in op.get_bind().execute(sa.text(_KNOWN_CLUSTERS))]
    if len(clusters) == 1:
        op.get_bind().execute(sa.text(
            "INSERT INTO installation (id, cluster, claimed_by) VALUES (1, :cluster, 'migration 0005')"),
            {"cluster": clusters[0]})


def downgrade() -> None:
    op.drop_column('leader_terms', 'timeline')
    op.drop_column('cluster_leadership', 'timeline')
    op.drop_table('try_outcomes')
    op.drop_table('schema_compatibility')
    op.drop_table('installation')
