"""Leoflow's configuration: one typed, grouped object loaded once from ``LEOFLOW_*``.

Why one object: configuration read lazily all over the code (in default arguments, at import
time) makes behaviour depend on *when* a module was imported and makes tests leak into each
other. Instead the CLI calls :func:`load_settings` exactly once, applies its flag overrides, and
passes the frozen result down. Nothing in the package reads ``os.environ`` for ``LEOFLOW_*``
except this module.

Failure semantics: a bad value raises :class:`~leoflow.errors.SettingsError` naming the
variable and what is wrong, *without echoing the value* when the variable may carry a secret
(database URLs, tokens). The CLI turns it into one line on stderr and exit code 2.

Every variable is declared once in :data:`VARIABLES`; the README's configuration table is
checked against that list by a test, so documentation and code cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from leoflow.db.budget import MINIMUM_POOL_SIZE
from leoflow.errors import SettingsError

ExecutorKind = Literal["kubernetes", "local", "memory"]
LogFormat = Literal["json", "text"]


@dataclass(frozen=True)
class Variable:
    """One ``LEOFLOW_*`` environment variable: its default and what it means (for the docs)."""

    name: str
    default: str
    meaning: str
    secret: bool = False


#: Every environment variable Leoflow reads, in documentation order.
VARIABLES: tuple[Variable, ...] = (
    Variable("LEOFLOW_DATABASE_URL", "(none)", "PostgreSQL URL (`postgresql://user:pass@host:5432/db`). "
             "Standalone mode starts an embedded server when unset.", secret=True),
    Variable("LEOFLOW_DB_POOL_SIZE", "10", "Database connections per replica besides its lock connection, "
             "split between the API and the leader's work (at least 4; see docs/adr/0007)."),
    Variable("LEOFLOW_DB_STATEMENT_TIMEOUT", "30", "Seconds before a database statement is cancelled."),
    Variable("LEOFLOW_CLUSTER", "default", "Cluster name; names the election lock, so two installs can "
             "share one database."),
    Variable("LEOFLOW_NODE_ID", "(hostname)", "This replica's identity in elections, events and logs."),
    Variable("LEOFLOW_HOST", "0.0.0.0", "Address the HTTP API listens on."),
    Variable("LEOFLOW_PORT", "8080", "Port the HTTP API listens on."),
    Variable("LEOFLOW_API_URL", "http://<node_id>:<port>", "URL other replicas and tools use to reach "
             "this replica (shown by /api/v2/cluster/nodes)."),
    Variable("LEOFLOW_URL", "http://127.0.0.1:8080", "API URL the CLI's client commands talk to."),
    Variable("LEOFLOW_TOKEN", "(none)", "Bearer token the CLI's client commands send.", secret=True),
    Variable("LEOFLOW_AUTH", "enabled", "`enabled` or `disabled`; serving without tokens requires `disabled`."),
    Variable("LEOFLOW_API_TOKENS", "(none)", "Comma-separated `name:scope:token` entries, scope `read` or "
             "`admin`.", secret=True),
    Variable("LEOFLOW_API_TOKENS_FILE", "(none)", "File with one `name:scope:token` entry per line."),
    Variable("LEOFLOW_METRICS_AUTH", "false", "Require a token on /metrics."),
    Variable("LEOFLOW_MAX_BODY_BYTES", "1048576", "Largest accepted request body (413 above it)."),
    Variable("LEOFLOW_EXECUTOR", "kubernetes", "`kubernetes`, `local` (subprocesses) or `memory` (tests)."),
    Variable("LEOFLOW_HOME", "~/.local/share/leoflow", "Standalone data, local task logs and work dirs."),
    Variable("LEOFLOW_LOG_FORMAT", "json off a TTY, else text", "`json` (one object per line) or `text`."),
    Variable("LEOFLOW_LOG_LEVEL", "INFO", "DEBUG, INFO, WARNING or ERROR."),
    Variable("LEOFLOW_ELECTION_POLL_INTERVAL", "5", "Seconds between a follower's slow-path lock attempts."),
    Variable("LEOFLOW_KEEPALIVE_INTERVAL", "1", "Seconds between the leader's lock ownership checks."),
    Variable("LEOFLOW_LEADER_LEASE", "10", "Seconds without a successful keepalive after which a leader "
             "stops acting on its own."),
    Variable("LEOFLOW_SHUTDOWN_GRACE", "10", "Seconds in-flight work may finish on SIGTERM before release."),
    Variable("LEOFLOW_SCHEDULER_STALL_TIMEOUT", "60", "Seconds without scheduler progress before the "
             "leader gives up leadership."),
    Variable("LEOFLOW_HEARTBEAT_INTERVAL", "3", "Seconds between membership heartbeats."),
    Variable("LEOFLOW_NODE_DOWN_AFTER", "15", "Seconds without a heartbeat before a node is marked down."),
    Variable("LEOFLOW_SCHEDULER_INTERVAL", "1", "Seconds between scheduler ticks (triggers wake it at once)."),
    Variable("LEOFLOW_PARALLELISM", "128", "Most task instances queued or running at once, cluster-wide."),
    Variable("LEOFLOW_MAX_RETRY_DELAY", "3600", "Cap in seconds on a task's exponential retry delay."),
    Variable("LEOFLOW_LOCAL_PARALLELISM", "(CPU count)", "Most concurrent subprocesses of the local executor."),
    Variable("LEOFLOW_TASK_LOG_MAX_BYTES", "1048576", "Per-try cap on stored task logs (the tail is kept)."),
    Variable("LEOFLOW_K8S_NAMESPACE", "(pod namespace, else default)", "Namespace task pods run in."),
    Variable("LEOFLOW_K8S_SERVICE_ACCOUNT", "(none)", "Service account for task pods."),
    Variable("LEOFLOW_K8S_IMAGE_PULL_SECRETS", "(none)", "Comma-separated image pull secret names for task pods."),
    Variable("LEOFLOW_K8S_PENDING_TIMEOUT", "300", "Seconds a pod may sit in image-pull/config errors "
             "before its task fails."),
    Variable("LEOFLOW_K8S_POD_RETENTION", "3600", "Seconds finished pods are kept (after their logs are "
             "shipped) before garbage collection."),
)

_KNOWN = {v.name for v in VARIABLES}
_SECRET = {v.name for v in VARIABLES if v.secret}


@dataclass(frozen=True)
class DatabaseSettings:
    url: str | None
    pool_size: int = 10
    statement_timeout: float = 30.0


@dataclass(frozen=True)
class ClusterSettings:
    name: str = "default"
    node_id: str = field(default_factory=socket.gethostname)


@dataclass(frozen=True)
class ApiToken:
    """A configured API credential. ``repr`` hides the secret so it never reaches a log."""

    name: str
    scope: Literal["read", "admin"]
    token: str = field(repr=False)


@dataclass(frozen=True)
class ApiSettings:
    host: str = "0.0.0.0"
    port: int = 8080
    public_url: str | None = None
    auth_enabled: bool = True
    tokens: tuple[ApiToken, ...] = ()
    metrics_auth: bool = False
    max_body_bytes: int = 1024 * 1024


@dataclass(frozen=True)
class ClientSettings:
    """What the CLI's client verbs (dags, runs, tasks) need to reach a server."""

    url: str = "http://127.0.0.1:8080"
    token: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class ElectionSettings:
    poll_interval: float = 5.0
    keepalive_interval: float = 1.0
    leader_lease: float = 10.0
    shutdown_grace: float = 10.0
    scheduler_stall_timeout: float = 60.0
    heartbeat_interval: float = 3.0
    node_down_after: float = 15.0


