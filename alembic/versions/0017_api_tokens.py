"""Runtime API tokens, and who wrote an audit event

``api_tokens`` holds the tokens created through ``POST /api/v2/tokens``: name, team, role, the
SHA-256 of the secret (never the secret), its shown prefix, a required expiry, who created it,
when it was last used and when it was revoked. ``api_token_generation`` is one row whose counter
every creation and revocation raises in its own transaction; replicas poll it to reload their
token cache, which is how a revocation reaches every replica within a second.
``audit_events`` gains ``actor_kind``, ``actor_subject`` and ``team``: how the writer proved who
it is, a stable id (a token's id, an OpenID Connect ``sub``) and the team the write concerned.

New tables and nullable columns that older code neither reads nor needs (ADR 0006): code at 0016
runs on this schema (its static tokens keep working; runtime tokens simply do not exist for it).

The downgrade drops the tokens (every runtime token stops working) and the audit columns.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-29 05:20:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0017'
down_revision: str | Sequence[str] | None = '0016'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: Every runtime token, and the identity columns of the audit log, are lost on the way down.
drops_data_on_downgrade = True

#: New tables and nullable columns older code neither reads nor needs (see the docstring).
compatible_code: tuple[str, ...] = ("0016",)


def upgrade() -> None:
    op.create_table(
        'api_tokens',
        sa.Column('id', sa.String(length=16), nullable=False),
        sa.Column('name', sa.String(length=50), nullable=False),
        sa.Column('team', sa.String(length=50), nullable=True),
        sa.Column('role', sa.String(length=10), nullable=False),
        sa.Column('secret_hash', sa.String(length=64), nullable=False),
        sa.Column('prefix', sa.String(length=12), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('created_by', sa.String(length=100), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('last_used_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_api_tokens')),
        sa.UniqueConstraint('secret_hash', name=op.f('uq_api_tokens_secret_hash')),
    )
    op.create_table(
        'api_token_generation',
        sa.Column('singleton', sa.Boolean(), server_default=sa.text('true'), nullable=False),
        sa.Column('generation', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.CheckConstraint('singleton', name=op.f('ck_api_token_generation_singleton')),
        sa.PrimaryKeyConstraint('singleton', name=op.f('pk_api_token_generation')),
    )
    op.execute("INSERT INTO api_token_generation (singleton, generation) VALUES (true, 0)")
    op.add_column('audit_events', sa.Column('actor_kind', sa.String(length=10), nullable=True))
    op.add_column('audit_events', sa.Column('actor_subject', sa.String(length=200), nullable=True))
    op.add_column('audit_events', sa.Column('team', sa.String(length=50), nullable=True))


def downgrade() -> None:
    op.drop_column('audit_events', 'team')
    op.drop_column('audit_events', 'actor_subject')
    op.drop_column('audit_events', 'actor_kind')
    op.drop_table('api_token_generation')
    op.drop_table('api_tokens')
