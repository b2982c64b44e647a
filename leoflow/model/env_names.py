"""Environment-variable names: the shape a name may take and the namespace Leoflow keeps.

A leaf: it imports nothing from Leoflow, so the spec fields, the pod model, the run context, the
settings and the executors can all share one definition without importing each other.
"""

from __future__ import annotations

import re

#: Every variable Leoflow reads starts with this. Tasks never inherit such variables from a
#: replica (they may hold secrets), and DAG specs may not set them: the run context
#: (:mod:`leoflow.model.run_context`) uses the same namespace, so a task can trust what it finds there.
ENV_PREFIX = "LEOFLOW_"

#: Where a task that declares outputs writes them (leoflow.model.outputs): a file locally, the
#: ``task`` container's termination log on Kubernetes. Given to no other task.
OUTPUTS_ENV = "LEOFLOW_OUTPUTS"

#: The run's data interval (leoflow.model.run_context): ISO 8601 in UTC, the start being a scheduled
#: run's previous fire time and the end its logical date; a manual run's logical date, twice.
DATA_INTERVAL_START_ENV = "LEOFLOW_DATA_INTERVAL_START"
DATA_INTERVAL_END_ENV = "LEOFLOW_DATA_INTERVAL_END"

#: Names a task may be given (C identifiers; Kubernetes allows more, but a name a shell cannot
#: read is a bug waiting to happen). Also the shape of an ``env_from`` prefix.
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_env_name(text: str) -> bool:
    return ENV_NAME_RE.match(text) is not None


def is_reserved(name: str) -> bool:
    """True for a name in Leoflow's namespace (any case: ``leoflow_x`` reads the same in a shell on Windows)."""
    return name.upper().startswith(ENV_PREFIX)