@dataclass(frozen=True)
class SchedulerSettings:
    interval: float = 1.0
    parallelism: int = 128
    max_retry_delay: float = 3600.0


@dataclass(frozen=True)
class KubernetesSettings:
    namespace: str | None = None
    service_account: str | None = None
    image_pull_secrets: tuple[str, ...] = ()
    pending_timeout: float = 300.0
    pod_retention: float = 3600.0


@dataclass(frozen=True)
class ExecutorSettings:
    kind: ExecutorKind = "kubernetes"
    local_parallelism: int = field(default_factory=lambda: os.cpu_count() or 2)
    task_log_max_bytes: int = 1024 * 1024
    kubernetes: KubernetesSettings = field(default_factory=KubernetesSettings)


@dataclass(frozen=True)
class LoggingSettings:
    format: LogFormat = "json"
    level: str = "INFO"


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
    home: Path = field(default_factory=lambda: Path("~/.local/share/leoflow").expanduser())

    @property
    def api_url(self) -> str:
        """The URL this replica advertises to the cluster."""
        return self.api.public_url or f"http://{self.cluster.node_id}:{self.api.port}"

    def replace(self, **changes: Any) -> Settings:
        """A copy with some groups swapped; used for CLI flag overrides and tests."""
        return dataclasses.replace(self, **changes)

    def require_database_url(self) -> str:
        if not self.database.url:
            raise SettingsError("LEOFLOW_DATABASE_URL", "is not set (expected postgresql://...)")
        return self.database.url


