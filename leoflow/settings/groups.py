"""The settings a process runs with: frozen dataclasses grouped by the part that uses them.

Defaults come from the declarations in :mod:`.declared` (never written twice); the loader
(:mod:`.loader`) builds these from the environment once, and tests build them directly. The
client verbs' group, :class:`~.client.ClientSettings`, lives in :mod:`.client` so that a client
verb can load it alone.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from leoflow.errors import SettingsError
from leoflow.settings import declared as v

if TYPE_CHECKING:
    from leoflow.model.spec.pod_policy import PodPolicy
from leoflow.settings.client import ClientSettings
from leoflow.settings.oidc import OidcSettings

ExecutorKind = Literal["kubernetes", "local", "memory"]
LogFormat = Literal["json", "text"]


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None
    pool_size: int = v.DB_POOL_SIZE.default
    statement_timeout: float = v.DB_STATEMENT_TIMEOUT.default


@dataclass(frozen=True)
class ClusterSettings:
    name: str = v.CLUSTER.default
    node_id: str = field(default_factory=socket.gethostname)


@dataclass(frozen=True)
class ApiToken:
    """A configured API credential. ``repr`` hides the secret so it never reaches a log."""

    name: str
    scope: Literal["read", "admin"]
    token: str = field(repr=False)


@dataclass(frozen=True)
class ApiSettings:
    host: str = v.HOST.default
    port: int = v.PORT.default
    public_url: str | None = v.API_URL.default
    auth_enabled: bool = v.AUTH.default == "enabled"
    tokens: tuple[ApiToken, ...] = ()
    #: Longest lifetime of a runtime API token (LEOFLOW_API_TOKEN_MAX_DAYS).
    token_max_days: int = v.API_TOKEN_MAX_DAYS.default
    #: The teams file (LEOFLOW_TEAMS_FILE); None: one implicit team.
    teams_file: str | None = v.TEAMS_FILE.default
    metrics_auth: bool = v.METRICS_AUTH.default
    max_body_bytes: int = v.MAX_BODY_BYTES.default
    #: Largest body of a DAG sync (LEOFLOW_SYNC_MAX_BODY_BYTES): every file of a directory in one request.
    sync_max_body_bytes: int = v.SYNC_MAX_BODY_BYTES.default


@dataclass(frozen=True)
class ElectionSettings:
    poll_interval: float = v.ELECTION_POLL_INTERVAL.default
    keepalive_interval: float = v.KEEPALIVE_INTERVAL.default
    leader_lease: float = v.LEADER_LEASE.default
    shutdown_grace: float = v.SHUTDOWN_GRACE.default
    scheduler_stall_timeout: float = v.SCHEDULER_STALL_TIMEOUT.default
    heartbeat_interval: float = v.HEARTBEAT_INTERVAL.default
    node_down_after: float = v.NODE_DOWN_AFTER.default


@dataclass(frozen=True)
class SchedulerSettings:
    interval: float = v.SCHEDULER_INTERVAL.default
    parallelism: int = v.PARALLELISM.default
    max_retry_delay: float = v.MAX_RETRY_DELAY.default


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str | None = v.K8S_NAMESPACE.default
    service_account: str | None = v.K8S_SERVICE_ACCOUNT.default
    image_pull_secrets: tuple[str, ...] = v.K8S_IMAGE_PULL_SECRETS.default
    #: Image of the artifact containers (leoflow.executor.kubernetes.artifact_containers); None: Leoflow's.
    artifacts_image: str | None = v.K8S_ARTIFACTS_IMAGE.default
    pending_timeout: float = v.K8S_PENDING_TIMEOUT.default
    pod_retention: float = v.K8S_POD_RETENTION.default
    #: Cluster-wide partial pod every task pod is merged over (validated at load).
    pod_template: Mapping[str, Any] = field(default_factory=dict)
    #: The pod policy (leoflow.model.spec.pod_policy): allowances, allowed service accounts, protected Secrets.
    pod_allowances: frozenset[str] = v.K8S_POD_POLICY.default
    allowed_service_accounts: tuple[str, ...] = v.K8S_ALLOWED_SERVICE_ACCOUNTS.default
    protected_secrets: tuple[str, ...] = v.K8S_PROTECTED_SECRETS.default

    def pod_policy(self) -> PodPolicy:
        """The policy every task pod is checked against (at apply, and before the pod is created)."""
        from leoflow.model.spec.pod_policy import PodPolicy  # the client verbs load settings, not the pod model

        return PodPolicy(self.pod_allowances, frozenset(self.allowed_service_accounts), self.service_account,
                         frozenset(self.protected_secrets))


def default_local_parallelism() -> int:
    return os.cpu_count() or 2


@dataclass(frozen=True)
class ExecutorSettings:
    kind: ExecutorKind = v.EXECUTOR.default  # type: ignore[assignment]
    local_parallelism: int = field(default_factory=default_local_parallelism)
    task_log_max_bytes: int = v.TASK_LOG_MAX_BYTES.default
    log_ship_attempts: int = v.LOG_SHIP_ATTEMPTS.default
    #: Seconds a try being killed may take to stop before it is killed outright.
    kill_grace: float = v.KILL_GRACE.default
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)


@dataclass(frozen=True)
class DagFilesSettings:
    """DAGs as code: the directory the leader keeps the cluster in step with, and its source label."""

    directory: Path | None = None
    source: str = v.DAGS_SOURCE.default


@dataclass(frozen=True)
class RetentionSettings:
    """How long finished runs, and audit events, are kept (0: forever)."""

    days: int = v.RETENTION_DAYS.default
    audit_days: int = v.AUDIT_RETENTION_DAYS.default


@dataclass(frozen=True)
class LogArchiveSettings:
    """Where every try's full log is archived (object storage), and what retention does to it."""

    #: ``None``: not configured (standalone then archives under its home); ``"off"``: never archive.
    url: str | None = v.LOG_ARCHIVE_URL.default
    retention: str = v.LOG_ARCHIVE_RETENTION.default
    flush_interval: float = v.LOG_ARCHIVE_FLUSH_INTERVAL.default
    timeout: float = v.LOG_ARCHIVE_TIMEOUT.default

    @property
    def active_url(self) -> str | None:
        """The URL to archive to, or None when there is no archive."""
        return None if self.url in (None, "off") else self.url


