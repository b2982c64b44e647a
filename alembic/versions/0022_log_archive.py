"""The log archive's index: which objects hold each container's log of each try, and what is left to delete

``log_archives`` says, per try and container, how much of the output is archived (contiguously
from byte 0), in how many objects and whether it is complete; ``log_archive_chunks`` lists the
objects with the byte range each holds; ``log_archive_garbage`` queues the objects retention must
still delete from storage after their rows went with their runs.

New tables older code never reads or writes: code at 0021 may run on this schema (it archives
nothing, and retention of that code deletes the rows by cascade, leaving the objects to a
bucket lifecycle rule).

The downgrade drops the index (the objects stay in storage, unreferenced).

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-29 08:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0022'
down_revision: str | Sequence[str] | None = '0021'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The archive's index is lost on the way down (the objects stay, unreferenced).
drops_data_on_downgrade = True

#: New tables older code never reads (see the docstring).
compatible_code: tuple[str, ...] = ("0021",)


def upgrade() -> None:
    op.create_table(
        'log_archives',
        sa.Column('task_try_id', sa.BigInteger(), nullable=False),
        sa.Column('container', sa.String(length=63), nullable=False),
        sa.Column('size_bytes', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('stored_bytes', sa.BigInteger(), server_default=sa.text('0'), nullable=False),
        sa.Column('chunks', sa.Integer(), server_default=sa.text('0'), nullable=False),
        sa.Column('complete', sa.Boolean(), server_default=sa.text('false'), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.ForeignKeyConstraint(['task_try_id'], ['task_tries.id'], name=op.f('fk_log_archives_task_try_id_task_tries'),
                                ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_try_id', 'container', name=op.f('pk_log_archives')),
    )
    op.create_table(
        'log_archive_chunks',
        sa.Column('task_try_id', sa.BigInteger(), nullable=False),
        sa.Column('container', sa.String(length=63), nullable=False),
        sa.Column('start_offset', sa.BigInteger(), nullable=False),
        sa.Column('end_offset', sa.BigInteger(), nullable=False),
        sa.Column('stored_bytes', sa.BigInteger(), nullable=False),
        sa.Column('object_key', sa.String(length=400), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.ForeignKeyConstraint(['task_try_id', 'container'], ['log_archives.task_try_id', 'log_archives.container'],
                                name=op.f('fk_log_archive_chunks_task_try_id_log_archives'), ondelete='CASCADE'),
        sa.PrimaryKeyConstraint('task_try_id', 'container', 'start_offset', name=op.f('pk_log_archive_chunks')),
    )
    op.create_table(
        'log_archive_garbage',
        sa.Column('id', sa.BigInteger(), sa.Identity(always=False), nullable=False),
        sa.Column('object_key', sa.String(length=400), nullable=False),
        sa.Column('queued_at', sa.DateTime(timezone=True), server_default=sa.text('now()'), nullable=False),
        sa.PrimaryKeyConstraint('id', name=op.f('pk_log_archive_garbage')),
    )


def downgrade() -> None:
    op.drop_table('log_archive_garbage')
    op.drop_table('log_archive_chunks')
    op.drop_table('log_archives')
