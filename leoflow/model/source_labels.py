"""Source labels: who owns the DAGs a sync creates (``LEOFLOW_DAGS_SOURCE``, ``dags sync --source``).

A module of its own, importing nothing but :mod:`leoflow.errors`: the settings declaration and
the CLI check a label on every start, and :mod:`leoflow.model.files.dag_files` (which loads the DAG
spec model, croniter and jsonschema) would cost a client verb most of its 0.2 s budget.
"""

from __future__ import annotations

import re

from leoflow.errors import ValidationFailed

SOURCE_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
SOURCE_RULE = "must be 1-63 characters of letters, digits, '.', '_' and '-', starting and ending with a letter or digit"


def source_label(value: object, field: str = "source") -> str:
    """A valid source label, else ValidationFailed naming ``field``."""
    if not isinstance(value, str) or not SOURCE_RE.match(value):
        raise ValidationFailed(field, SOURCE_RULE)
    return value
