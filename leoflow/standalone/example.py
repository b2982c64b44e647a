"""``--example [NAME]``: apply a sample DAG shipped in the package and trigger one run of it.

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
from leoflow.model.files.yaml_loader import load_yaml
from leoflow.settings import Settings

EXAMPLE = "example"


@dataclass(frozen=True)
class ExampleRun:
    dag_id: str
    run_id: str


def example_spec_data(name: str = EXAMPLE) -> object:
    """A sample DAG as shipped in ``leoflow/examples/<name>.yaml``."""
    text = resources.files("leoflow").joinpath(f"examples/{name}.yaml").read_text()
    return load_yaml(text)


async def _apply_and_trigger(settings: Settings, name: str) -> ExampleRun:
    from leoflow.db.stores.dags import apply_dag
    from leoflow.db.stores.runs.lifecycle import trigger_run
    from leoflow.model.spec.dag import parse_dag_spec

    spec = parse_dag_spec(example_spec_data(name))
    clock = SystemClock()
    db = Database.with_pool(settings.database, application_name="leoflow-standalone", pool_size=1)
    try:
        async with db.transaction() as conn:
            applied = await apply_dag(conn, spec, clock=clock)
            run_id = await trigger_run(conn, applied.dag_id, run_id=None, conf={}, clock=clock)
    finally:
        await db.dispose()
    return ExampleRun(dag_id=applied.dag_id, run_id=run_id)


def apply_example(settings: Settings, name: str = EXAMPLE) -> ExampleRun:
    """Apply the sample DAG ``name`` and queue one run; returns its ids."""
    return asyncio.run(_apply_and_trigger(settings, name))
