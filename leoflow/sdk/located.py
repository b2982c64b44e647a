"""Where in the user's Python a spec problem comes from: the line that made a task, an edge or a DAG.

Leaf module of the SDK (``dag``, ``refs`` and ``script`` report through it), so that an error can
name ``etl.py:14`` without the modules that build DAGs importing each other.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

from leoflow.errors import ValidationFailed

_SDK_DIR = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class Where:
    """A place in the user's Python source."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def caller() -> Where:
    """The first frame outside this package: the user's line that called into the SDK."""
    frame = sys._getframe(1)
    while frame.f_back is not None and os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == _SDK_DIR:
        frame = frame.f_back
    return Where(frame.f_code.co_filename, frame.f_lineno)


class DagError(ValidationFailed):
    """A spec problem located in the Python source: ``etl.py:14: tasks[1].image: is required``.

    ``path`` and ``problem`` are the validator's own; ``where`` is the line that made the task
    (or the edge, or the DAG) the path points into; ``also`` the further problems, located alike.
    """

    def __init__(self, path: str, problem: str, where: Where, *, also: tuple[DagError, ...] = ()) -> None:
        super().__init__(path, problem, also=also)
        self.where = where

    def line(self) -> str:
        return f"{self.where}: {self.path}: {self.problem}" if self.path else f"{self.where}: {self.problem}"

    def lines(self) -> list[str]:
        return [self.line(), *(p.line() for p in self.also if isinstance(p, DagError))]

    def __str__(self) -> str:
        return "\n".join(self.lines())
