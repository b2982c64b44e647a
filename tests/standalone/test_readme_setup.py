"""The README's setup promises: exactly two commands, followed literally in a fresh virtualenv.

The slow test does what a newcomer does on a fresh machine: a new virtualenv, then the README's
first command verbatim (install + ``leoflow standalone --example``), until the sample run has
succeeded, then Ctrl-C; then the second command verbatim (install the dev extra + ``pytest``),
narrowed with ``PYTEST_ADDOPTS`` to a few fast modules so it does not recurse into the whole
suite. Only environment variables differ from what a person types: a temporary ``LEOFLOW_HOME``,
a free ``LEOFLOW_PORT`` and ``PIP_NO_COMPILE=1`` (speed). pip uses the machine's configuration
(its cache and local wheel directories).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import REGISTRY

import leoflow.metrics
from leoflow.standalone.embedded import free_port
from leoflow.standalone.home import StandaloneHome
from tests.standalone.process import wait_for_run
from tests.standalone.procs import postgres_pids

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _section(title: str) -> str:
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert match, f"README has no section {title!r}"
    return match.group(1)


def setup_commands() -> list[str]:
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", _section("Setup on a fresh machine"), re.S)]


def test_setup_is_exactly_two_one_line_commands_on_the_first_screen() -> None:
    commands = setup_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands), commands
    run, test = commands
    assert run.endswith("leoflow standalone --example") and "pip install" in run
    assert test.endswith("pytest") and "[dev]" in test
    assert test in (ROOT / ".ci" / "run").read_text()
    first_screen = "\n".join(README.splitlines()[:40])
    assert run in first_screen and test in first_screen


def _registered_metrics() -> set[str]:
    for module in pkgutil.iter_modules(leoflow.metrics.__path__):
        importlib.import_module(f"leoflow.metrics.{module.name}")
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("leoflow_"):
            names.add(family.name + {"counter": "_total", "info": "_info"}.get(family.type, ""))
    return names


def test_documented_metrics_list_matches_what_the_code_registers() -> None:
    page = (ROOT / "docs" / "metrics.md").read_text()
    block = page.split("<!-- metrics-list:start -->", 1)[1].split("<!-- metrics-list:end -->", 1)[0]
    listed = set(re.findall(r"^\| `(leoflow_[a-z_]+)` \|", block, re.M))
    registered = _registered_metrics()
    assert registered - listed == set(), "document these in docs/metrics.md"
    assert listed - registered == set(), "docs/metrics.md lists metrics the code does not register"


def _venv_env(venv: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LEOFLOW_", "PYTEST_", "VIRTUAL_ENV", "PYTHONPATH"))}
    env["PATH"] = f"{venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
    env["VIRTUAL_ENV"] = str(venv)
    # Speed only: skip byte-compiling every installed file (kubernetes alone has thousands);
    # Python compiles what it imports on first use.
    env["PIP_NO_COMPILE"] = "1"
    env.update(extra)
    return env


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_readme_setup_commands_work_literally_in_a_fresh_virtualenv(tmp_path: Path) -> None:
    run_command, test_command = setup_commands()
    timings: dict[str, float] = {}
    venv = tmp_path / "venv"
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    timings["venv"] = time.monotonic() - started

    home = StandaloneHome.at(Path(os.environ.get("TMPDIR", "/tmp")) / f"lf-readme-{os.getpid()}")
    port = free_port()
    log = (tmp_path / "run.log").open("w")
    started = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", run_command], cwd=ROOT, stdout=subprocess.PIPE, stderr=log,
                            text=True, start_new_session=True,
                            env=_venv_env(venv, LEOFLOW_HOME=str(home.root), LEOFLOW_PORT=str(port)))
    try:
        assert proc.stdout is not None
        banner = ""
        for line in proc.stdout:  # ends when the process exits; pytest-timeout bounds the wait
            banner += line
            if "CLI:" in line:
                break
        timings["install_and_start"] = time.monotonic() - started
        token = re.search(r"token: (\S+)\s+\(admin", banner)
        run_id = re.search(r"example run queued: example / (\S+)", banner)
        url = re.search(r"ready at (\S+)", banner)
        assert token and run_id and url, banner + (tmp_path / "run.log").read_text()[-3000:]
        assert url.group(1) == f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=url.group(1), headers={"Authorization": f"Bearer {token.group(1)}"},
                          timeout=10) as api:
            assert wait_for_run(api, "example", run_id.group(1))["state"] == "success"
        timings["example_run"] = time.monotonic() - started - timings["install_and_start"]

        # The README's "in a second terminal" step (LEOFLOW_URL only because the port is not 8080).
        cli = subprocess.run(["leoflow", "runs", "list", "example"], capture_output=True, text=True, timeout=60,
                             env=_venv_env(venv, LEOFLOW_HOME=str(home.root), LEOFLOW_URL=url.group(1),
                                           LEOFLOW_TOKEN=token.group(1)))
        assert cli.returncode == 0 and run_id.group(1) in cli.stdout, cli.stdout + cli.stderr

        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        assert proc.wait(timeout=120) == 0, (tmp_path / "run.log").read_text()[-3000:]
        assert postgres_pids(home.data_dir) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
        log.close()
        if postgres_pids(home.data_dir):
            from leoflow.standalone.embedded import EmbeddedPostgres

            EmbeddedPostgres(home.data_dir, port=1, socket_dir=home.socket_dir).kill()
        subprocess.run(["rm", "-rf", str(home.root)], check=False)

    started = time.monotonic()
    narrowed = "-p no:cacheprovider tests/test_readme.py tests/standalone/test_home_files.py"
    result = subprocess.run(["bash", "-c", test_command], cwd=ROOT, capture_output=True, text=True, timeout=1200,
                            env=_venv_env(venv, PYTEST_ADDOPTS=narrowed))
    timings["install_dev_and_pytest"] = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert re.search(r"\d+ passed", result.stdout), result.stdout[-2000:]
    print("readme setup timings (s):", {k: round(v, 1) for k, v in timings.items()})
