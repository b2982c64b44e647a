"""Mapped task instances: a task expanded over a list is N task-instance rows, keyed by ``map_index``

ADR 0014, decision 3. ``task_instances.map_index`` is −1 for every unmapped (or not yet expanded)
row and 0..N−1 for the instances of a mapped task; ``map_count`` is N once the task expanded
(NULL: not expanded, or cleared for a re-expansion). The unique key of a task instance becomes
``(run_pk, task_id, map_index)``; the old unique ``(run_pk, task_id)`` is dropped in the same
revision. ``max_parallel`` is the task's bound on its instances queued or running at once, copied
onto every instance when the task expands, so the queueing statement applies it beside pools.

Adding ``map_index`` with a constant default rewrites no table on PostgreSQL ≥ 11; building the new
unique index reads ``task_instances`` once under the migration's lock (measured by the migration
tests on the harness; an install with tens of millions of rows should prune with retention first).

Only code at this revision may run on it (ADR 0006): older code's ``ON CONFLICT (run_pk,
task_id)`` needs the index this revision drops, and an older leader would meet mapped rows it
cannot tell apart. The downgrade refuses while mapped rows exist (naming how many), because
putting the old unique key back would fail on them or, worse, silently drop instances.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29 05:10:00
"""

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = '0016'
down_revision: str | Sequence[str] | None = '0015'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
#: The downgrade drops the three columns, but refuses while mapped rows exist, the only rows whose
#: columns hold anything (an expansion's count and bound).
drops_data_on_downgrade = True

#: Only code that keys task instances by map index (see the docstring).
compatible_code: tuple[str, ...] = ()


def upgrade() -> None:
    op.add_column('task_instances', sa.Column('map_index', sa.Integer(), server_default=sa.text('-1'),
                                              nullable=False))
    op.add_column('task_instances', sa.Column('map_count', sa.Integer(), nullable=True))
    op.add_column('task_instances', sa.Column('max_parallel', sa.Integer(), nullable=True))
    op.create_unique_constraint('uq_task_instances_run_pk_task_id_map_index', 'task_instances',
                                ['run_pk', 'task_id', 'map_index'])
    op.drop_constraint('uq_task_instances_run_pk_task_id', 'task_instances', type_='unique')
    op.create_index('ix_task_instances_map_slots', 'task_instances', ['run_pk', 'task_id'], unique=False,
                    postgresql_where=sa.text("max_parallel IS NOT NULL AND state IN ('queued', 'running')"))


def downgrade() -> None:
    mapped = op.get_bind().execute(sa.text("SELECT count(*) FROM task_instances WHERE map_index >= 0")).scalar()
    if mapped:
        raise RuntimeError(f"cannot downgrade below 0016: {mapped} mapped task instances exist "
                           "(delete their runs, or let retention prune them, first)")
    op.create_unique_constraint('uq_task_instances_run_pk_task_id', 'task_instances', ['run_pk', 'task_id'])
    op.drop_index('ix_task_instances_map_slots', table_name='task_instances')
    op.drop_constraint('uq_task_instances_run_pk_task_id_map_index', 'task_instances', type_='unique')
    op.drop_column('task_instances', 'max_parallel')
    op.drop_column('task_instances', 'map_count')
    op.drop_column('task_instances', 'map_index')
