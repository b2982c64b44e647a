"""Checks that hold a value to its row of the limits table (:mod:`leoflow.model.limits`).

Each function raises :class:`~leoflow.errors.ValidationFailed` naming the path it was given (and,
for nested values, the path of the offending part), never another exception, whatever the
value: these run on decoded user input before anything else looks at it.

Nested values are walked without recursion (a value nested 100,000 deep is refused at the
limit, not with ``RecursionError``), stopping at the first budget exceeded.
"""

from __future__ import annotations

from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model.limits import Documents


def check_document_shape(document: Any, path: str, limit: Documents) -> None:
    """Hold a decoded document (a JSON body) to the nesting and value budget of ``limit``.

    YAML texts are held to it while they are read (:mod:`leoflow.model.yaml_loader`); JSON has
    no aliases, so its size is its length and only the shape needs a look.
    """
    values = 0
    stack: list[tuple[Any, int]] = [(document, 0)]
    while stack:
        item, depth = stack.pop()
        values += 1
        if values > limit.max_values:
            raise ValidationFailed(path, f"holds more than {limit.max_values:,} values")
        if isinstance(item, dict | list):
            if depth + 1 > limit.max_depth:
                raise ValidationFailed(path, f"is nested more than {limit.max_depth} levels deep")
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
