"""Datasets: events, who produces and consumes a URI, the per-DAG coalescing queue, a run's triggering events

``dataset_events`` is the append-only history of dataset events (a producing task's success or an
outside report through the API); ``dataset_references`` says which DAGs produce and consume a URI
(rewritten at every apply, gone with the DAG); ``dataset_queue`` holds, per consuming DAG and URI,
the events not yet consumed by a run, coalesced into one row; ``dag_runs.triggering_events`` is a
dataset-triggered run's copy of what triggered it.

New tables and a nullable column older code never reads; code at 0018 refuses the spec fields
(``produces``, a mapping ``schedule``) that would make this code write them with the
``no_unknown``/schedule checks it applies to every stored spec, and such specs are only stored by
this revision's code. So code at 0018 may run on this schema (a dataset-scheduled DAG's stored
version then fails that code's compile with a reason, which is the existing behaviour for an
unknown field).

The downgrade drops every dataset event, reference and queued event, and the runs' triggering events.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-29 06:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0019'
down_revision: str | Sequence[str] | None = '0018'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: Dataset events, references, the queue and the runs' triggering events are lost on the way down.
drops_data_on_downgrade = True

#: New tables and a nullable column older code never reads (see the docstring).
compatible_code: tuple[str, ...] = ("0018",)


def upgrade() -> None:
    op.create_table(
        'dataset_events',
        sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column('uri', sa.String(length=1000), nullable=False),
        sa.Column('source', sa.String(length=10), nullable=False),
        sa.Column('dag_id', sa.String(length=50), nullable=True),
        sa.Column('run_id', sa.String(length=250), nullable=True),
        sa.Column('task_id', sa.String(length=50), nullable=True),
        sa.Column('map_index', sa.Integer(), nullable=True),
        sa.Column('try_number', sa.Integer(), nullable=True),
        sa.Column('outputs', postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column('extra', postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"),
                  nullable=False),
        sa.Column('created_by', sa.String(length=100), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_dataset_events')),
    )
    op.create_index('ix_dataset_events_uri_id', 'dataset_events', ['uri', 'id'], unique=False)
    op.create_table(
        'dataset_references',
        sa.Column('uri', sa.String(length=1000), nullable=False),
        sa.Column('role', sa.String(length=10), nullable=False),
        sa.Column('dag_id', sa.String(length=50), nullable=False),
        sa.Column('task_id', sa.String(length=50), nullable=False),
        sa.ForeignKeyConstraint(['dag_id'], ['dags.dag_id'], name=op.f('fk_dataset_references_dag_id_dags'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('uri', 'role', 'dag_id', 'task_id', name=op.f('pk_dataset_references')),
    )
    op.create_index('ix_dataset_references_dag_id', 'dataset_references', ['dag_id'], unique=False)
    op.create_table(
        'dataset_queue',
        sa.Column('dag_id', sa.String(length=50), nullable=False),
        sa.Column('uri', sa.String(length=1000), nullable=False),
        sa.Column('first_event_id', sa.BigInteger(), nullable=False),
        sa.Column('last_event_id', sa.BigInteger(), nullable=False),
        sa.Column('events', sa.BigInteger(), nullable=False),
        sa.Column('first_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('last_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['dag_id'], ['dags.dag_id'], name=op.f('fk_dataset_queue_dag_id_dags'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('dag_id', 'uri', name=op.f('pk_dataset_queue')),
    )
    op.add_column('dag_runs', sa.Column('triggering_events', postgresql.JSONB(astext_type=sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column('dag_runs', 'triggering_events')
    op.drop_table('dataset_queue')
    op.drop_index('ix_dataset_references_dag_id', table_name='dataset_references')
    op.drop_table('dataset_references')
    op.drop_index('ix_dataset_events_uri_id', table_name='dataset_events')
    op.drop_table('dataset_events')
