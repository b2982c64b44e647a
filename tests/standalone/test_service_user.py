"""The helper user PostgreSQL runs as when we are root: created once, whoever asks at the same time.

A CI run on a new machine lost a third of the suite to this: three test workers created the user
at once; one's ``useradd`` failed with "already exists", another's server found its user gone.
"""

from __future__ import annotations

import multiprocessing
import os
import pwd
import shutil
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from leoflow.standalone.embedded import service_user

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("useradd") is None,
                                reason="creates a system user: needs root and useradd")

PROCESSES = 8


@pytest.fixture
def throwaway_user() -> Iterator[str]:
    name = f"lf-t{uuid.uuid4().hex[:10]}"
    yield name
    subprocess.run(["userdel", name], capture_output=True)


def _ask(name: str, gate: multiprocessing.synchronize.Barrier, out: multiprocessing.Queue[object]) -> None:
    gate.wait()
    try:
        user = service_user(name)
        out.put(None if user is None else (user.uid, user.gid))
    except Exception as exc:  # reported to the test, which names it
        out.put(f"{type(exc).__name__}: {exc}")


def test_processes_that_start_at_once_get_the_same_user(throwaway_user: str) -> None:
    ctx = multiprocessing.get_context("fork")
    gate, out = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=_ask, args=(throwaway_user, gate, out)) for _ in range(PROCESSES)]
    for p in procs:
        p.start()
    answers = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    entry = pwd.getpwnam(throwaway_user)
    assert answers == [(entry.pw_uid, entry.pw_gid)] * PROCESSES


def test_an_existing_user_is_used_as_it_is(throwaway_user: str) -> None:
    first = service_user(throwaway_user)
    assert first is not None and service_user(throwaway_user) == first
