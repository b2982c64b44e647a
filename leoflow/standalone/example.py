"""``--example [NAME]``: apply a sample DAG shipped in the package and trigger one run of it.

A sample may hold several DAGs (YAML documents, like the ``datasets`` producer and consumer): all
are applied, and the first is triggered (the others follow from it).

It goes through the same store functions the API's ``PUT /dags`` and ``POST .../runs`` use
(:mod:`leoflow.db.stores.dags`, :mod:`leoflow.db.stores.runs.lifecycle`), in one transaction: either the DAG
is applied *and* a run is queued, or nothing changed. Triggering NOTIFYs the leader, which picks
the run up at once (or at its first tick if it is not elected yet).

Failure semantics: an invalid packaged spec raises :class:`~leoflow.errors.ValidationFailed`
(a packaging bug; tests guard against it); a database problem propagates to the caller, which
stops the embedded server and exits 1.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from importlib import resources

from leoflow.clock import SystemClock
from leoflow.db.connection.database import Database
from leoflow.model.files.yaml_loader import load_yaml_documents
from leoflow.settings import Settings

EXAMPLE = "example"


@dataclass(frozen=True)
class ExampleRun:
    dag_id: str
    run_id: str


def example_documents(name: str = EXAMPLE) -> list[object]:
    """Every DAG of ``leoflow/examples/<name>.yaml``, in file order."""
    text = resources.files("leoflow").joinpath(f"examples/{name}.yaml").read_text()
    return [document.data for document in load_yaml_documents(text)]


def example_spec_data(name: str = EXAMPLE) -> object:
    """The first (usually only) DAG of a sample: the one ``--example`` triggers."""
    return example_documents(name)[0]


async def _apply_and_trigger(settings: Settings, name: str) -> ExampleRun:
    from leoflow.db.stores.dags import apply_dag
    from leoflow.db.stores.runs.lifecycle import trigger_run
    from leoflow.model.spec.dag import parse_dag_spec

    specs = [parse_dag_spec(document) for document in example_documents(name)]
    clock = SystemClock()
    db = Database.with_pool(settings.database, application_name="leoflow-standalone", pool_size=1)
    try:
        async with db.transaction() as conn:
            for spec in reversed(specs):  # the DAGs the first one feeds exist before it runs
                applied = await apply_dag(conn, spec, clock=clock)
            run_id = await trigger_run(conn, applied.dag_id, run_id=None, conf={}, clock=clock)
    finally:
        await db.dispose()
    return ExampleRun(dag_id=applied.dag_id, run_id=run_id)


def apply_example(settings: Settings, name: str = EXAMPLE) -> ExampleRun:
    """Apply the sample DAG ``name`` and queue one run; returns its ids."""
    return asyncio.run(_apply_and_trigger(settings, name))