class _Reader:
    """Parses raw environment strings into typed values, naming the variable on failure."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def raw(self, name: str) -> str | None:
        assert name in _KNOWN, f"undeclared setting {name}"
        value = self.env.get(name)
        if value is None or value.strip() == "":
            return None
        return value.strip()

    def _fail(self, name: str, problem: str, value: str) -> SettingsError:
        shown = "" if name in _SECRET else f", got {value!r}"
        return SettingsError(name, f"{problem}{shown}")

    def text(self, name: str, default: str | None) -> str | None:
        value = self.raw(name)
        return default if value is None else value

    def number(self, name: str, default: float, *, minimum: float = 0.0, positive: bool = True,
               integer: bool = False, maximum: float | None = None) -> Any:
        value = self.raw(name)
        if value is None:
            return int(default) if integer else default
        kind = "an integer" if integer else "a number"
        try:
            parsed: float = int(value) if integer else float(value)
        except ValueError:
            raise self._fail(name, f"must be {kind}", value) from None
        if parsed != parsed or parsed in (float("inf"), float("-inf")):
            raise self._fail(name, f"must be {kind}", value)
        if positive and parsed <= 0:
            raise self._fail(name, "must be greater than 0", value)
        if parsed < minimum:
            raise self._fail(name, f"must be at least {minimum:g}", value)
        if maximum is not None and parsed > maximum:
            raise self._fail(name, f"must be at most {maximum:g}", value)
        return parsed

    def boolean(self, name: str, default: bool) -> bool:
        value = self.raw(name)
        if value is None:
            return default
        lowered = value.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise self._fail(name, "must be true or false", value)

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.raw(name)
        if value is None:
            return default
        if value.lower() not in choices:
            raise self._fail(name, f"must be one of {', '.join(choices)}", value)
        return value.lower()


def validate_database_url(url: str, *, variable: str = "LEOFLOW_DATABASE_URL") -> str:
    """Check that ``url`` is a usable ``postgresql://`` URL; never echo it (it may hold a password)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        raise SettingsError(variable, "is not a valid URL (expected postgresql://HOST:PORT/DBNAME)") from None
    if parts.scheme not in ("postgresql", "postgres", "postgresql+psycopg"):
        raise SettingsError(variable, "must be a postgresql:// URL (expected postgresql://HOST:PORT/DBNAME)")
    try:
        port = parts.port
    except ValueError:
        raise SettingsError(variable, "has an invalid port") from None
    del port
    if not parts.path.strip("/") and "dbname=" not in parts.query:
        raise SettingsError(variable, "names no database (expected postgresql://HOST:PORT/DBNAME)")
    return url


def parse_api_tokens(text: str, *, variable: str) -> tuple[ApiToken, ...]:
    """Parse ``name:scope:token`` entries separated by commas or newlines."""
    tokens: list[ApiToken] = []
    entries = [e.strip() for chunk in text.splitlines() for e in chunk.split(",")]
    for index, entry in enumerate(e for e in entries if e and not e.startswith("#")):
        name, sep1, rest = entry.partition(":")
        scope, sep2, token = rest.partition(":")
        if not (sep1 and sep2 and name and token):
            raise SettingsError(variable, f"entry {index + 1} must look like name:scope:token")
        if scope not in ("read", "admin"):
            raise SettingsError(variable, f"entry {index + 1} ({name}) has scope {scope!r}; "
                                "expected read or admin")
        if len(token) < 8:
            raise SettingsError(variable, f"entry {index + 1} ({name}) has a token shorter than 8 characters")
        tokens.append(ApiToken(name=name, scope=scope, token=token))  # type: ignore[arg-type]
    return tuple(tokens)