@dataclass(frozen=True)
class LoggingSettings:
    format: LogFormat = "json"
    level: str = v.LOG_LEVEL.default.upper()


@dataclass(frozen=True)
class NotifySettings:
    """Webhook notifications (leoflow.notify) and the per-DAG metrics' cardinality bounds."""

    webhook: str | None = field(default=v.NOTIFY_WEBHOOK.default, repr=False)
    events: tuple[str, ...] = v.NOTIFY_EVENTS.default
    secrets_dir: Path = Path(v.NOTIFY_SECRETS_DIR.default)
    #: ``LEOFLOW_NOTIFY_HEADER_*`` variables as (name, value) pairs; values are secrets.
    header_values: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    #: ``LEOFLOW_NOTIFY_HOSTS_*`` as (name, patterns): the hosts each header value may go to.
    header_hosts: tuple[tuple[str, str], ...] = ()
    #: ``LEOFLOW_NOTIFY_ALLOWED_HOSTS`` as written (leoflow.model.webhook_hosts parses it).
    allowed_hosts: str = v.NOTIFY_ALLOWED_HOSTS.default
    #: Addresses webhooks never reach under ``public``: the cluster's API service (``KUBERNETES_SERVICE_HOST``).
    refused_addresses: tuple[str, ...] = ()
    retry_delay: float = v.NOTIFY_RETRY_DELAY.default
    dashboard_url: str | None = v.DASHBOARD_URL.default
    metrics_max_dags: int = v.METRICS_MAX_DAGS.default
    metrics_max_tasks: int = v.METRICS_MAX_TASKS.default

    def header_value(self, env: str) -> str | None:
        return dict(self.header_values).get(env)

    def secrets(self) -> list[str]:
        """Values logs must never show (the default webhook URL carries its credential)."""
        return [v for v in (self.webhook, *(value for _, value in self.header_values)) if v]


def default_home() -> Path:
    return Path(v.HOME.default).expanduser()


@dataclass(frozen=True)
class Settings:
    """Everything a Leoflow process is configured with, grouped by the part that uses it."""

    database: DatabaseSettings
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    api: ApiSettings = field(default_factory=ApiSettings)
    client: ClientSettings = field(default_factory=ClientSettings)
    election: ElectionSettings = field(default_factory=ElectionSettings)
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    executor: ExecutorSettings = field(default_factory=ExecutorSettings)
    logging: LoggingSettings = field(default_factory=LoggingSettings)
    dag_files: DagFilesSettings = field(default_factory=DagFilesSettings)
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    log_archive: LogArchiveSettings = field(default_factory=LogArchiveSettings)
    notify: NotifySettings = field(default_factory=NotifySettings)
    oidc: OidcSettings = field(default_factory=OidcSettings)
    home: Path = field(default_factory=default_home)

    @property
    def api_url(self) -> str:
        """The URL this replica advertises to the cluster."""
        return self.api.public_url or f"http://{self.cluster.node_id}:{self.api.port}"

    @property
    def dashboard_url(self) -> str:
        """Where notifications link to: LEOFLOW_DASHBOARD_URL, else this replica's API URL."""
        return self.notify.dashboard_url or self.api_url

    def replace(self, **changes: Any) -> Settings:
        """A copy with some groups swapped; used for CLI flag overrides and tests."""
        return dataclasses.replace(self, **changes)

    def require_database_url(self) -> str:
        if not self.database.url:
            raise SettingsError(v.DATABASE_URL.name, "is not set (expected postgresql://...)")
        return self.database.url
