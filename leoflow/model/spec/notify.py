"""Notifications as data: a DAG's ``notify`` rules, the events, and the JSON a webhook receives.

A DAG spec may carry::

    notify:
      - on: [failure, deadline]
        webhook:
          url: https://alerts.example/leoflow
          secret: {name: leoflow-webhooks, key: signing-key}          # optional
          header_from_env: {header: Authorization, env: LEOFLOW_NOTIFY_HEADER_ALERTS}  # optional

Events: ``failure`` (a run ended failed), ``success`` (a run succeeded), ``retry`` (a try failed
and the task will be tried again), ``deadline`` (a run was failed by its run deadline; its
reason is :data:`DEADLINE_REASON`). A deadline is also a failure: a rule that lists ``failure``
but not ``deadline`` receives it too, and a rule listing both receives it once. Cancelled runs
send nothing.

Without a ``notify`` field a DAG uses the cluster default (``LEOFLOW_NOTIFY_WEBHOOK`` for the
events in ``LEOFLOW_NOTIFY_EVENTS``); ``notify: []`` opts the DAG out of every notification.

Secrets never live in a spec, only references to them, resolved by the delivering leader:

- ``secret: {name, key}`` — the HMAC-SHA256 signing key for the body, read from the file
  ``$LEOFLOW_NOTIFY_SECRETS_DIR/<name>/<key>``: exactly the layout of a Kubernetes Secret
  named ``name`` mounted at ``$LEOFLOW_NOTIFY_SECRETS_DIR/<name>`` (replicas have no Secret API
  access, by design). The signature is sent as ``X-Leoflow-Signature-256: sha256=<hex>``.
- ``header_from_env: {header, env}`` — a header whose value is the replica's environment
  variable ``env``, which must be named ``LEOFLOW_NOTIFY_HEADER_*`` (so a DAG author can never
  send the database URL or any other setting to a server of their choosing).

The payload (:func:`payload`) is one flat JSON object with a ``text`` field, so a Slack (or
Mattermost, Teams workflow) incoming webhook URL works as is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from leoflow.errors import ValidationFailed

EVENTS = ("failure", "success", "retry", "deadline")
#: The reason a run failed by its deadline carries (``dag_runs.reason``), set by the scheduler.
DEADLINE_REASON = "run deadline exceeded"
#: Prefix of the environment variables ``header_from_env`` may name.
HEADER_ENV_PREFIX = "LEOFLOW_NOTIFY_HEADER_"

MAX_RULES = 10
MAX_URL_LENGTH = 2000
_SECRET_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]{1,253}$")
_HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
_HEADER_ENV_RE = re.compile(r"^LEOFLOW_NOTIFY_HEADER_[A-Z0-9_]{1,100}$")
#: Headers a rule may not set: the transport's own, and ours.
_RESERVED_HEADERS = {"host", "content-type", "content-length", "transfer-encoding", "connection",
                     "x-leoflow-signature-256", "x-leoflow-delivery", "x-leoflow-event"}


@dataclass(frozen=True)
class SecretRef:
    name: str
    key: str


@dataclass(frozen=True)
class HeaderFromEnv:
    header: str
    env: str


@dataclass(frozen=True)
class Webhook:
    url: str
    secret: SecretRef | None = None
    header_from_env: HeaderFromEnv | None = None

    def to_canonical(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url}
        if self.secret:
            out["secret"] = {"name": self.secret.name, "key": self.secret.key}
        if self.header_from_env:
            out["header_from_env"] = {"header": self.header_from_env.header, "env": self.header_from_env.env}
        return out


@dataclass(frozen=True)
class NotifyRule:
    on: tuple[str, ...]
    webhook: Webhook

    def wants(self, event: str) -> bool:
        return event in self.on or (event == "deadline" and "failure" in self.on)

    def to_canonical(self) -> dict[str, Any]:
        return {"on": list(self.on), "webhook": self.webhook.to_canonical()}


def event_of_run(state: str, reason: str | None) -> str | None:
    """The event a run ending in ``state`` announces (None: nothing, e.g. cancelled)."""
    if state == "success":
        return "success"
    if state == "failed":
        # A run with exit tasks keeps its body's reason first, a failed exit task's after it.
        return "deadline" if reason is not None and reason.startswith(DEADLINE_REASON) else "failure"
    return None


def rules_wanting(rules: tuple[NotifyRule, ...], event: str) -> list[NotifyRule]:
    return [r for r in rules if r.wants(event)]


# --------------------------------------------------------------------------- parsing

def parse_notify(value: object, path: str = "notify") -> tuple[NotifyRule, ...] | None:
    """Validate the ``notify`` field (None when absent: the cluster default applies)."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise ValidationFailed(path, "must be a list of rules ({on: [...], webhook: {url: ...}})")
    if len(value) > MAX_RULES:
        raise ValidationFailed(path, f"has {len(value)} rules; at most {MAX_RULES} are allowed")
    return tuple(_rule(item, f"{path}[{i}]") for i, item in enumerate(value))


