"""``leoflow serve`` refuses bad configuration with one line (no traceback), before doing anything."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

LEOFLOW = str(Path(sys.executable).parent / "leoflow")


def _serve(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LEOFLOW_")}
    base.update(env)
    return subprocess.run([LEOFLOW, "serve", *args], env=base, capture_output=True, text=True, timeout=60)


def test_refuses_without_tokens_unless_auth_disabled(database_url: str) -> None:
    result = _serve(LEOFLOW_DATABASE_URL=database_url)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "LEOFLOW_API_TOKENS" in result.stderr
    assert "Traceback" not in result.stderr


def test_refuses_without_database_url() -> None:
    result = _serve(LEOFLOW_AUTH="disabled")
    assert result.returncode == 2 and "LEOFLOW_DATABASE_URL" in result.stderr
    assert result.stderr.count("\n") == 1


def test_bad_port_names_the_flag() -> None:
    result = _serve("--port", "70000", LEOFLOW_AUTH="disabled")
    assert result.returncode == 2 and "--port" in result.stderr and "Traceback" not in result.stderr