def load_settings(env: Mapping[str, str] | None = None, *,
                  stderr_is_tty: Callable[[], bool] | None = None) -> Settings:
    """Read every ``LEOFLOW_*`` variable once and return the frozen settings.

    ``env`` defaults to ``os.environ``; tests pass a dict instead of patching the process.
    """
    env = os.environ if env is None else env
    r = _Reader(env)

    url = r.text("LEOFLOW_DATABASE_URL", None)
    if url is not None:
        validate_database_url(url)

    node_id = r.text("LEOFLOW_NODE_ID", None) or socket.gethostname()
    cluster_name = r.text("LEOFLOW_CLUSTER", "default") or "default"
    if len(cluster_name) > 63:
        raise SettingsError("LEOFLOW_CLUSTER", "must be at most 63 characters")

    tokens: tuple[ApiToken, ...] = ()
    tokens_text = r.raw("LEOFLOW_API_TOKENS")
    if tokens_text:
        tokens = parse_api_tokens(tokens_text, variable="LEOFLOW_API_TOKENS")
    tokens_file = r.raw("LEOFLOW_API_TOKENS_FILE")
    if tokens_file:
        try:
            file_text = Path(tokens_file).expanduser().read_text()
        except OSError as exc:
            raise SettingsError("LEOFLOW_API_TOKENS_FILE", f"cannot be read ({exc.strerror})") from None
        tokens += parse_api_tokens(file_text, variable="LEOFLOW_API_TOKENS_FILE")

    if stderr_is_tty is None:
        def stderr_is_tty() -> bool:
            return sys.stderr.isatty()
    log_format = r.choice("LEOFLOW_LOG_FORMAT", "text" if stderr_is_tty() else "json", ("json", "text"))
    level = r.choice("LEOFLOW_LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper()

    election = ElectionSettings(
        poll_interval=r.number("LEOFLOW_ELECTION_POLL_INTERVAL", 5.0),
        keepalive_interval=r.number("LEOFLOW_KEEPALIVE_INTERVAL", 1.0),
        leader_lease=r.number("LEOFLOW_LEADER_LEASE", 10.0),
        shutdown_grace=r.number("LEOFLOW_SHUTDOWN_GRACE", 10.0, positive=False),
        scheduler_stall_timeout=r.number("LEOFLOW_SCHEDULER_STALL_TIMEOUT", 60.0),
        heartbeat_interval=r.number("LEOFLOW_HEARTBEAT_INTERVAL", 3.0),
        node_down_after=r.number("LEOFLOW_NODE_DOWN_AFTER", 15.0),
    )
    if election.keepalive_interval * 2 > election.leader_lease:
        raise SettingsError("LEOFLOW_LEADER_LEASE", "must be at least twice LEOFLOW_KEEPALIVE_INTERVAL "
                            f"({election.keepalive_interval:g}s)")

    k8s_secrets = r.text("LEOFLOW_K8S_IMAGE_PULL_SECRETS", "") or ""
    return Settings(
        database=DatabaseSettings(
            url=url,
            pool_size=r.number("LEOFLOW_DB_POOL_SIZE", 10, integer=True, minimum=MINIMUM_POOL_SIZE, maximum=1000),
            statement_timeout=r.number("LEOFLOW_DB_STATEMENT_TIMEOUT", 30.0),
        ),
        cluster=ClusterSettings(name=cluster_name, node_id=node_id),
        api=ApiSettings(
            host=r.text("LEOFLOW_HOST", "0.0.0.0") or "0.0.0.0",
            port=r.number("LEOFLOW_PORT", 8080, integer=True, maximum=65535),
            public_url=r.text("LEOFLOW_API_URL", None),
            auth_enabled=r.choice("LEOFLOW_AUTH", "enabled", ("enabled", "disabled")) == "enabled",
            tokens=tokens,
            metrics_auth=r.boolean("LEOFLOW_METRICS_AUTH", False),
            max_body_bytes=r.number("LEOFLOW_MAX_BODY_BYTES", 1024 * 1024, integer=True),
        ),
        client=ClientSettings(
            url=r.text("LEOFLOW_URL", "http://127.0.0.1:8080") or "http://127.0.0.1:8080",
            token=r.text("LEOFLOW_TOKEN", None),
        ),
        election=election,
        scheduler=SchedulerSettings(
            interval=r.number("LEOFLOW_SCHEDULER_INTERVAL", 1.0),
            parallelism=r.number("LEOFLOW_PARALLELISM", 128, integer=True),
            max_retry_delay=r.number("LEOFLOW_MAX_RETRY_DELAY", 3600.0),
        ),
        executor=ExecutorSettings(
            kind=r.choice("LEOFLOW_EXECUTOR", "kubernetes", ("kubernetes", "local", "memory")),  # type: ignore[arg-type]
            local_parallelism=r.number("LEOFLOW_LOCAL_PARALLELISM", os.cpu_count() or 2, integer=True),
            task_log_max_bytes=r.number("LEOFLOW_TASK_LOG_MAX_BYTES", 1024 * 1024, integer=True),
            kubernetes=KubernetesSettings(
                namespace=r.text("LEOFLOW_K8S_NAMESPACE", None),
                service_account=r.text("LEOFLOW_K8S_SERVICE_ACCOUNT", None),
                image_pull_secrets=tuple(s.strip() for s in k8s_secrets.split(",") if s.strip()),
                pending_timeout=r.number("LEOFLOW_K8S_PENDING_TIMEOUT", 300.0),
                pod_retention=r.number("LEOFLOW_K8S_POD_RETENTION", 3600.0, positive=False),
            ),
        ),
        logging=LoggingSettings(format=log_format, level=level),  # type: ignore[arg-type]
        home=Path(r.text("LEOFLOW_HOME", "~/.local/share/leoflow") or "").expanduser(),
    )
