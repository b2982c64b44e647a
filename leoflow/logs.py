"""Structured logging: one JSON object per line off a TTY, readable text on one.

Context travels with the record: pass ``extra={"dag_id": ..., "run_id": ..., "term": ...}`` and
the JSON formatter emits those keys. Every record carries ``node_id`` so lines from N replicas
can be merged. Secrets never reach the output: URLs with passwords are redacted by
:func:`redact_url`, and :class:`RedactingFilter` scrubs ``password=`` / ``://user:pass@`` forms
and any configured token in case a library logs one.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from leoflow.settings.database_url import redact_database_url

# Attributes every LogRecord has; anything else on a record came from ``extra=`` and is context.
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("x", 0, "x", 0, "x", None, None))) | {
    "message", "asctime", "taskName"}

_URL_PASSWORD = re.compile(r"(\w+://[^:/@\s]+:)([^@\s]+)(@)")
_KV_PASSWORD = re.compile(r"(password\s*=\s*)('[^']*'|\S+)", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``postgresql://u:secret@h/db`` → ``postgresql://u:***@h/db``; safe to log (every libpq URL form)."""
    return redact_database_url(url)


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    text = _URL_PASSWORD.sub(r"\1***\3", text)
    text = _KV_PASSWORD.sub(r"\1***", text)
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return text


class RedactingFilter(logging.Filter):
    """Scrubs credentials from every record's message before any handler formats it."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact_text(message, self.secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


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
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
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
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
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