def parse_events(value: object, path: str) -> tuple[str, ...]:
    """A non-empty list of distinct event names."""
    if not isinstance(value, list) or not value:
        raise ValidationFailed(path, f"must be a non-empty list of events ({', '.join(EVENTS)})")
    seen: list[str] = []
    for i, event in enumerate(value):
        if event not in EVENTS:
            raise ValidationFailed(f"{path}[{i}]", f"must be one of {', '.join(EVENTS)}, got {event!r}")
        if event in seen:
            raise ValidationFailed(f"{path}[{i}]", f"duplicate event {event!r}")
        seen.append(event)
    return tuple(seen)


def parse_url(value: object, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValidationFailed(path, "must be an http(s) URL")
    if len(value) > MAX_URL_LENGTH:
        raise ValidationFailed(path, f"must be at most {MAX_URL_LENGTH} characters")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValidationFailed(path, "is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValidationFailed(path, "must be an http:// or https:// URL with a host")
    if any(c.isspace() or ord(c) < 32 for c in value):
        raise ValidationFailed(path, "must not contain whitespace or control characters")
    return value


def _rule(raw: object, path: str) -> NotifyRule:
    doc = _mapping(raw, path, {"on", "webhook"})
    on = parse_events(doc.get("on"), f"{path}.on")
    hook = _mapping(doc.get("webhook"), f"{path}.webhook", {"url", "secret", "header_from_env"})
    url = parse_url(hook.get("url"), f"{path}.webhook.url")
    secret = None
    if hook.get("secret") is not None:
        ref = _mapping(hook["secret"], f"{path}.webhook.secret", {"name", "key"})
        name, key = ref.get("name"), ref.get("key")
        if not isinstance(name, str) or not _SECRET_NAME_RE.match(name):
            raise ValidationFailed(f"{path}.webhook.secret.name", "must be a Kubernetes Secret name "
                                   "(lower-case letters, digits, '-' and '.')")
        if not isinstance(key, str) or not _SECRET_KEY_RE.match(key) or key in (".", ".."):
            raise ValidationFailed(f"{path}.webhook.secret.key",
                                   "must be a Secret key (letters, digits, '-', '_', '.')")
        secret = SecretRef(name, key)
    header = None
    if hook.get("header_from_env") is not None:
        ref = _mapping(hook["header_from_env"], f"{path}.webhook.header_from_env", {"header", "env"})
        name, env = ref.get("header"), ref.get("env")
        if not isinstance(name, str) or not _HEADER_RE.match(name) or name.lower() in _RESERVED_HEADERS:
            raise ValidationFailed(f"{path}.webhook.header_from_env.header",
                                   "must be an HTTP header name that is not reserved (e.g. Authorization)")
        if not isinstance(env, str) or not _HEADER_ENV_RE.match(env):
            raise ValidationFailed(f"{path}.webhook.header_from_env.env",
                                   f"must name an environment variable {HEADER_ENV_PREFIX}<NAME> (A-Z, 0-9, _)")
        header = HeaderFromEnv(name, env)
    return NotifyRule(on=on, webhook=Webhook(url=url, secret=secret, header_from_env=header))


#: What a read-scoped caller sees of a webhook URL after its host (a Slack URL's path is its credential).
HIDDEN_PATH = "/<hidden>"


def masked_url(url: str) -> str:
    """``scheme://host[:port]/<hidden>``: where a webhook goes, without its path, query or user info."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
        host = parts.hostname or ""
    except ValueError:
        return HIDDEN_PATH
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{HIDDEN_PATH}" if host else HIDDEN_PATH


def shown_error(error: str | None) -> str | None:
    """A stored delivery error as the API shows it. Errors are fixed reasons now ("HTTP 500",
    "timed out", "could not connect"); a row written by an older release may still carry the
    start of a receiver's answer ("HTTP 500: <body>") or the transport error's name, which
    told open ports from closed ones ("no answer: ReadError")."""
    if error is None:
        return None
    if error.startswith("HTTP "):
        return error.split(":", 1)[0][:8]
    if error.startswith("no answer:"):
        return "could not connect"
    return error


def hide_webhook_urls(spec: dict[str, Any]) -> dict[str, Any]:
    """A copy of a stored spec whose ``notify`` webhook URLs are masked (:func:`masked_url`); a
    spec without rules is returned as is."""
    rules = spec.get("notify")
    if not isinstance(rules, list) or not rules:
        return spec
    masked = []
    for rule in rules:
        hook = rule.get("webhook") if isinstance(rule, dict) else None
        if isinstance(hook, dict) and isinstance(hook.get("url"), str):
            rule = {**rule, "webhook": {**hook, "url": masked_url(hook["url"])}}
        masked.append(rule)
    return {**spec, "notify": masked}


def rule_from_canonical(doc: dict[str, Any]) -> NotifyRule:
    """A rule stored in a version's canonical spec (already validated)."""
    hook = doc["webhook"]
    secret = hook.get("secret")
    header = hook.get("header_from_env")
    return NotifyRule(on=tuple(doc["on"]), webhook=Webhook(
        url=hook["url"], secret=SecretRef(secret["name"], secret["key"]) if secret else None,
        header_from_env=HeaderFromEnv(header["header"], header["env"]) if header else None))


def _mapping(value: object, path: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValidationFailed(path, "must be a mapping")
    for key in value:
        if key not in allowed:
            raise ValidationFailed(f"{path}.{key}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    return value


# --------------------------------------------------------------------------- the payload

@dataclass(frozen=True)
class EventFacts:
    """What happened, as the observer read it from the database."""

    event: str
    dag_id: str
    run_id: str
    state: str
    logical_date: str | None
    task_id: str | None = None
    try_number: int | None = None
    reason: str | None = None
    duration_seconds: float | None = None


_HEADLINES = {"failure": "failed", "success": "succeeded", "deadline": "failed: run deadline exceeded",
              "retry": "has a task to retry"}


def payload(facts: EventFacts, *, cluster: str, dashboard_url: str | None) -> dict[str, Any]:
    """The documented JSON body of a notification (see docs/notifications.md)."""
    url = run_url(dashboard_url, facts.dag_id, facts.run_id) if dashboard_url else None
    text = f"[{cluster}] DAG *{facts.dag_id}* run `{facts.run_id}` {_HEADLINES[facts.event]}"
    if facts.task_id:
        text += f" - task `{facts.task_id}`" + (f" try {facts.try_number}" if facts.try_number else "")
    if facts.reason and facts.event != "deadline":
        text += f": {facts.reason}"
    if url:
        text += f" <{url}|open in Leoflow>"
    return {
        "text": text,
        "event": facts.event,
        "cluster": cluster,
        "dag_id": facts.dag_id,
        "run_id": facts.run_id,
        "state": facts.state,
        "logical_date": facts.logical_date,
        "task_id": facts.task_id,
        "try_number": facts.try_number,
        "reason": facts.reason,
        "duration_seconds": facts.duration_seconds,
        "url": url,
    }


def run_url(base: str, dag_id: str, run_id: str) -> str:
    """The dashboard link of a run (``/#/dags/<dag>/runs/<run>``, as the dashboard routes it)."""
    return f"{base.rstrip('/')}/#/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"
