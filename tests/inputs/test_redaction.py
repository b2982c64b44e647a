"""Secrets never reach a log line or a CLI error: a database password in the URL's userinfo or
in its query string (``password=``, ``sslpassword=``), in the message, in structured ``extra``
fields, in exception messages and tracebacks; through the real logging setup and through a
real ``leoflow serve`` process."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from leoflow.cli.main import main
from leoflow.logging_setup import configure_logging, redact_text, redact_url, redact_value, url_secrets
from tests.api.live import free_port

SECRET = "hunter2-userinfo"
QUERY_SECRET = "hunter2-query"
SSL_SECRET = "hunter2-sslkey"
URLS = {
    "userinfo": f"postgresql://leoflow:{SECRET}@db.example:5432/leoflow",
    "query": f"postgresql://leoflow@db.example:5432/leoflow?sslmode=require&password={QUERY_SECRET}"
             f"&sslpassword={SSL_SECRET}&passfile=/etc/leoflow/pgpass",
}
ALL_SECRETS = (SECRET, QUERY_SECRET, SSL_SECRET)


def clean(text: str) -> bool:
    return not any(secret in text for secret in ALL_SECRETS)


@pytest.mark.parametrize(("url", "expected"), [
    (URLS["userinfo"], "postgresql://leoflow:***@db.example:5432/leoflow"),
    (URLS["query"], "postgresql://leoflow@db.example:5432/leoflow?sslmode=require&password=***&sslpassword=***"
                    "&passfile=/etc/leoflow/pgpass"),
    ("postgresql://u@h/db?pass%77ord=x1&PASSWORD=x2", "postgresql://u@h/db?pass%77ord=***&PASSWORD=***"),
    ("postgresql://u:p@ss@h/db", "postgresql://u:***@h/db"),
    ("postgresql://h/db", "postgresql://h/db"),
], ids=["userinfo", "query", "encoded-name", "at-in-password", "no-password"])
def test_redact_url_masks_both_forms_and_shows_a_passfile(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize("form", ["userinfo", "query"])
@pytest.mark.parametrize("fmt", ["json", "text"])
def test_configured_logging_masks_every_part_of_a_record(form: str, fmt: str) -> None:
    url = URLS[form]
    stream = io.StringIO()
    # As `leoflow` configures it: the tokens and the database URL's passwords are known secrets.
    configure_logging(fmt=fmt, level="INFO", node_id="n1", stream=stream,
                      secrets=["tok-0123456789", *url_secrets(url)])
    log = logging.getLogger("leoflow.test.redaction")
    log.info("connecting to %s", url)
    log.info("connecting", extra={"database": url, "target": {"url": url, "password": "plain-secret",
                                                               "tries": [url, 3]},
                                  "dsn": urlsplit(url), "token": "tok-0123456789"})
    try:
        raise RuntimeError(f"could not connect to {url}")
    except RuntimeError:
        log.exception("database unreachable")
    log.warning("where am I", stack_info=True, extra={"url": url})
    out = stream.getvalue()
    assert clean(out), out
    assert "plain-secret" not in out and "tok-0123456789" not in out
    assert out.count("***") >= 6
    if form == "query":
        assert "passfile=/etc/leoflow/pgpass" in out
    if fmt == "json":
        records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(records) == 4
        assert records[1]["database"] == redact_url(url) and records[1]["target"]["password"] == "***"
        assert "RuntimeError: could not connect to postgresql://" in records[2]["exception"]
    else:
        assert "RuntimeError: could not connect to postgresql://" in out


def test_the_cli_one_line_error_masks_url_credentials(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # nothing listens there
    monkeypatch.setenv("LEOFLOW_URL", f"http://admin:{SECRET}@127.0.0.1:{port}/?password={QUERY_SECRET}")
    monkeypatch.setenv("LEOFLOW_TOKEN", "cli-token-0123456789")
    assert main(["dags", "list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the Leoflow API" in err and "***" in err
    assert clean(err), err

    for url in URLS.values():
        monkeypatch.setenv("LEOFLOW_DATABASE_URL", url.replace("db.example:5432", f"127.0.0.1:{port}"))
        assert main(["db", "current"]) == 1
        err = capsys.readouterr().err
        assert err.startswith("leoflow: error: ") and err.count("\n") == 1 and clean(err), err


def _with_password(database_url: str, form: str) -> str:
    parts = urlsplit(database_url)
    if form == "userinfo":
        user, _, host = parts.netloc.rpartition("@")
        return urlunsplit(parts._replace(netloc=f"{user or 'postgres'}:{SECRET}@{host}"))
    return urlunsplit(parts._replace(query=f"password={QUERY_SECRET}&sslpassword={SSL_SECRET}"))


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_a_real_serve_process_logs_no_password(database_url: str, tmp_path: Path, form: str) -> None:
    # The test server trusts local connections: the password is accepted and ignored, so the
    # replica comes up normally and logs what it logs about its database.
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    env.update({"LEOFLOW_DATABASE_URL": _with_password(database_url, form), "LEOFLOW_EXECUTOR": "memory",
                "LEOFLOW_AUTH": "disabled", "LEOFLOW_NODE_ID": "redaction", "LEOFLOW_LOG_FORMAT": "json",
                "LEOFLOW_LOG_LEVEL": "debug", "LEOFLOW_ELECTION_POLL_INTERVAL": "1"})
    stderr_path = tmp_path / "serve.log"
    with stderr_path.open("wb") as stderr:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "leoflow"), "serve", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=stderr, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, stderr_path.read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, stderr_path.read_text()[-3000:]
            time.sleep(0.2)
        assert httpx.get(f"http://127.0.0.1:{port}/api/v2/dags/nope", timeout=10).status_code == 404
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    out = stderr_path.read_text()
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    serving = [r for r in records if r["message"] == "API serving"]
    assert serving and "***" in serving[0]["database"], out[-3000:]  # the URL is logged, masked
    assert clean(out), [line for line in out.splitlines() if not clean(line)][:3]


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_patterns_alone_mask_urls_in_text_and_nested_values(form: str) -> None:
    url = URLS[form]
    assert clean(redact_text(f"failed: {url!r}; retrying {url}"))
    masked = redact_value({"db": {"urls": [url, (url,)], "password": "x-plain"}, "n": 3})
    assert clean(json.dumps(masked)) and masked["db"]["password"] == "***" and masked["n"] == 3
    assert url_secrets(url) and all(s in ALL_SECRETS for s in url_secrets(url))
    assert url_secrets("postgresql://u@h/db?passfile=/x") == []


def test_redact_text_keeps_ordinary_text() -> None:
    text = "run etl/manual__2026 failed: password authentication failed for user \"leoflow\" (passfile=/x)"
    assert redact_text(text) == text
