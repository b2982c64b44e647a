"""Lets the CLI's client verbs talk to a local standalone without any setup.

``leoflow standalone`` prints its admin token, but after ``leoflow standalone --example`` the
README promises that ``leoflow runs list`` just works. When ``LEOFLOW_TOKEN`` is not set, the
client may use the token stored in ``LEOFLOW_HOME`` — but only when a standalone instance is
recorded (in ``standalone.lock``, by a live pid) as serving exactly the URL the client is about
to call. The stored token is therefore never sent to any other server.

Failure semantics: anything unreadable or absent means "no local instance" (``None``); the
client then proceeds without a token and gets the API's ordinary 401.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from leoflow.errors import LeoflowError
from leoflow.settings.client import ClientSettings
from leoflow.standalone.home import StandaloneHome
from leoflow.standalone.instance import InstanceLock, alive
from leoflow.standalone.token import read_admin_token

if TYPE_CHECKING:
    from leoflow.settings import Settings


def _same_url(a: str, b: str) -> bool:
    return a.rstrip("/") == b.rstrip("/")


def local_standalone_token(client: ClientSettings) -> str | None:
    """The stored admin token if a live local standalone in ``client.home`` serves ``client.url``."""
    home = StandaloneHome.at(Path(client.home))
    holder = InstanceLock(home.lock_file).read_holder()
    if holder.url is None or not alive(holder.pid) or not _same_url(holder.url, client.url):
        return None
    try:
        return read_admin_token(home.token_file)
    except LeoflowError:
        return None


def with_local_token(client: ClientSettings) -> ClientSettings:
    """``client``, with the local standalone's token filled in when none is configured."""
    if client.token:
        return client
    token = local_standalone_token(client)
    return client._replace(token=token) if token else client


def client_settings(settings: Settings) -> ClientSettings:
    """``settings.client`` with the local standalone's token (as :func:`with_local_token`)."""
    return with_local_token(settings.client)
