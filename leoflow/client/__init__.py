"""The client of Leoflow's HTTP API, apart from the server: for scripts, notebooks and the CLI's client verbs.

:class:`Client` (synchronous) and :class:`AsyncClient` have one typed method per API operation,
generated from the OpenAPI document (:mod:`leoflow.client.operations`), answering the typed
results of :mod:`leoflow.client.models`::

    from leoflow.client import Client

    with Client() as leoflow:              # LEOFLOW_URL, LEOFLOW_TOKEN or `leoflow login`
        run = leoflow.trigger_run("etl")
        run.wait(timeout=600)

It imports nothing of the server side (only :mod:`leoflow.errors`), so a verb that asks a
replica something loads a few small modules, not the scheduler, the database driver or the
Kubernetes client; an import-linter contract keeps it so. The names below are loaded when first
used, so ``import leoflow.client.api`` (what a CLI verb needs) stays as small as it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leoflow.client.api import ApiUnavailable, ClientError
    from leoflow.client.calls import NotModified
    from leoflow.client.typed import AsyncClient, Client
    from leoflow.client.waiting import RunWaitTimeout

__all__ = ["ApiUnavailable", "AsyncClient", "Client", "ClientError", "NotModified", "RunWaitTimeout"]

_WHERE = {"ApiUnavailable": "api", "ClientError": "api", "NotModified": "calls", "AsyncClient": "typed",
          "Client": "typed", "RunWaitTimeout": "waiting"}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'leoflow.client' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"leoflow.client.{_WHERE[name]}"), name)
