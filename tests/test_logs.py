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


def test_no_log_call_passes_a_key_the_log_record_owns() -> None:
    """``extra={"name": …}`` (or ``created``, ``message``, …) makes ``logging`` raise KeyError when the
    record is made — at INFO in production, where tests at WARNING never see it: a sign-in answered
    500 and a backfill step raised after its commit. Every ``extra=`` dict literal is read here."""
    import ast
    from pathlib import Path

    reserved = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
    found = []
    for path in sorted((Path(__file__).resolve().parent.parent / "leoflow").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            for keyword in node.keywords:
                if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                    keys = {k.value for k in keyword.value.keys if isinstance(k, ast.Constant)}
                    found += [f"{path.name}:{node.lineno}: {key}" for key in sorted(keys & reserved)]
    assert not found, found
