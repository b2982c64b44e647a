"""Structured logging: JSON lines with context, no ANSI, no secrets."""

from __future__ import annotations

import io
import json
import logging

from leoflow.logging_setup import configure_logging, redact_url


def test_json_lines_carry_context_and_node_id() -> None:
    stream = io.StringIO()
    configure_logging(fmt="json", level="INFO", node_id="n1", stream=stream)
    logging.getLogger("leoflow.test").info("run started", extra={"dag_id": "etl", "run_id": "r1", "term": 7})
    record = json.loads(stream.getvalue().strip())
    assert record["message"] == "run started"
    assert record["node_id"] == "n1" and record["level"] == "info" and record["logger"] == "leoflow.test"
    assert (record["dag_id"], record["run_id"], record["term"]) == ("etl", "r1", 7)
    assert "ts" in record
    assert "\x1b[" not in stream.getvalue()


def test_secrets_are_scrubbed() -> None:
    stream = io.StringIO()
    configure_logging(fmt="json", level="INFO", node_id="n1", stream=stream, secrets=["tok-abcdefgh"])
    log = logging.getLogger("leoflow.test")
    log.warning("connecting to postgresql://admin:hunter2@db:5432/x")
    log.warning("password=hunter2 token tok-abcdefgh")
    out = stream.getvalue()
    assert "hunter2" not in out and "tok-abcdefgh" not in out


def test_redact_url() -> None:
    assert redact_url("postgresql://u:secret@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert redact_url("postgresql://h/db") == "postgresql://h/db"
