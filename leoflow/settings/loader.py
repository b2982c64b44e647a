"""Reading the environment once: ``LEOFLOW_*`` text into the frozen :class:`Settings`.

Why one object: configuration read lazily all over the code (in default arguments, at import
time) makes behaviour depend on *when* a module was imported and makes tests leak into each
other. Instead the CLI calls :func:`load_settings` exactly once, applies its flag overrides, and
passes the frozen result down. Nothing in the package reads ``os.environ`` for ``LEOFLOW_*``
except this module and :mod:`.client` (the client verbs' few variables, parsed by the same
declarations through the same :class:`EnvironmentReader`).

Failure semantics: a bad value raises :class:`~leoflow.errors.SettingsError` naming the
variable and what is wrong, *without echoing the value* when the variable may carry a secret
(database URLs, tokens). The CLI turns it into one line on stderr and exit code 2.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from leoflow.errors import SettingsError
from leoflow.settings import declared as v
from leoflow.settings.client import client_settings_from
from leoflow.settings.database_url import parse_database_url
from leoflow.settings.environment import EnvironmentReader
from leoflow.settings.groups import (
    ApiSettings,
    ApiToken,
    ClusterSettings,
    DagFilesSettings,
    DatabaseSettings,
    ElectionSettings,
    ExecutorSettings,
    KubernetesSettings,
    LogArchiveSettings,
    LoggingSettings,
    NotifySettings,
    RetentionSettings,
    SchedulerSettings,
    Settings,
    default_local_parallelism,
)
from leoflow.settings.oidc import oidc_settings_from


def validate_database_url(url: str, *, variable: str = v.DATABASE_URL.name) -> str:
    """Check that libpq will accept ``url`` (every form: multi-host, ``?host=``, sockets); never echo it."""
    try:
        parse_database_url(url)
    except ValueError as exc:
        raise SettingsError(variable, str(exc)) from None
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


def _header_hosts(r: EnvironmentReader) -> tuple[tuple[str, str], ...]:
    """``LEOFLOW_NOTIFY_HOSTS_*``, each checked as host patterns (a SettingsError names the bad one)."""
    from leoflow.model.webhook_hosts import parse_host_patterns

    bindings = r.prefixed(v.NOTIFY_HEADER_HOSTS)  # type: ignore[arg-type]
    for name, value in bindings:
        try:
            parse_host_patterns(value)
        except ValueError as exc:
            raise SettingsError(name, str(exc)) from None
    return bindings


def _optional_path(value: str | None) -> Path | None:
    return Path(value).expanduser() if value else None


def load_settings(env: Mapping[str, str] | None = None, *,
                  stderr_is_tty: Callable[[], bool] | None = None,
                  reader: EnvironmentReader | None = None) -> Settings:
    """Read every ``LEOFLOW_*`` variable once and return the frozen settings.

    ``env`` defaults to ``os.environ``; tests pass a dict instead of patching the process.
    """
    r = reader or EnvironmentReader(os.environ if env is None else env)

    url = r.get(v.DATABASE_URL)
    if url is not None:
        validate_database_url(url)

    tokens: tuple[ApiToken, ...] = ()
    tokens_text = r.get(v.API_TOKENS)
    if tokens_text:
        tokens = parse_api_tokens(tokens_text, variable=v.API_TOKENS.name)
    tokens_file = r.get(v.API_TOKENS_FILE)
    if tokens_file:
        try:
            file_text = Path(tokens_file).expanduser().read_text()
        except OSError as exc:
            raise SettingsError(v.API_TOKENS_FILE.name, f"cannot be read ({exc.strerror})") from None
        tokens += parse_api_tokens(file_text, variable=v.API_TOKENS_FILE.name)

    if stderr_is_tty is None:
        def stderr_is_tty() -> bool:
            return sys.stderr.isatty()
    log_format = r.get(v.LOG_FORMAT) or ("text" if stderr_is_tty() else "json")

    election = ElectionSettings(
        poll_interval=r.get(v.ELECTION_POLL_INTERVAL),
        keepalive_interval=r.get(v.KEEPALIVE_INTERVAL),
        leader_lease=r.get(v.LEADER_LEASE),
        shutdown_grace=r.get(v.SHUTDOWN_GRACE),
        scheduler_stall_timeout=r.get(v.SCHEDULER_STALL_TIMEOUT),
        heartbeat_interval=r.get(v.HEARTBEAT_INTERVAL),
        node_down_after=r.get(v.NODE_DOWN_AFTER),
    )
    if election.keepalive_interval * 2 > election.leader_lease:
        raise SettingsError(v.LEADER_LEASE.name, f"must be at least twice {v.KEEPALIVE_INTERVAL.name} "
                            f"({election.keepalive_interval:g}s)")

    return Settings(
        database=DatabaseSettings(url=url, pool_size=r.get(v.DB_POOL_SIZE),
                                  statement_timeout=r.get(v.DB_STATEMENT_TIMEOUT)),
        cluster=ClusterSettings(name=r.get(v.CLUSTER), node_id=r.get(v.NODE_ID) or socket.gethostname()),
        api=ApiSettings(
            host=r.get(v.HOST),
            port=r.get(v.PORT),
            public_url=r.get(v.API_URL),
            auth_enabled=r.get(v.AUTH) == "enabled",
            tokens=tokens,
            token_max_days=r.get(v.API_TOKEN_MAX_DAYS),
            teams_file=r.get(v.TEAMS_FILE),
            metrics_auth=r.get(v.METRICS_AUTH),
            max_body_bytes=r.get(v.MAX_BODY_BYTES),
            sync_max_body_bytes=r.get(v.SYNC_MAX_BODY_BYTES),
        ),
        client=client_settings_from(r),
        election=election,
        scheduler=SchedulerSettings(
            interval=r.get(v.SCHEDULER_INTERVAL),
            parallelism=r.get(v.PARALLELISM),
            max_retry_delay=r.get(v.MAX_RETRY_DELAY),
        ),
        executor=ExecutorSettings(
            kind=r.get(v.EXECUTOR),  # type: ignore[arg-type]
            local_parallelism=r.get(v.LOCAL_PARALLELISM) or default_local_parallelism(),
            task_log_max_bytes=r.get(v.TASK_LOG_MAX_BYTES),
            log_ship_attempts=r.get(v.LOG_SHIP_ATTEMPTS),
            kill_grace=r.get(v.KILL_GRACE),
            kubernetes=KubernetesSettings(
                namespace=r.get(v.K8S_NAMESPACE),
                service_account=r.get(v.K8S_SERVICE_ACCOUNT),
                image_pull_secrets=r.get(v.K8S_IMAGE_PULL_SECRETS),
                artifacts_image=r.get(v.K8S_ARTIFACTS_IMAGE),
                pending_timeout=r.get(v.K8S_PENDING_TIMEOUT),
                pod_retention=r.get(v.K8S_POD_RETENTION),
                pod_template=r.get(v.K8S_POD_TEMPLATE),
                pod_allowances=r.get(v.K8S_POD_POLICY),
                allowed_service_accounts=r.get(v.K8S_ALLOWED_SERVICE_ACCOUNTS),
                protected_secrets=r.get(v.K8S_PROTECTED_SECRETS),
            ),
        ),
        logging=LoggingSettings(format=log_format, level=r.get(v.LOG_LEVEL).upper()),  # type: ignore[arg-type]
        dag_files=DagFilesSettings(directory=_optional_path(r.get(v.DAGS_DIR)), source=r.get(v.DAGS_SOURCE)),
        retention=RetentionSettings(days=r.get(v.RETENTION_DAYS), audit_days=r.get(v.AUDIT_RETENTION_DAYS)),
        log_archive=LogArchiveSettings(url=r.get(v.LOG_ARCHIVE_URL), retention=r.get(v.LOG_ARCHIVE_RETENTION),
                                       flush_interval=r.get(v.LOG_ARCHIVE_FLUSH_INTERVAL),
                                       timeout=r.get(v.LOG_ARCHIVE_TIMEOUT)),
        notify=NotifySettings(
            webhook=r.get(v.NOTIFY_WEBHOOK),
            events=r.get(v.NOTIFY_EVENTS),
            secrets_dir=Path(r.get(v.NOTIFY_SECRETS_DIR)).expanduser(),
            header_values=r.prefixed(v.NOTIFY_HEADERS),  # type: ignore[arg-type]
            header_hosts=_header_hosts(r),
            allowed_hosts=r.get(v.NOTIFY_ALLOWED_HOSTS),
            refused_addresses=tuple(a for a in (r.env.get("KUBERNETES_SERVICE_HOST", "").strip(),) if a),
            retry_delay=r.get(v.NOTIFY_RETRY_DELAY),
            dashboard_url=r.get(v.DASHBOARD_URL),
            metrics_max_dags=r.get(v.METRICS_MAX_DAGS),
            metrics_max_tasks=r.get(v.METRICS_MAX_TASKS),
        ),
        oidc=oidc_settings_from(r),
        home=Path(r.get(v.HOME)).expanduser(),
    )
