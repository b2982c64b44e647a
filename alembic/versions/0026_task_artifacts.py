"""The index of task artifacts: which object holds each output artifact of each try

``task_artifacts`` has one row per try and declared output artifact: its kind (file or
directory), the object key in the log archive's bucket (``artifacts/…``), its size before and after
compression, the number of entries, the sha256 of the stored object, and whether it is complete
(written whole, and the row added after the object). A row without an object records why there
is none (missing, over a limit, storage refused). Rows go with their try (cascade); retention
queues the objects in ``log_archive_garbage`` before the rows go.

A new table older code never reads or writes: code at 0025 runs on this schema unchanged (it
handles no artifacts). The downgrade drops the index (the objects stay in storage, unreferenced).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29 11:45:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0026'
down_revision: str | Sequence[str] | None = '0025'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The artifacts' index is lost on the way down (the objects stay, unreferenced).
drops_data_on_downgrade = True

#: A new table older code never reads (see the docstring).
compatible_code: tuple[str, ...] = ("0025",)


def upgrade() -> None:
    op.create_table(
        'task_artifacts',
        sa.Column('task_try_id', sa.BigInteger(), nullable=False),
        sa.Column('name', sa.String(length=64), nullable=False),
        sa.Column('kind', sa.String(length=16), nullable=True),
        sa.Column('object_key', sa.String(length=400), nullable=True),
        sa.Column('size_bytes', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('stored_bytes', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('files', sa.Integer(), server_default=sa.text('0'), nullable=False),
        sa.Column('digest', sa.String(length=80), nullable=True),
        sa.Column('complete', sa.Boolean(), server_default=sa.text('false'), nullable=False),
        sa.Column('problem', sa.Text(), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.ForeignKeyConstraint(['task_try_id'], ['task_tries.id'],
                                name=op.f('fk_task_artifacts_task_try_id_task_tries'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_try_id', 'name', name=op.f('pk_task_artifacts')),
    )


def downgrade() -> None:
    op.drop_table('task_artifacts')
