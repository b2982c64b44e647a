"""Finding asyncio tasks a test left running (used by the autouse fixture in tests/conftest.py).

``asyncio.run`` cancels every task still pending when its main coroutine returns, silently. A
task nobody stopped is a leak in the code under test; :class:`LeftoverTasks` records the names
of such tasks at that moment, so the fixture can fail the test with them.
"""

from __future__ import annotations

import asyncio
import asyncio.runners
from collections.abc import Iterator
from contextlib import contextmanager

#: asyncio's own function; a watcher always calls this one, so nested watchers do not both count
#: the same leftovers (the innermost one sees them).
_CANCEL_ALL = asyncio.runners._cancel_all_tasks  # type: ignore[attr-defined]


class LeftoverTasks:
    def __init__(self) -> None:
        self.names: list[str] = []

    @contextmanager
    def watching(self) -> Iterator[LeftoverTasks]:
        previous = asyncio.runners._cancel_all_tasks  # type: ignore[attr-defined]

        def recording_cancel_all(loop: asyncio.AbstractEventLoop) -> None:
            self.names.extend(sorted(t.get_name() for t in asyncio.all_tasks(loop) if not t.done()))
            _CANCEL_ALL(loop)

        asyncio.runners._cancel_all_tasks = recording_cancel_all  # type: ignore[attr-defined]
        try:
            yield self
        finally:
            asyncio.runners._cancel_all_tasks = previous  # type: ignore[attr-defined]
