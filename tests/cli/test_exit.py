"""A command that loaded the object-storage client ends without finalizing the interpreter.

The client's Tokio worker threads can panic while ``Py_Finalize`` tears the interpreter down, and
Rust then aborts the finished process (SIGABRT): 2 in 100 failed ``leoflow artifacts fetch`` runs
against the suite's S3 server did before :func:`leoflow.cli.main._exit_before_finalization`. That
rate is too low for a test to catch the abort itself, so this test watches the mechanism: an
``atexit`` hook, which runs during finalization, must not run once ``obstore`` is loaded — and must
still run for a verb that never loads it (so the probe is shown to see finalization at all).
Exit codes and the last line on stderr are kept either way.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

#: The console script's own call, ``sys.exit(main())``, behind an atexit hook that reports finalization.
PROBE = """
import atexit, sys
atexit.register(lambda: print("FINALIZED", file=sys.stderr, flush=True))
from leoflow.cli.main import main
sys.exit(main())
"""


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)


def test_a_storage_verb_exits_with_its_code_and_no_finalization(tmp_path: Path) -> None:
    missing = json.dumps([{"name": "d", "key": "artifacts/c1/42/nope.tar.gz", "path": "in/x"}])
    done = _run(["artifacts", "fetch", "--root", str(tmp_path / "root"), "--inputs", missing],
                {"LEOFLOW_LOG_ARCHIVE_URL": (tmp_path / "archive").as_uri()})
    assert done.returncode == 1, done.stderr
    assert "input artifact 'd':" in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.endswith("\n")  # the last line was flushed whole before the process ended
    assert "FINALIZED" not in done.stderr


def test_a_verb_without_storage_finalizes_as_usual(tmp_path: Path) -> None:
    # A client verb against an address where nothing listens: it fails with one line, exit 1.
    done = _run(["dags", "list"], {"LEOFLOW_URL": "http://127.0.0.1:9", "LEOFLOW_TOKEN": "t"})
    assert done.returncode == 1, done.stderr
    assert "FINALIZED" in done.stderr
