"""Structured logging: one JSON object per line off a TTY, readable text on one.

Context travels with the record: pass ``extra={"dag_id": ..., "run_id": ..., "term": ...}`` and
the JSON formatter emits those keys. Every record carries ``node_id`` so lines from N replicas
can be merged.

Secrets never reach the output. :class:`RedactingFilter` scrubs every record before any handler
formats it — the message, every ``extra`` value (strings, nested mappings and lists, and the
text of any other object), the formatted traceback and the stack — with :func:`redact_text`:

- a URL's password, in its userinfo (``postgresql://u:***@h/db``) or in its query string
  (``?password=***``, ``&sslpassword=***``; libpq decodes percent-encoded parameter names, so
  ``pass%77ord`` counts too), and ``password=`` / ``sslpassword=`` in key=value connection
  strings; a ``passfile`` path is shown (it is where the secret is, not the secret);
- values of mapping keys that name a secret (``password``, ``token``, ``secret``, ...);
- any configured token (the API tokens), wherever it appears.

The CLI's one-line errors go through :func:`redact_text` too (:mod:`leoflow.cli.main`).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import traceback
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is context.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message", "asctime", "taskName"}

MASK = "***"
#: Query and connection-string parameters whose value is a secret (libpq's names).
SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
#: Mapping keys in structured context whose value is a secret.
_SECRET_KEY = re.compile(r"pass(word|wd)?$|secret|token|credential|api_?key", re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
#: ``password=x`` / ``sslpassword='x y'`` (connection strings), ``"password": "x"`` (reprs, JSON).
_KV_PASSWORD = re.compile(r"((?:ssl)?password['\"]?\s*[=:]\s*)('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s&,'\"}]+)",
                          re.IGNORECASE)


def _redact_query(query: str) -> str:
    parts = []
    for item in query.split("&"):
        name, sep, _ = item.partition("=")
        parts.append(f"{name}={MASK}" if sep and unquote(name).strip().lower() in SECRET_PARAMETERS else item)
    return "&".join(parts)


def redact_url(url: str) -> str:
    """``postgresql://u:secret@h/db?sslpassword=x`` → ``postgresql://u:***@h/db?sslpassword=***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.partition(':')[0]}:{MASK}@{host}"
    return urlunsplit(parts._replace(netloc=netloc, query=_redact_query(parts.query)))


def url_secrets(url: str | None) -> list[str]:
    """The passwords a URL carries (as written and percent-decoded), for :class:`RedactingFilter`.

    Masking them by value catches them wherever they end up, even in a parsed form no pattern
    recognises (a ``SplitResult`` in ``extra``, a driver's ``repr`` of its connection options).
    """
    if not url:
        return []
    try:
        parts = urlsplit(url)
    except ValueError:
        return []
    found = [parts.password or ""]
    for item in parts.query.split("&"):
        name, sep, value = item.partition("=")
        if sep and unquote(name).strip().lower() in SECRET_PARAMETERS:
            found.append(value)
    # Very short values would mask ordinary words; such passwords are not worth their name anyway.
    return sorted({v for raw in found for v in (raw, unquote(raw)) if len(v) >= 4}, key=len, reverse=True)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every URL's password, ``password=`` value and configured secret masked."""
    text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    text = _KV_PASSWORD.sub(rf"\1{MASK}", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, MASK)
    return text


def redact_value(value: Any, secrets: Iterable[str] = ()) -> Any:
    """A structured context value with its secrets masked (types kept where nothing changes)."""
    secrets = tuple(secrets)
    if isinstance(value, str):
        return redact_text(value, secrets)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _SECRET_KEY.search(k) and v not in (None, "")
                else redact_value(v, secrets) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, secrets) for v in value]
    text = str(value)
    cleaned = redact_text(text, secrets)
    return value if cleaned == text else cleaned


class RedactingFilter(logging.Filter):
    """Scrubs credentials from every part of a record before any handler formats it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_text(message, self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        for key, value in list(vars(record).items()):
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                secret = _SECRET_KEY.search(key) and value not in (None, "")
                setattr(record, key, MASK if secret else redact_value(value, self.secrets))
        if record.exc_info and not record.exc_text:
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info, self.secrets)
        return True


def _exception_text(formatter: logging.Formatter, record: logging.LogRecord) -> str | None:
    """The record's traceback: the redacted text the filter left, else formatted now."""
    if record.exc_text:
        return record.exc_text
    return formatter.formatException(record.exc_info) if record.exc_info else None


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, node_id, message, then context fields."""

    def __init__(self, node_id: str) -> None:
        super().__init__()
        self.node_id = node_id

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "node_id": self.node_id,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                payload[key] = value
        exception = _exception_text(self, record)
        if exception:
            payload["exception"] = exception
        if record.stack_info:
            payload["stack"] = record.stack_info
        return json.dumps(payload, default=str)


class TextFormatter(logging.Formatter):
    """Human-readable lines; context fields appended as key=value."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        extras = " ".join(f"{k}={v}" for k, v in vars(record).items()
                          if k not in _STANDARD_ATTRS and not k.startswith("_"))
        line = f"{ts} {record.levelname:<7} {record.name}: {record.getMessage()}"
        if extras:
            line += f"  {extras}"
        exception = _exception_text(self, record)
        if exception:
            line += "\n" + exception
        if record.stack_info:
            line += "\n" + record.stack_info
        return line


def configure_logging(*, fmt: str, level: str, node_id: str, secrets: Iterable[str] = (),
                      stream: Any = None) -> None:
    """Install Leoflow's handler on the root logger (replacing any earlier one)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter(node_id) if fmt == "json" else TextFormatter())
    handler.addFilter(RedactingFilter(secrets))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Third-party chatter that would drown our lines at INFO. All of alembic: since 1.16 it logs
    # "setup plugin ..." at INFO when first imported, which the CLI now does after this point
    # (db verbs and standalone import alembic lazily), so a one-line CLI error stayed one line.
    for noisy in ("kubernetes", "urllib3", "httpx", "httpcore", "alembic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, logging.getLevelName(level)))
    # uvicorn installs its own handlers; route them through ours.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers = []
        lg.propagate = True
