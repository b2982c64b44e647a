"""Cluster templates: named, versioned task shapes DAGs inline at apply

``task_templates`` holds every version of every cluster template stored through ``PUT
/api/v2/templates/{name}`` (ADR 0014, decision 6): the template document (``spec``), its hash
(the same document again is the same version), who stored it and when, and ``deleted`` (a
delete marks every version; versions are never reused). The primary key ``(name, version)`` is
the uniqueness two racing writers meet.

A new table that older code never reads: a DAG version that used a template holds an inlined
copy and a ``uses`` record that code at 0017 does not know, but such versions are only written
once this revision's code runs, and code at 0017 refuses their ``uses`` field with the same
``no_unknown`` that refuses every field it does not know. So code at 0017 may run on this schema.

The downgrade drops every cluster template (DAG versions keep their inlined copies).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-29 05:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = '0018'
down_revision: str | Sequence[str] | None = '0017'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: Every cluster template is lost on the way down (DAG versions keep their inlined copies).
drops_data_on_downgrade = True

#: A new table older code never reads (see the docstring).
compatible_code: tuple[str, ...] = ("0017",)


def upgrade() -> None:
    op.create_table(
        'task_templates',
        sa.Column('name', sa.String(length=50), nullable=False),
        sa.Column('version', sa.Integer(), nullable=False),
        sa.Column('spec', postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column('spec_hash', sa.String(length=64), nullable=False),
        sa.Column('created_by', sa.String(length=100), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('deleted', sa.Boolean(), server_default=sa.text('false'), nullable=False),
        sa.PrimaryKeyConstraint('name', 'version', name=op.f('pk_task_templates')),
    )


def downgrade() -> None:
    op.drop_table('task_templates')
