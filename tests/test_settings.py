"""Settings: typed parsing, defaults, and one-line errors that never echo secrets."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from leoflow.errors import SettingsError
from leoflow.settings import VARIABLES, ApiSettings, EnvironmentReader, declared, load_settings

ROOT = Path(__file__).resolve().parent.parent


def test_defaults() -> None:
    s = load_settings({}, stderr_is_tty=lambda: False)
    assert s.database.url is None
    assert s.cluster.name == "default"
    assert s.cluster.node_id  # hostname
    assert (s.api.host, s.api.port) == ("0.0.0.0", 8080)
    assert s.executor.kind == "kubernetes"
    assert s.logging.format == "json"
    assert s.election.poll_interval == 5.0
    assert s.election.keepalive_interval == 1.0
    assert s.election.leader_lease == 10.0
    assert s.election.shutdown_grace == 10.0
    assert s.scheduler.parallelism == 128
    assert s.database.pool_size == 10


def test_log_format_defaults_to_text_on_a_tty() -> None:
    assert load_settings({}, stderr_is_tty=lambda: True).logging.format == "text"


def test_values_are_parsed() -> None:
    s = load_settings({
        "LEOFLOW_DATABASE_URL": "postgresql://u:p@db:5432/leoflow",
        "LEOFLOW_CLUSTER": "blue", "LEOFLOW_NODE_ID": "n1", "LEOFLOW_PORT": "9000",
        "LEOFLOW_EXECUTOR": "local", "LEOFLOW_LEADER_LEASE": "4", "LEOFLOW_KEEPALIVE_INTERVAL": "0.5",
        "LEOFLOW_API_TOKENS": "ci:admin:abcdefgh1234, dash:read:zyxwvuts9876",
        "LEOFLOW_K8S_IMAGE_PULL_SECRETS": "a, b",
    })
    assert s.cluster.name == "blue" and s.cluster.node_id == "n1"
    assert s.api.port == 9000
    assert s.executor.kind == "local"
    assert s.election.leader_lease == 4.0
    assert [(t.name, t.scope) for t in s.api.tokens] == [("ci", "admin"), ("dash", "read")]
    assert s.executor.kubernetes.image_pull_secrets == ("a", "b")
    assert "abcdefgh1234" not in repr(s)


@pytest.mark.parametrize(("env", "variable"), [
    ({"LEOFLOW_PORT": "abc"}, "LEOFLOW_PORT"),
    ({"LEOFLOW_PORT": "70000"}, "LEOFLOW_PORT"),
    ({"LEOFLOW_EXECUTOR": "docker"}, "LEOFLOW_EXECUTOR"),
    ({"LEOFLOW_LOG_FORMAT": "xml"}, "LEOFLOW_LOG_FORMAT"),
    ({"LEOFLOW_KEEPALIVE_INTERVAL": "-1"}, "LEOFLOW_KEEPALIVE_INTERVAL"),
    ({"LEOFLOW_LEADER_LEASE": "nan"}, "LEOFLOW_LEADER_LEASE"),
    ({"LEOFLOW_LEADER_LEASE": "1", "LEOFLOW_KEEPALIVE_INTERVAL": "1"}, "LEOFLOW_LEADER_LEASE"),
    ({"LEOFLOW_METRICS_AUTH": "maybe"}, "LEOFLOW_METRICS_AUTH"),
    ({"LEOFLOW_DB_POOL_SIZE": "3"}, "LEOFLOW_DB_POOL_SIZE"),
    ({"LEOFLOW_DATABASE_URL": "not-a-url"}, "LEOFLOW_DATABASE_URL"),
    ({"LEOFLOW_DATABASE_URL": "mysql://u:p@h/db"}, "LEOFLOW_DATABASE_URL"),
    ({"LEOFLOW_DATABASE_URL": "postgresql://u:p@h:notaport/db"}, "LEOFLOW_DATABASE_URL"),
    ({"LEOFLOW_API_TOKENS": "justatoken"}, "LEOFLOW_API_TOKENS"),
    ({"LEOFLOW_API_TOKENS": "x:root:abcdefgh1234"}, "LEOFLOW_API_TOKENS"),
    ({"LEOFLOW_API_TOKENS_FILE": "/nonexistent/tokens"}, "LEOFLOW_API_TOKENS_FILE"),
])
def test_bad_values_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    assert info.value.variable == variable
    assert str(info.value).startswith(f"{variable}: ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("env", [
    {"LEOFLOW_DATABASE_URL": "mysql://admin:hunter2secret@h/db"},
    {"LEOFLOW_API_TOKENS": "ci:bogus:hunter2secret"},
])
def test_errors_never_echo_secrets(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    assert "hunter2secret" not in str(info.value)


def test_tokens_file(tmp_path: Path) -> None:
    f = tmp_path / "tokens"
    f.write_text("# comment\nops:admin:0123456789abcdef\nviewer:read:fedcba9876543210\n")
    s = load_settings({"LEOFLOW_API_TOKENS_FILE": str(f)})
    assert [t.name for t in s.api.tokens] == ["ops", "viewer"]


def test_every_variable_is_read_by_the_loader() -> None:
    """VARIABLES is the single list of settings: each one must actually be read."""
    reader = EnvironmentReader({})
    load_settings(reader=reader)
    assert reader.read == {variable.name for variable in VARIABLES}


def test_defaults_are_the_declared_ones() -> None:
    """An empty environment yields exactly the declared defaults (declared once, nowhere else)."""
    s = load_settings({}, stderr_is_tty=lambda: False)
    assert s.database.pool_size == declared.DB_POOL_SIZE.default == 10
    assert s.election.leader_lease == declared.LEADER_LEASE.default
    assert s.scheduler.parallelism == declared.PARALLELISM.default
    assert s.executor.kubernetes.pod_retention == declared.K8S_POD_RETENTION.default
    assert load_settings({}) .api == ApiSettings()


def test_no_other_module_reads_leoflow_environment() -> None:
    """Configuration is loaded once, here; other modules get it passed down."""
    pattern = re.compile(r"environ(\.get)?\s*[\[(]\s*[\"']LEOFLOW_")
    # The SDK's script template is text for the task's container (it writes the task's outputs to
    # $LEOFLOW_OUTPUTS, the task contract), not Leoflow reading its own configuration.
    task_side = {ROOT / "leoflow" / "sdk" / "script.py"}
    offenders = [str(p.relative_to(ROOT)) for p in (ROOT / "leoflow").rglob("*.py")
                 if p.name != "loader.py" and p not in task_side and pattern.search(p.read_text())]
    assert offenders == []
