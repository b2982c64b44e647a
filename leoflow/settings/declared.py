"""Every ``LEOFLOW_*`` environment variable, declared once: name, default, type and meaning.

Each :class:`Variable` is the single source for everything that needs to know about it: the
settings dataclasses take their defaults from ``.default`` (:mod:`.groups`), the loader parses
with ``.parse`` (:mod:`.loader`), the configuration table of ``docs/configuration.md`` is rendered from
:data:`VARIABLES` (``python -m leoflow.cli.docs``; a test keeps it current) and the benchmarks
start replicas with the product timings from ``.default_text``. Changing a default is one edit
here.

A parser raises ``ValueError(problem)``; the loader turns that into a
:class:`~leoflow.errors.SettingsError` naming the variable (and never echoing a secret value).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from leoflow.errors import ValidationFailed

T = TypeVar("T")

#: The smallest workable database budget of a replica (see leoflow.db.connection.budget).
MINIMUM_POOL_SIZE = 4


class Variable(Generic[T]):
    """One environment variable: what unset means, how text becomes a value, what it is for.

    A plain class, not a dataclass: the CLI's client verbs import this module, and importing
    :mod:`dataclasses` (with :mod:`inspect` behind it) costs them about a tenth of their budget.
    The attributes are never reassigned.
    """

    __slots__ = ("default", "meaning", "name", "parse", "secret", "shown_default")

    def __init__(self, name: str, default: T, parse: Callable[[str], T], meaning: str, *,
                 shown_default: str | None = None, secret: bool = False) -> None:
        self.name = name
        self.default = default
        self.parse = parse
        self.meaning = meaning
        #: The configuration table's "Default" column when the default is computed at run time (hostname, ...).
        self.shown_default = shown_default
        #: Never echo the value in errors or logs (URLs with passwords, tokens).
        self.secret = secret

    def __repr__(self) -> str:
        return f"Variable({self.name!r})"

    @property
    def default_text(self) -> str:
        """The default as an operator would write it in the environment (or a description)."""
        if self.shown_default is not None:
            return self.shown_default
        value: object = self.default
        if value is None or value == ():
            return "(none)"
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)


# --------------------------------------------------------------------------- parsers

def text(value: str) -> str:
    return value


def optional_text(value: str) -> str | None:
    return value


N = TypeVar("N", int, float)


def _bounded(convert: Callable[[str], N], kind: str, minimum: float, maximum: float | None,
             positive: bool) -> Callable[[str], N]:
    def parse(value: str) -> N:
        try:
            parsed = convert(value)
        except ValueError:
            raise ValueError(f"must be {kind}") from None
        if parsed != parsed or parsed in (float("inf"), float("-inf")):
            raise ValueError(f"must be {kind}")
        if positive and parsed <= 0:
            raise ValueError("must be greater than 0")
        if parsed < minimum:
            raise ValueError(f"must be at least {minimum:g}")
        if maximum is not None and parsed > maximum:
            raise ValueError(f"must be at most {maximum:g}")
        return parsed
    return parse


def number(*, minimum: float = 0.0, maximum: float | None = None, positive: bool = True) -> Callable[[str], float]:
    return _bounded(float, "a number", minimum, maximum, positive)


def integer(*, minimum: int = 0, maximum: int | None = None, positive: bool = True) -> Callable[[str], int]:
    return _bounded(int, "an integer", minimum, maximum, positive)


def optional_integer(**bounds: int) -> Callable[[str], int | None]:
    inner = integer(**bounds)  # type: ignore[arg-type]
    return inner


def boolean(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError("must be true or false")


def choice(*options: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.lower() not in options:
            raise ValueError(f"must be one of {', '.join(options)}")
        return value.lower()
    return parse


def optional_choice(*options: str) -> Callable[[str], str | None]:
    return choice(*options)


def names(value: str) -> tuple[str, ...]:
    """A comma-separated list (blank entries ignored)."""
    return tuple(s.strip() for s in value.split(",") if s.strip())


# The two parsers below import their model modules when called: the client verbs load this
# module and must not pay for the notification model's patterns at start-up.

def sync_source(value: str) -> str:
    from leoflow.model.source_labels import SOURCE_RE, SOURCE_RULE

    if not SOURCE_RE.match(value):
        raise ValueError(SOURCE_RULE)
    return value


def events(value: str) -> tuple[str, ...]:
    """A comma-separated list of notification events (leoflow.model.spec.notify)."""
    from leoflow.model.spec.notify import EVENTS

    found = names(value)
    for event in found:
        if event not in EVENTS:
            raise ValueError(f"{event!r} is not an event; use {', '.join(EVENTS)}")
    return found


def webhook_hosts(value: str) -> str:
    """Webhook host patterns (leoflow.model.webhook_hosts), checked now, kept as written."""
    from leoflow.model.webhook_hosts import parse_allowed_hosts

    parse_allowed_hosts(value)
    return value


def family(value: str) -> tuple[tuple[str, str], ...]:
    """A family of variables (``PREFIX_*``) is read by prefix (EnvironmentReader.prefixed), never by name."""
    raise ValueError("is a family of variables; set PREFIX_<NAME> variables instead")


def http_url(value: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ValueError("must be an http:// or https:// URL")
    return value


def optional_http_url(value: str) -> str | None:
    return http_url(value)


def pod_allowances(value: str) -> frozenset[str]:
    """``LEOFLOW_K8S_POD_POLICY``: the allowances :mod:`leoflow.model.spec.pod_policy` knows."""
    from leoflow.model.spec.pod_policy import parse_allowances

    return parse_allowances(value)


def pod_template(value: str) -> Mapping[str, Any]:
    """A partial Pod as JSON or YAML (what the chart renders from ``tasks.podTemplate``)."""
    # Imported here: the CLI's client verbs load settings and must not load the pod model.
    from leoflow.model.files.yaml_loader import YamlRejected, load_yaml
    from leoflow.model.k8s.pod import parse_pod_template

    if not value.strip():
        return {}
    try:
        doc = json.loads(value)
    except ValueError:
        try:
            doc = load_yaml(value)
        except YamlRejected as exc:
            raise ValueError(f"must be a pod template as JSON or YAML ({exc})") from None
    try:
        return parse_pod_template(doc, "")
    except ValidationFailed as exc:
        raise ValueError(f"is not a valid pod template: {exc}") from None


#: Signature algorithms an OpenID Connect token may use: asymmetric only, so that a public key
#: can never be taken for an HMAC secret (RFC 8725 section 3.1).
JWT_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")


def jwt_algorithms(value: str) -> tuple[str, ...]:
    found = names(value)
    for alg in found:
        if alg not in JWT_ALGORITHMS:
            raise ValueError(f"{alg!r} is not accepted; use some of {', '.join(JWT_ALGORITHMS)} (never none or HS*)")
    if not found:
        raise ValueError("must name at least one algorithm")
    return found


def claim_path(value: str) -> str:
    if len(value) > 200 or any(not part for part in value.split(".")):
        raise ValueError("must be a claim name or a dotted path of names, at most 200 characters")
    return value


def session_secret(value: str) -> str | None:
    if len(value) < 32:
        raise ValueError("must be at least 32 characters (random, the same on every replica)")
    return value


def scope_names(value: str) -> tuple[str, ...]:
    found = tuple(s for s in value.replace(",", " ").split() if s)
    if "openid" not in found:
        raise ValueError("must include openid")
    return found


def cluster_name(value: str) -> str:
    if len(value) > 63:
        raise ValueError("must be at most 63 characters")
    return value


#: Schemes a log archive URL may have (the object storage client's, leoflow.storage.objects).
ARCHIVE_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "abfss", "azure", "file", "memory")


def archive_url(value: str) -> str | None:
    """An object storage URL (``s3://bucket/prefix``, ``gs://``, ``az://``, ``file:///dir``); ``off``: none."""
    from urllib.parse import urlsplit

    if value.strip().lower() == "off":
        return "off"
    if len(value) > 1024:
        raise ValueError("must be at most 1024 characters")
    parts = urlsplit(value)
    if parts.scheme not in ARCHIVE_SCHEMES:
        raise ValueError(f"must be off or start with one of {', '.join(s + '://' for s in ARCHIVE_SCHEMES)}")
    if parts.scheme == "file" and (parts.netloc not in ("", "localhost") or not parts.path.startswith("/")):
        raise ValueError("a file:// URL needs an absolute path (file:///var/lib/leoflow/logs)")
    if parts.scheme not in ("file", "memory") and not parts.netloc:
        raise ValueError("names no bucket (s3://BUCKET/prefix)")
    if parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError("must not carry credentials, a query or a fragment: the provider's credential chain is used")
    return value


# --------------------------------------------------------------------------- the variables

DATABASE_URL = Variable[str | None](
    "LEOFLOW_DATABASE_URL", None, optional_text,
    "PostgreSQL URL (`postgresql://user:pass@host:5432/db`). Standalone mode starts an embedded server when unset.",
    secret=True)
DB_POOL_SIZE = Variable(
    "LEOFLOW_DB_POOL_SIZE", 10, integer(minimum=MINIMUM_POOL_SIZE, maximum=1000),
    "Database connections per replica besides its lock connection, split between the API and the leader's "
    "work (at least 4; see docs/adr/0007).")
DB_STATEMENT_TIMEOUT = Variable(
    "LEOFLOW_DB_STATEMENT_TIMEOUT", 30.0, number(), "Seconds before a database statement is cancelled.")
CLUSTER = Variable(
    "LEOFLOW_CLUSTER", "default", cluster_name,
    "Cluster name (the election lock, pod names); a database or schema holds one cluster (ADR 0010).")
NODE_ID = Variable[str | None](
    "LEOFLOW_NODE_ID", None, optional_text, "This replica's identity in elections, events and logs.",
    shown_default="(hostname)")
HOST = Variable("LEOFLOW_HOST", "0.0.0.0", text, "Address the HTTP API listens on.")
PORT = Variable("LEOFLOW_PORT", 8080, integer(maximum=65535), "Port the HTTP API listens on.")
API_URL = Variable[str | None](
    "LEOFLOW_API_URL", None, optional_text,
    "URL other replicas and tools use to reach this replica (shown by /api/v2/cluster/nodes).",
    shown_default="http://<node_id>:<port>")
URL = Variable("LEOFLOW_URL", "http://127.0.0.1:8080", text, "API URL the CLI's client commands talk to.")
TOKEN = Variable[str | None]("LEOFLOW_TOKEN", None, optional_text, "Bearer token the CLI's client commands send.",
                             secret=True)
AUTH = Variable("LEOFLOW_AUTH", "enabled", choice("enabled", "disabled"),
                "`enabled` or `disabled`; serving without tokens requires `disabled`.")
API_TOKENS = Variable[str | None](
    "LEOFLOW_API_TOKENS", None, optional_text,
    "Comma-separated `name:scope:token` entries, scope `read` or `admin`.", secret=True)
API_TOKENS_FILE = Variable[str | None](
    "LEOFLOW_API_TOKENS_FILE", None, optional_text, "File with one `name:scope:token` entry per line.")
API_TOKEN_MAX_DAYS = Variable("LEOFLOW_API_TOKEN_MAX_DAYS", 90, integer(minimum=1, maximum=3650),
                              "Longest lifetime, in days, of a token created through `POST /api/v2/tokens`.")
TEAMS_FILE = Variable[str | None](
    "LEOFLOW_TEAMS_FILE", None, optional_text,
    "YAML file of teams (DAG-id prefixes, group rules) and admin groups; reloaded when it changes. "
    "Unset: one implicit team.")
METRICS_AUTH = Variable("LEOFLOW_METRICS_AUTH", False, boolean, "Require a token on /metrics.")
MAX_BODY_BYTES = Variable("LEOFLOW_MAX_BODY_BYTES", 1024 * 1024, integer(),
                          "Largest accepted request body (413 above it).")
SYNC_MAX_BODY_BYTES = Variable(
    "LEOFLOW_SYNC_MAX_BODY_BYTES", 64 * 1024 * 1024, integer(minimum=1024, maximum=1024 * 1024 * 1024),
    "Largest accepted body of `POST /api/v2/dags:sync` (413 above it): a sync carries every DAG file in one "
    "request: 10,000 files of 1 KB are about 10 MiB of JSON. 1 KiB to 1 GiB.")
EXECUTOR = Variable("LEOFLOW_EXECUTOR", "kubernetes", choice("kubernetes", "local", "memory"),
                    "`kubernetes`, `local` (subprocesses) or `memory` (tests).")
HOME = Variable("LEOFLOW_HOME", "~/.local/share/leoflow", text, "Standalone data, local task logs and work dirs.")
LOG_FORMAT = Variable[str | None](
    "LEOFLOW_LOG_FORMAT", None, optional_choice("json", "text"), "`json` (one object per line) or `text`.",
    shown_default="json off a TTY, else text")
LOG_LEVEL = Variable("LEOFLOW_LOG_LEVEL", "info", choice("debug", "info", "warning", "error"),
                     "DEBUG, INFO, WARNING or ERROR.", shown_default="INFO")
ELECTION_POLL_INTERVAL = Variable("LEOFLOW_ELECTION_POLL_INTERVAL", 5.0, number(),
                                  "Seconds between a follower's slow-path lock attempts.")
KEEPALIVE_INTERVAL = Variable("LEOFLOW_KEEPALIVE_INTERVAL", 1.0, number(),
                              "Seconds between the leader's lock ownership checks.")
LEADER_LEASE = Variable("LEOFLOW_LEADER_LEASE", 10.0, number(),
                        "Seconds without a successful keepalive after which a leader stops acting on its own.")
SHUTDOWN_GRACE = Variable("LEOFLOW_SHUTDOWN_GRACE", 10.0, number(positive=False),
                          "Seconds in-flight work may finish on SIGTERM before release.")
SCHEDULER_STALL_TIMEOUT = Variable("LEOFLOW_SCHEDULER_STALL_TIMEOUT", 60.0, number(),
                                   "Seconds without scheduler progress before the leader gives up leadership.")
HEARTBEAT_INTERVAL = Variable("LEOFLOW_HEARTBEAT_INTERVAL", 3.0, number(), "Seconds between membership heartbeats.")
NODE_DOWN_AFTER = Variable("LEOFLOW_NODE_DOWN_AFTER", 15.0, number(),
                           "Seconds without a heartbeat before a node is marked down.")
SCHEDULER_INTERVAL = Variable("LEOFLOW_SCHEDULER_INTERVAL", 1.0, number(),
                              "Seconds between scheduler ticks (triggers wake it at once).")
PARALLELISM = Variable("LEOFLOW_PARALLELISM", 128, integer(),
                       "Slots of the `default` pool: most task instances naming no pool queued or running at "
                       "once, cluster-wide (named pools add their own).")
MAX_RETRY_DELAY = Variable("LEOFLOW_MAX_RETRY_DELAY", 3600.0, number(),
                           "Cap in seconds on a task's exponential retry delay.")
LOCAL_PARALLELISM = Variable[int | None](
    "LEOFLOW_LOCAL_PARALLELISM", None, optional_integer(), "Most concurrent subprocesses of the local executor.",
    shown_default="(CPU count)")
TASK_LOG_MAX_BYTES = Variable("LEOFLOW_TASK_LOG_MAX_BYTES", 1024 * 1024, integer(),
                              "Per-try cap on stored task logs (the tail is kept).")
LOG_SHIP_ATTEMPTS = Variable("LEOFLOW_LOG_SHIP_ATTEMPTS", 10, integer(maximum=1000),
                             "Attempts to read a finished pod's log (backing off up to a minute apart) before "
                             "its logs are marked unavailable, with the reason, and the pod may be collected.")
KILL_GRACE = Variable("LEOFLOW_KILL_GRACE", 10.0, number(maximum=3600),
                      "Seconds a cancelled, cleared or timed-out try may take to stop after SIGTERM (a pod: after its "
                      "graceful delete) before it is killed outright (SIGKILL; a pod deleted with "
                      "`gracePeriodSeconds: 0`); a kill ends only once the try is gone.")
K8S_NAMESPACE = Variable[str | None]("LEOFLOW_K8S_NAMESPACE", None, optional_text, "Namespace task pods run in.",
                                     shown_default="(pod namespace, else default)")
K8S_SERVICE_ACCOUNT = Variable[str | None]("LEOFLOW_K8S_SERVICE_ACCOUNT", None, optional_text,
                                           "Service account for task pods.")
K8S_ARTIFACTS_IMAGE = Variable[str | None](
    "LEOFLOW_K8S_ARTIFACTS_IMAGE", None, optional_text,
    "Image of the containers that fetch and upload a task's artifacts (an init container and a native sidecar): "
    "Leoflow's own image, so the task's needs nothing; set it when you mirror images to a private registry.",
    shown_default="leoflow/leoflow:<this version>")
K8S_IMAGE_PULL_SECRETS = Variable[tuple[str, ...]](
    "LEOFLOW_K8S_IMAGE_PULL_SECRETS", (), names, "Comma-separated image pull secret names for task pods.")
K8S_PENDING_TIMEOUT = Variable("LEOFLOW_K8S_PENDING_TIMEOUT", 300.0, number(),
                               "Seconds a pod may sit in image-pull/config errors or unschedulable "
                               "(`PodScheduled=False`) before its try fails with the reason.")
K8S_POD_TEMPLATE = Variable[Mapping[str, Any]](
    "LEOFLOW_K8S_POD_TEMPLATE", {}, pod_template,
    "Cluster-wide default pod template (a partial Pod as JSON or YAML), strategic-merged under every task's "
    "pod_template; Leoflow's own fields win.", shown_default="(none)")
K8S_POD_POLICY = Variable[frozenset[str]](
    "LEOFLOW_K8S_POD_POLICY", frozenset(), pod_allowances,
    "What DAGs may ask of task pods beyond the default (refused, with a 422 naming the field, at apply and before "
    "each pod is created): a comma-separated list of `host-path` (hostPath volumes), `privileged`, "
    "`privilege-escalation` (allowPrivilegeEscalation: true), `host-network`, `host-pid`, `host-ipc`, "
    "`capabilities` (securityContext.capabilities.add), or `all`.", shown_default="(none allowed)")
K8S_ALLOWED_SERVICE_ACCOUNTS = Variable[tuple[str, ...]](
    "LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS", (), names,
    "Comma-separated service accounts a DAG may name (`service_account`, `pod_template` `serviceAccountName`) "
    "besides `LEOFLOW_K8S_SERVICE_ACCOUNT`; `*` allows any.", shown_default="(none)")
K8S_PROTECTED_SECRETS = Variable[tuple[str, ...]](
    "LEOFLOW_K8S_PROTECTED_SECRETS", (), names,
    "Comma-separated Secret names no DAG may reference (volume, projected volume, env, env_from; the chart sets "
    "its database and admin-token Secrets).", shown_default="(none)")
K8S_POD_RETENTION = Variable("LEOFLOW_K8S_POD_RETENTION", 3600.0, number(positive=False),
                             "Seconds finished pods are kept (after their logs are shipped) before garbage collection.")
DAGS_DIR = Variable[str | None](
    "LEOFLOW_DAGS_DIR", None, optional_text,
    "Directory of DAG files (`*.yaml`, `*.yml`, `*.json`, subdirectories included) the leader syncs at startup "
    "and whenever they change, pruning DAGs of `LEOFLOW_DAGS_SOURCE` whose files are gone (see docs/dags-as-code.md).")
DAGS_SOURCE = Variable(
    "LEOFLOW_DAGS_SOURCE", "default", sync_source,
    "Sync source label of the DAGs `LEOFLOW_DAGS_DIR` creates, and the default `--source` of `leoflow dags sync`; "
    "a sync only ever prunes DAGs carrying its own label.")
RETENTION_DAYS = Variable(
    "LEOFLOW_RETENTION_DAYS", 30, integer(maximum=36500, positive=False),
    "Days finished runs are kept; the leader then deletes them with their task instances, tries and logs "
    "(0 keeps everything forever).")
AUDIT_RETENTION_DAYS = Variable(
    "LEOFLOW_AUDIT_RETENTION_DAYS", 365, integer(maximum=36500, positive=False),
    "Days audit events (`GET /api/v2/audit`) are kept; the leader then deletes them, apart from run retention "
    "(0 keeps them forever).")
LOG_ARCHIVE_URL = Variable[str | None](
    "LEOFLOW_LOG_ARCHIVE_URL", None, archive_url,
    "Object storage every try's full log is archived to while it runs (`s3://bucket/prefix`, `gs://bucket/prefix`, "
    "`az://container/prefix`, `file:///dir`; credentials from the provider's standard chain), or `off` "
    "(see docs/remote-logging.md).", shown_default="standalone: file:// under LEOFLOW_HOME; else off",
    secret=True)
LOG_ARCHIVE_RETENTION = Variable(
    "LEOFLOW_LOG_ARCHIVE_RETENTION", "delete", choice("delete", "lifecycle"),
    "`delete`: run retention deletes a try's archived log objects with its rows; `lifecycle`: only the rows, "
    "the objects are left to the bucket's lifecycle rule.")
LOG_ARCHIVE_FLUSH_INTERVAL = Variable(
    "LEOFLOW_LOG_ARCHIVE_FLUSH_INTERVAL", 5.0, number(maximum=3600),
    "Most seconds a running try's new output waits before it is archived (a full chunk goes at once).")
LOG_ARCHIVE_TIMEOUT = Variable(
    "LEOFLOW_LOG_ARCHIVE_TIMEOUT", 30.0, number(maximum=600),
    "Seconds one object storage request may take before it is given up and retried with backoff.")
NOTIFY_WEBHOOK = Variable[str | None](
    "LEOFLOW_NOTIFY_WEBHOOK", None, optional_http_url,
    "Webhook URL (e.g. a Slack incoming webhook) notified for DAGs without their own `notify` rules; a secret.",
    secret=True)
NOTIFY_EVENTS = Variable[tuple[str, ...]](
    "LEOFLOW_NOTIFY_EVENTS", ("failure", "deadline"), events,
    "Events sent to `LEOFLOW_NOTIFY_WEBHOOK` (comma-separated: failure, success, retry, deadline).")
NOTIFY_SECRETS_DIR = Variable(
    "LEOFLOW_NOTIFY_SECRETS_DIR", "/etc/leoflow/notify-secrets", text,
    "Where a `notify` rule's `secret: {name, key}` is read from: the file `<dir>/<name>/<key>` "
    "(a Kubernetes Secret mounted at `<dir>/<name>`).")
NOTIFY_HEADERS = Variable[tuple[tuple[str, str], ...]](
    "LEOFLOW_NOTIFY_HEADER_*", (), family,
    "Values a `notify` rule's `header_from_env` may send (only variables with this prefix); secrets. Sent only "
    "to the hosts of `LEOFLOW_NOTIFY_HOSTS_<NAME>`, else only to `LEOFLOW_NOTIFY_WEBHOOK`'s host.",
    shown_default="(none)", secret=True)
NOTIFY_HEADER_HOSTS = Variable[tuple[tuple[str, str], ...]](
    "LEOFLOW_NOTIFY_HOSTS_*", (), family,
    "Comma-separated hosts (names, `*.domain`, IPs, CIDRs) `LEOFLOW_NOTIFY_HEADER_<NAME>` may be sent to.",
    shown_default="(none)")
NOTIFY_ALLOWED_HOSTS = Variable(
    "LEOFLOW_NOTIFY_ALLOWED_HOSTS", "public", webhook_hosts,
    "Where webhooks may connect, checked on each resolved address: comma-separated `public` (any public "
    "address; no loopback, private, link-local or cluster-internal host), host names, `*.domain`, IPs, CIDRs.")
NOTIFY_RETRY_DELAY = Variable(
    "LEOFLOW_NOTIFY_RETRY_DELAY", 5.0, number(),
    "Seconds before a failed webhook delivery is retried; doubled per attempt, at most 10 minutes, for 24 h.")
DASHBOARD_URL = Variable[str | None](
    "LEOFLOW_DASHBOARD_URL", None, optional_http_url,
    "Public URL of the dashboard, for links in notifications.", shown_default="(the leader's LEOFLOW_API_URL)")
METRICS_MAX_DAGS = Variable(
    "LEOFLOW_METRICS_MAX_DAGS", 200, integer(),
    "DAGs with their own `dag_id` series in the per-DAG metrics (by id); the rest are summed as `_other`.")
METRICS_MAX_TASKS = Variable(
    "LEOFLOW_METRICS_MAX_TASKS", 1000, integer(),
    "(DAG, task) pairs with their own series in `leoflow_task_failures_total`; the rest are summed as `_other`.")

# OpenID Connect (leoflow.settings.oidc, leoflow.api.oidc): bearer JWTs of one provider.
OIDC_ISSUER = Variable[str | None](
    "LEOFLOW_OIDC_ISSUER", None, optional_http_url,
    "OpenID Connect issuer URL (exactly the `iss` of its tokens); when set, the API accepts the provider's ID and "
    "access tokens as bearer JWTs, verified against its discovery document and keys.", shown_default="(none: off)")
OIDC_AUDIENCE = Variable[tuple[str, ...]](
    "LEOFLOW_OIDC_AUDIENCE", (), names,
    "Comma-separated `aud` values a token must carry one of.", shown_default="(`LEOFLOW_OIDC_CLIENT_ID`)")
OIDC_CLIENT_ID = Variable[str | None](
    "LEOFLOW_OIDC_CLIENT_ID", None, optional_text,
    "Leoflow's client id at the provider (a public client: `leoflow login` uses it).")
OIDC_ALGORITHMS = Variable[tuple[str, ...]](
    "LEOFLOW_OIDC_ALGORITHMS", ("RS256", "ES256"), jwt_algorithms,
    "Comma-separated signature algorithms accepted (asymmetric only: `none` and HS* are refused).")
OIDC_GROUPS_CLAIM = Variable(
    "LEOFLOW_OIDC_GROUPS_CLAIM", "groups", claim_path,
    "Claim holding the person's groups, a list of strings (a dotted path reaches a nested one, e.g. "
    "`realm_access.roles`).")
OIDC_NAME_CLAIM = Variable(
    "LEOFLOW_OIDC_NAME_CLAIM", "email", claim_path, "Claim naming the person in logs and audit (`sub` when absent).")
OIDC_ADMIN_GROUPS = Variable[tuple[str, ...]](
    "LEOFLOW_OIDC_ADMIN_GROUPS", (), names,
    "Comma-separated groups whose members get the `admin` scope; every other verified person gets `read`.",
    shown_default="(none)")
OIDC_KEYS_MAX_AGE = Variable(
    "LEOFLOW_OIDC_KEYS_MAX_AGE", 900.0, number(maximum=86400),
    "Seconds after which the provider's signing keys are fetched again (kept, and used, while it is down).")
OIDC_KEYS_MIN_INTERVAL = Variable(
    "LEOFLOW_OIDC_KEYS_MIN_INTERVAL", 10.0, number(maximum=3600, positive=False),
    "Fewest seconds between two fetches of the keys: tokens with unknown key ids fetch at most this often.")
OIDC_LEEWAY = Variable(
    "LEOFLOW_OIDC_LEEWAY", 30.0, number(maximum=300, positive=False),
    "Seconds of clock skew tolerated on a token's `exp`, `nbf` and `iat`.")
OIDC_SCOPES = Variable[tuple[str, ...]](
    "LEOFLOW_OIDC_SCOPES", ("openid", "email", "profile", "offline_access"), scope_names,
    "Comma-separated scopes `leoflow login` asks for.")
OIDC_CLIENT_SECRET = Variable[str | None](
    "LEOFLOW_OIDC_CLIENT_SECRET", None, optional_text,
    "The client secret, when the provider makes Leoflow's client a confidential one (the dashboard's code "
    "exchange sends it; PKCE is used either way).", secret=True)
OIDC_SESSION_SECRET = Variable[str | None](
    "LEOFLOW_OIDC_SESSION_SECRET", None, session_secret,
    "At least 32 random characters, the same on every replica: signs the dashboard's sign-in cookies. Dashboard "
    "sign-in through the provider is offered only when it, `LEOFLOW_OIDC_ISSUER` and `LEOFLOW_OIDC_CLIENT_ID` "
    "are set.", secret=True, shown_default="(none: no dashboard sign-in)")

#: Every environment variable Leoflow reads, in documentation order.
VARIABLES: tuple[Variable[object], ...] = (  # type: ignore[assignment]
    DATABASE_URL, DB_POOL_SIZE, DB_STATEMENT_TIMEOUT, CLUSTER, NODE_ID, HOST, PORT, API_URL, URL, TOKEN, AUTH,
    API_TOKENS, API_TOKENS_FILE, API_TOKEN_MAX_DAYS, TEAMS_FILE, METRICS_AUTH, MAX_BODY_BYTES, EXECUTOR, HOME,
    SYNC_MAX_BODY_BYTES, LOG_FORMAT, LOG_LEVEL,
    ELECTION_POLL_INTERVAL, KEEPALIVE_INTERVAL, LEADER_LEASE, SHUTDOWN_GRACE, SCHEDULER_STALL_TIMEOUT,
    HEARTBEAT_INTERVAL, NODE_DOWN_AFTER, SCHEDULER_INTERVAL, PARALLELISM, MAX_RETRY_DELAY, LOCAL_PARALLELISM,
    TASK_LOG_MAX_BYTES, LOG_SHIP_ATTEMPTS, KILL_GRACE, K8S_NAMESPACE, K8S_SERVICE_ACCOUNT, K8S_IMAGE_PULL_SECRETS,
    K8S_PENDING_TIMEOUT, K8S_POD_TEMPLATE, K8S_POD_POLICY, K8S_ALLOWED_SERVICE_ACCOUNTS, K8S_PROTECTED_SECRETS,
    K8S_POD_RETENTION, K8S_ARTIFACTS_IMAGE, DAGS_DIR, DAGS_SOURCE, RETENTION_DAYS,
    AUDIT_RETENTION_DAYS, LOG_ARCHIVE_URL, LOG_ARCHIVE_RETENTION, LOG_ARCHIVE_FLUSH_INTERVAL,
    LOG_ARCHIVE_TIMEOUT, NOTIFY_WEBHOOK, NOTIFY_EVENTS, NOTIFY_SECRETS_DIR, NOTIFY_HEADERS, NOTIFY_HEADER_HOSTS,
    NOTIFY_ALLOWED_HOSTS, NOTIFY_RETRY_DELAY, DASHBOARD_URL, METRICS_MAX_DAGS,
    METRICS_MAX_TASKS, OIDC_ISSUER, OIDC_AUDIENCE, OIDC_CLIENT_ID, OIDC_ALGORITHMS, OIDC_GROUPS_CLAIM,
    OIDC_NAME_CLAIM, OIDC_ADMIN_GROUPS, OIDC_KEYS_MAX_AGE, OIDC_KEYS_MIN_INTERVAL, OIDC_LEEWAY, OIDC_SCOPES,
    OIDC_CLIENT_SECRET, OIDC_SESSION_SECRET,
)

#: The leader-election and scheduling timings a production replica runs with (benchmarks start
#: replicas with these, so a benchmark measures what users get).
PRODUCTION_TIMINGS: tuple[Variable[float], ...] = (
    ELECTION_POLL_INTERVAL, KEEPALIVE_INTERVAL, LEADER_LEASE, SHUTDOWN_GRACE, HEARTBEAT_INTERVAL, NODE_DOWN_AFTER,
    SCHEDULER_INTERVAL,
)
