"""What the CLI's client verbs (``dags``, ``runs``, ``tasks``, ...) read from the environment.

A client verb is one or a few HTTP calls; its whole start-up budget is about a tenth of a
second, of which reading and validating every ``LEOFLOW_*`` variable of a server (and importing
the groups, the database URL parser and the notification model to do it) took a third. So a
client verb reads only the four variables it uses — where the API is, the token, the home
directory (a local standalone's stored token, :mod:`leoflow.standalone.discovery`) and the
default sync source label (``dags sync``) — through the same declarations
(:mod:`.declared`) and the same :class:`~.environment.EnvironmentReader` as
:func:`~.loader.load_settings`, which builds ``Settings.client`` with :func:`client_settings_from`
too. A server variable with a bad value therefore no longer stops a client verb: it concerns
the server, not the call.

Failure semantics: as the full loader — a bad value of one of these four raises
:class:`~leoflow.errors.SettingsError` naming the variable (exit 2 in the CLI).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import NamedTuple

from leoflow.settings import declared as v
from leoflow.settings.environment import EnvironmentReader


class ClientSettings(NamedTuple):
    """How to reach a server, and the two local things a client verb reads.

    A NamedTuple rather than a dataclass: importing :mod:`dataclasses` (and :mod:`inspect`
    behind it) costs a client verb about 10 ms of its 100.
    """

    url: str = v.URL.default
    token: str | None = v.TOKEN.default
    #: ``LEOFLOW_HOME`` with ``~`` expanded (a ``str``: nothing else of a client needs pathlib).
    home: str = os.path.expanduser(v.HOME.default)
    #: ``LEOFLOW_DAGS_SOURCE``: the label ``dags sync`` uses when ``--source`` is not given.
    dags_source: str = v.DAGS_SOURCE.default

    def __repr__(self) -> str:  # the token never reaches a log line
        return (f"ClientSettings(url={self.url!r}, token={'***' if self.token else None}, home={self.home!r}, "
                f"dags_source={self.dags_source!r})")


def client_settings_from(reader: EnvironmentReader) -> ClientSettings:
    return ClientSettings(url=reader.get(v.URL), token=reader.get(v.TOKEN),
                          home=os.path.expanduser(reader.get(v.HOME)), dags_source=reader.get(v.DAGS_SOURCE))


def load_client_settings(env: Mapping[str, str] | None = None) -> ClientSettings:
    """The client verbs' variables from ``env`` (default ``os.environ``), parsed as declared."""
    return client_settings_from(EnvironmentReader(os.environ if env is None else env))
