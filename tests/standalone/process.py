"""Drives ``leoflow standalone`` as a real OS process, the way a person runs it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from leoflow.standalone.embedded import free_port


@dataclass
class Banner:
    url: str
    token: str | None
    example_run: str | None


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    env.update({"LEOFLOW_LOG_FORMAT": "text"}, **extra)
    return env


@dataclass
class Standalone:
    """One ``leoflow standalone`` process; stdout (the banner) and stderr (logs) are collected."""

    home: Path
    port: int = field(default_factory=free_port)
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    command: list[str] | None = None

    def __post_init__(self) -> None:
        self.stdout_lines: list[str] = []
        self.stderr_path = self.home.parent / f"{self.home.name}-{self.port}-{time.monotonic_ns()}.log"
        self.started = time.monotonic()
        command = self.command or [sys.executable, "-m", "leoflow", "standalone", "--port", str(self.port),
                                   *self.args]
        self._stderr = self.stderr_path.open("w")
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
                                     env=clean_env(LEOFLOW_HOME=str(self.home), **self.env))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.stdout_lines.append(line.rstrip("\n"))

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_banner(self, timeout: float = 120.0) -> Banner:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = "\n".join(self.stdout_lines)
            if "CLI:" in text:
                url = re.search(r"ready at (\S+)", text)
                token = re.search(r"token: (\S+)\s+\(admin", text)
                run = re.search(r"example run queued: \S+ / (\S+)", text)
                assert url, text
                return Banner(url.group(1), token.group(1) if token else None, run.group(1) if run else None)
            if self.proc.poll() is not None:
                raise AssertionError(f"standalone exited {self.proc.returncode}:\n{self.stderr[-3000:]}")
            time.sleep(0.05)
        raise AssertionError(f"no banner within {timeout}s:\n{self.stderr[-3000:]}")

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=f"http://127.0.0.1:{self.port}", headers=headers, timeout=10)

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            self._reader.join(timeout=5)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
            self._stderr.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.wait()


def start_and_stop(home: Path, **options: Any) -> Banner:
    """Start ``leoflow standalone`` on ``home``, wait for its banner, SIGTERM it: it must exit 0."""
    proc = Standalone(home, **options)
    try:
        banner = proc.wait_banner()
        proc.signal(signal.SIGTERM)
        assert proc.wait(timeout=90) == 0, proc.stderr[-3000:]
        return banner
    finally:
        proc.kill()


def wait_for_run(client: httpx.Client, dag_id: str, run_id: str, *, timeout: float = 120.0) -> dict[str, object]:
    """Poll the API until the run is finished; returns the run document."""
    deadline = time.monotonic() + timeout
    run: dict[str, object] = {}
    while time.monotonic() < deadline:
        response = client.get(f"/api/v2/dags/{dag_id}/runs/{quote(run_id, safe='')}")
        assert response.status_code == 200, response.text
        run = response.json()
        if run["state"] in ("success", "failed", "cancelled"):
            return run
        time.sleep(0.2)
    raise AssertionError(f"run not finished within {timeout}s: {run}")


def children_running(parent_pid: int, needle: str) -> list[int]:
    """Pids of processes whose command line contains ``needle`` and whose parent is ``parent_pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent_pid and needle in cmdline:
            found.append(int(entry.name))
    return found


def process_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
