"""Leoflow's configuration: one typed, grouped object loaded once from ``LEOFLOW_*``.

- :mod:`.declared` — every variable once: name, default, parser, meaning (the README table and
  the benchmarks read it too);
- :mod:`.groups` — the frozen :class:`Settings` and its groups, defaults taken from there;
- :mod:`.loader` — :func:`load_settings`, the only code that reads ``LEOFLOW_*`` from the
  environment.
"""

from leoflow.model.run_context import ENV_PREFIX
from leoflow.settings.declared import MINIMUM_POOL_SIZE, VARIABLES, Variable
from leoflow.settings.groups import (
    ApiSettings,
    ApiToken,
    ClientSettings,
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
from leoflow.settings.loader import EnvironmentReader, load_settings, parse_api_tokens, validate_database_url

__all__ = [
    "ENV_PREFIX", "MINIMUM_POOL_SIZE", "VARIABLES", "ApiSettings", "ApiToken", "ClientSettings", "ClusterSettings",
    "DagFilesSettings", "DatabaseSettings", "ElectionSettings", "EnvironmentReader", "ExecutorKind",
    "ExecutorSettings", "KubernetesSettings", "LogFormat", "LoggingSettings", "NotifySettings", "RetentionSettings",
    "SchedulerSettings", "Settings", "Variable", "load_settings", "parse_api_tokens", "validate_database_url",
]
