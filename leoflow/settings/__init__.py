"""Leoflow's configuration: one typed, grouped object loaded once from ``LEOFLOW_*``.

- :mod:`.declared` — every variable once: name, default, parser, meaning (the table of
  docs/configuration.md and the benchmarks read it too);
- :mod:`.groups` — the frozen :class:`Settings` and its groups, defaults taken from there;
- :mod:`.loader` — :func:`load_settings`, which reads every ``LEOFLOW_*`` variable;
- :mod:`.client` — :func:`load_client_settings`, which reads only the few a client verb needs.

The names below are loaded on first use (PEP 562): ``import leoflow.settings.client`` must not
pay for the server's groups, the database URL parser and the notification model — a client
verb's whole start-up budget is about a tenth of a second (``tests/cli/test_import_graph.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leoflow.model.env_names import ENV_PREFIX
    from leoflow.settings.client import ClientSettings, load_client_settings
    from leoflow.settings.declared import MINIMUM_POOL_SIZE, VARIABLES, Variable
    from leoflow.settings.environment import EnvironmentReader
    from leoflow.settings.groups import (
        ApiSettings,
        ApiToken,
        ClusterSettings,
        DagFilesSettings,
        DatabaseSettings,
        ElectionSettings,
        ExecutorKind,
        ExecutorSettings,
        KubernetesSettings,
        LogFormat,
        LoggingSettings,
        NotifySettings,
        RetentionSettings,
        SchedulerSettings,
        Settings,
    )
    from leoflow.settings.loader import load_settings, parse_api_tokens, validate_database_url

#: Where each exported name lives.
_HOMES = {
    "ENV_PREFIX": "leoflow.model.env_names",
    "ClientSettings": "leoflow.settings.client", "load_client_settings": "leoflow.settings.client",
    "MINIMUM_POOL_SIZE": "leoflow.settings.declared", "VARIABLES": "leoflow.settings.declared",
    "Variable": "leoflow.settings.declared",
    "EnvironmentReader": "leoflow.settings.environment",
    **dict.fromkeys(("ApiSettings", "ApiToken", "ClusterSettings", "DagFilesSettings", "DatabaseSettings",
                     "ElectionSettings", "ExecutorKind", "ExecutorSettings", "KubernetesSettings", "LogFormat",
                     "LoggingSettings", "NotifySettings", "RetentionSettings", "SchedulerSettings", "Settings"),
                    "leoflow.settings.groups"),
    **dict.fromkeys(("load_settings", "parse_api_tokens", "validate_database_url"), "leoflow.settings.loader"),
}

__all__ = [
    "ENV_PREFIX", "MINIMUM_POOL_SIZE", "VARIABLES", "ApiSettings", "ApiToken", "ClientSettings", "ClusterSettings",
    "DagFilesSettings", "DatabaseSettings", "ElectionSettings", "EnvironmentReader", "ExecutorKind",
    "ExecutorSettings", "KubernetesSettings", "LogFormat", "LoggingSettings", "NotifySettings", "RetentionSettings",
    "SchedulerSettings", "Settings", "Variable", "load_client_settings", "load_settings", "parse_api_tokens",
    "validate_database_url",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
