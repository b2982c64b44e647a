"""The settings a standalone process runs with, derived from the user's settings.

Standalone mode forces what makes it standalone and keeps everything else the user configured:

- the executor is ``local`` (subprocesses on this machine; ``kubernetes`` is never imported);
- the database is the embedded server unless ``LEOFLOW_DATABASE_URL`` is set;
- the API listens on ``--host``/``--port``; its advertised URL is the loopback URL;
- every try's full log is archived under ``LEOFLOW_HOME/log-archive`` (``file://``) unless
  ``LEOFLOW_LOG_ARCHIVE_URL`` says where else (or ``off``);
- with no ``LEOFLOW_API_TOKENS`` (and auth enabled) the generated admin token is the only token.
"""

from __future__ import annotations

import dataclasses

from leoflow.settings import ApiToken, Settings
from leoflow.settings.groups import LogArchiveSettings


def display_url(host: str, port: int) -> str:
    """The URL a person on this machine should open (wildcard addresses shown as loopback)."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def standalone_settings(settings: Settings, *, database_url: str, host: str, port: int,
                        admin_token: ApiToken | None) -> Settings:
    url = display_url(host, port)
    tokens = settings.api.tokens or ((admin_token,) if admin_token else ())
    return settings.replace(
        database=dataclasses.replace(settings.database, url=database_url),
        api=dataclasses.replace(settings.api, host=host, port=port,
                                public_url=settings.api.public_url or url, tokens=tokens),
        client=settings.client._replace(url=url, token=tokens[0].token if tokens else settings.client.token),
        executor=dataclasses.replace(settings.executor, kind="local"),
        log_archive=_log_archive(settings),
    )


def _log_archive(settings: Settings) -> LogArchiveSettings:
    """Standalone archives every log under its home unless told otherwise: on out of the box."""
    if settings.log_archive.url is not None:
        return settings.log_archive
    return dataclasses.replace(settings.log_archive, url=(settings.home / "log-archive").absolute().as_uri())


def needs_generated_token(settings: Settings) -> bool:
    return settings.api.auth_enabled and not settings.api.tokens
