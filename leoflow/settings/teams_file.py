"""The teams file (``LEOFLOW_TEAMS_FILE``): read at start, reloaded when it changes, never trusted half-read.

Both the API (who may do what: :mod:`leoflow.api.access`) and the Kubernetes executor (where a
team's pods run: :mod:`leoflow.executor.kubernetes.placement`) read the teams through one
:class:`TeamsSource` each. The file is read at start (a bad file stops the process with one line
naming the place) and again when its modification time changes, looked at no more than once per
:data:`RELOAD_INTERVAL`; a bad edit keeps the last good teams and logs the problem once, so a
typo never locks everyone out of a running cluster nor moves pods anywhere.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from leoflow.errors import LeoflowError, SettingsError, ValidationFailed
from leoflow.model.access.teams import MAX_FILE_BYTES, NO_TEAMS, Teams, parse_teams
from leoflow.model.files.yaml_loader import load_yaml

log = logging.getLogger(__name__)

#: Seconds between two looks at the teams file's modification time (a stat, ~2 µs, not per request).
RELOAD_INTERVAL = 1.0


def _read_teams(path: str) -> Teams:
    """The teams file at ``path``, parsed; SettingsError with one line naming the place."""
    try:
        size = os.path.getsize(path)
        if size > MAX_FILE_BYTES:
            raise SettingsError("LEOFLOW_TEAMS_FILE", f"{path}: {size} bytes, at most {MAX_FILE_BYTES}")
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_FILE_BYTES + 1)
        return parse_teams(load_yaml(text, max_bytes=MAX_FILE_BYTES))
    except ValidationFailed as exc:
        where = f"{exc.path}: " if exc.path else ""
        raise SettingsError("LEOFLOW_TEAMS_FILE", f"{path}: {where}{exc.problem}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError("LEOFLOW_TEAMS_FILE", f"{path}: cannot be read ({exc.__class__.__name__}: "
                            f"{str(exc)[:200]})") from None
    except LeoflowError as exc:  # the YAML reader's YamlRejected: syntax or budget, with line and column
        raise SettingsError("LEOFLOW_TEAMS_FILE", f"{path}: {str(exc)[:300]}") from None


class TeamsSource:
    """The current teams: read at start, reloaded when the file changes (see the module docstring)."""

    def __init__(self, path: str | None, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._teams = NO_TEAMS
        self._mtime: float | None = None
        self._checked_at = float("-inf")
        if path is not None:
            self._mtime = os.stat(path).st_mtime if os.path.exists(path) else None
            if self._mtime is None:
                raise SettingsError("LEOFLOW_TEAMS_FILE", f"{path}: no such file")
            self._teams = _read_teams(path)

    def current(self) -> Teams:
        if self.path is None:
            return self._teams
        now = self._monotonic()
        if now - self._checked_at < RELOAD_INTERVAL:
            return self._teams
        with self._lock:
            if now - self._checked_at >= RELOAD_INTERVAL:
                self._checked_at = now
                self._reload_if_changed(self.path)
        return self._teams

    def _reload_if_changed(self, path: str) -> None:
        try:
            mtime = os.stat(path).st_mtime
        except OSError as exc:
            log.error("teams file unreadable; keeping the last good teams",
                      extra={"path": path, "error": str(exc)[:200]})
            return
        if mtime == self._mtime:
            return
        self._mtime = mtime
        try:
            self._teams = _read_teams(path)
        except SettingsError as exc:
            log.error("teams file rejected; keeping the last good teams", extra={"problem": exc.problem})
            return
        log.info("teams file reloaded", extra={"path": path, "teams": len(self._teams.teams)})
