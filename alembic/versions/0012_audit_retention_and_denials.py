"""audit_events: denials counted per token, route and hour; an index for audit retention

Issue 44, item 14: each 403 wrote a row, so a read token could fill the audit log, and nothing
deleted audit events. From this revision on, a refused write (403) of a token is *counted* in one
row per (token, method, route, status, hour): ``denial_window`` is the hour the row counts,
``count`` how many refusals it holds, ``last_ts`` when the last one came (``ts`` is the first);
``uq_audit_events_denials`` is what the upsert conflicts on. Every other row keeps ``count = 1``
and no window. ``ix_audit_events_ts`` lets retention (``LEOFLOW_AUDIT_RETENTION_DAYS``) find the
oldest events without reading the table.

Backward compatible with the previous release (ADR 0006): new columns that older code neither
reads nor writes (``count`` has a constant default, so no table rewrite; the others are nullable);
older code's inserts are ordinary rows with ``count = 1``.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28 23:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0012'
down_revision: str | Sequence[str] | None = '0011'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: What downgrade() loses (``leoflow db downgrade`` asks for --yes when True):
#: audit_events.count, last_ts and denial_window (how many refusals each counted row held).
drops_data_on_downgrade = True

#: New columns older code neither reads nor needs (ADR 0006); 0011's own declaration carries over.
compatible_code = ("0010", "0011")


def upgrade() -> None:
    op.add_column('audit_events', sa.Column('count', sa.Integer(), server_default=sa.text('1'), nullable=False))
    op.add_column('audit_events', sa.Column('last_ts', sa.DateTime(timezone=True), nullable=True))
    op.add_column('audit_events', sa.Column('denial_window', sa.DateTime(timezone=True), nullable=True))
    op.create_index('ix_audit_events_ts', 'audit_events', ['ts'], unique=False)
    op.create_index('uq_audit_events_denials', 'audit_events', ['actor', 'method', 'route', 'status', 'denial_window'],
                    unique=True, postgresql_where=sa.text('denial_window IS NOT NULL'))


def downgrade() -> None:
    op.drop_index('uq_audit_events_denials', table_name='audit_events',
                  postgresql_where=sa.text('denial_window IS NOT NULL'))
    op.drop_index('ix_audit_events_ts', table_name='audit_events')
    op.drop_column('audit_events', 'denial_window')
    op.drop_column('audit_events', 'last_ts')
    op.drop_column('audit_events', 'count')
