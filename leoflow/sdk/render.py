"""Running a Python DAG file to get its specs — in a child process, with a deadline, never on a replica.

``leoflow dags render FILE.py`` and ``leoflow dags sync DIR`` (for the ``*.py`` files next to the
YAML) call :func:`render_file`, which runs ``python -m leoflow.sdk.render`` on the file in a
fresh interpreter. The child executes the file (``__name__`` is ``"__leoflow_render__"``, so an
``if __name__ == "__main__":`` block does not run), validates every DAG it made with the
server's own validator, and writes the outcome as JSON to a result file. The parent reads it.

Why a child: the file is arbitrary code. Run in the CLI's own process, a file that loops forever
would hang CI with no message, one that calls ``sys.exit`` would end the sync half-way, and two
files would share module state. The child is killed at the deadline (Airflow's DAG processor has
the same idea, ``dagbag_import_timeout``, but runs it next to the scheduler; here it never comes
near the server: the replicas keep reading YAML only).

Failure semantics — each is a :class:`FileProblem` naming the file and the line, and a sync
that meets one changes nothing (it asks the server for a dry run of the rest, as for a bad YAML
file):

- the file raises (the deepest line of the traceback inside the file is named);
- it runs past the deadline (the line it was executing is named when the child could say so);
- it writes to standard output, which ``render`` prints the specs on (the first ``print``'s line);
- a DAG it made does not validate (:class:`~leoflow.sdk.dag.DagError`, located at the task's line).
"""

from __future__ import annotations

import argparse
import faulthandler
import io
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

#: Seconds a DAG file may take to run (``--timeout``): generous for a file that builds a few
#: thousand tasks in a loop (~1 s), short enough that a file stuck on a network call fails a CI
#: job in a minute rather than at the CI's own timeout.
DEFAULT_TIMEOUT = 60.0
#: Seconds a child may take beyond the file's deadline to start and report (its imports, ~0.3 s idle).
STARTUP_ALLOWANCE = 60.0
#: Seconds past its deadline before a child that faulthandler could not end is killed.
KILL_GRACE = 10.0
#: Most ``.py`` files rendered at once (each is an interpreter: ~30 MB, ~0.3 s of imports).
PARALLEL = 4
#: Deepest subdirectory searched for ``*.py`` files (as for YAML, ``housekeeping.dag_directory``).
MAX_DEPTH = 16
#: Most ``*.py`` DAG files one sync renders.
MAX_FILES = 10_000


@dataclass(frozen=True)
class FileProblem:
    """One problem of a Python DAG file, in the shape the API reports sync problems in."""

    file: str
    line: int | None
    problem: str
    path: str = ""
    document: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "document": self.document, "path": self.path, "problem": self.problem,
                "line": self.line, "column": 1 if self.line else None}

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return ": ".join(p for p in (where, self.path, self.problem) if p)


@dataclass(frozen=True)
class RenderedDag:
    dag_id: str
    spec: dict[str, Any]
    #: The line that made the DAG, and for ``tasks[i]``/``on_exit[i]`` the line that made the task.
    line: int
    lines: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Rendered:
    """What one file gave: its DAGs, or its problems (then no DAG of it may be applied)."""

    name: str
    dags: tuple[RenderedDag, ...] = ()
    problems: tuple[FileProblem, ...] = ()

    def yaml_text(self) -> str:
        """The DAGs as one multi-document YAML text (what a sync sends for this file)."""
        from leoflow.model.files.yaml_loader import dump_yaml

        return "---\n".join(dump_yaml(d.spec) for d in self.dags)

    def locate(self, problem: dict[str, Any]) -> dict[str, Any]:
        """A server's problem with this file's YAML, moved to the Python line it came from."""
        index = problem.get("document")
        dag = self.dags[index if isinstance(index, int) and index < len(self.dags) else 0] if self.dags else None
        if dag is None:
            return problem
        path = str(problem.get("path") or "")
        line = next((n for prefix, n in sorted(dag.lines.items(), key=lambda kv: -len(kv[0]))
                     if path == prefix or path.startswith((prefix + ".", prefix + "["))), dag.line)
        return {**problem, "line": line, "column": 1}


# --------------------------------------------------------------------------- the parent

def python_files(root: Path) -> list[tuple[str, Path]]:
    """``(name relative to root, path)`` of every ``*.py`` under ``root`` (a directory or one file), sorted;
    dot-entries and ``__pycache__`` skipped, like the YAML reader's walk."""
    if root.is_file():
        return [(root.name, root)] if root.suffix == ".py" else []
    found: list[tuple[str, Path]] = []
    seen: set[Path] = set()

    def walk(directory: Path, prefix: str, depth: int) -> Iterator[tuple[str, Path]]:
        real = directory.resolve()
        if real in seen:
            return
        seen.add(real)
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if entry.name.startswith(".") or entry.name == "__pycache__":
                continue
            if entry.is_dir() and depth < MAX_DEPTH:
                yield from walk(Path(entry.path), f"{prefix}{entry.name}/", depth + 1)
            elif entry.is_file() and entry.name.endswith(".py"):
                yield f"{prefix}{entry.name}", Path(entry.path)

    if root.is_dir():
        for item in walk(root, "", 0):
            found.append(item)
            if len(found) > MAX_FILES:
                raise ValueError(f"{root}: more than {MAX_FILES} Python files")
    return sorted(found)


def render_file(path: Path, name: str, *, root: Path | None = None, timeout: float = DEFAULT_TIMEOUT) -> Rendered:
    """Run one DAG file in a child interpreter and return its DAGs or its problems (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="leoflow-render-") as scratch:
        result = Path(scratch) / "result.json"
        argv = [sys.executable, "-X", "utf8", "-m", "leoflow.sdk.render", os.path.abspath(path), "--name", name,
                "--result", str(result), "--root", os.path.abspath(root or path.parent),
                "--deadline", str(timeout)]
        late = FileProblem(name, None, f"did not finish within {timeout:g} s (a loop, or waiting on the network?): "
                           "nothing was rendered")
        try:
            # The child keeps the deadline itself, over the file's run alone (a loaded CI machine may
            # take seconds just to start an interpreter); this one is the backstop if it cannot.
            child = subprocess.run(argv, capture_output=True, timeout=timeout + STARTUP_ALLOWANCE,
                                   stdin=subprocess.DEVNULL, cwd=os.path.abspath(root or path.parent), check=False)
        except subprocess.TimeoutExpired:
            return Rendered(name, problems=(late,))
        return _collect(name, path, result, child.stdout, child.stderr, late)


def render_files(items: Sequence[tuple[str, Path]], *, root: Path,
                 timeout: float = DEFAULT_TIMEOUT) -> list[Rendered]:
    """Render many files (``(name, path)`` pairs): on Linux one interpreter loads the SDK and the
    validator once and forks a child per file (a few at a time), each isolated and under its own
    deadline as with :func:`render_file` — an interpreter's start costs ~0.5 s idle and seconds on a
    loaded CI machine, a fork ~10 ms. Elsewhere, one interpreter per file."""
    if len(items) < 2 or not sys.platform.startswith("linux"):
        with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
            return list(pool.map(lambda item: render_file(item[1], item[0], root=root, timeout=timeout), items))
    with tempfile.TemporaryDirectory(prefix="leoflow-render-") as scratch:
        listing = Path(scratch) / "files.json"
        listing.write_text(json.dumps([{"path": os.path.abspath(p), "name": n} for n, p in items]))
        argv = [sys.executable, "-X", "utf8", "-m", "leoflow.sdk.render", "--batch", str(listing), "--out", scratch,
                "--root", os.path.abspath(root), "--deadline", str(timeout)]
        late = f"did not finish within {timeout:g} s (a loop, or waiting on the network?): nothing was rendered"
        rounds = -(-len(items) // PARALLEL)
        try:
            zygote = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, check=False,
                                    timeout=(timeout + KILL_GRACE) * rounds + STARTUP_ALLOWANCE,
                                    cwd=os.path.abspath(root))
        except subprocess.TimeoutExpired:
            return [Rendered(name, problems=(FileProblem(name, None, late),)) for name, _ in items]
        out = []
        for i, (name, path) in enumerate(items):
            stdout, stderr = (Path(scratch, f"{i}.{s}").read_bytes() if Path(scratch, f"{i}.{s}").exists() else b""
                              for s in ("stdout", "stderr"))
            out.append(_collect(name, path, Path(scratch, f"{i}.json"), stdout, stderr or zygote.stderr,
                                FileProblem(name, None, late)))
        return out


def _collect(name: str, path: Path, result: Path, stdout: bytes, stderr: bytes, late: FileProblem) -> Rendered:
    """What one child left: its result file, else what its standard error says happened."""
    data = json.loads(result.read_text()) if result.exists() else None
    if data is None and b"Timeout (" in stderr:  # faulthandler's report at the deadline
        return Rendered(name, problems=(FileProblem(name, _last_line(stderr, path), late.problem),))
    if data is None:
        tail = stderr.decode(errors="replace").strip().splitlines()[-1:] or ["it ended without a result"]
        return Rendered(name, problems=(FileProblem(name, None, f"rendering failed: {tail[0][:300]}"),))
    problems = [FileProblem(p["file"], p["line"], p["problem"], p["path"], p["document"]) for p in data["problems"]]
    if stdout and not any("standard output" in p.problem for p in problems):
        problems.append(FileProblem(name, None, "wrote to standard output (render prints the specs there): "
                                    f"{stdout[:80]!r}; log to sys.stderr instead"))
    if problems:
        return Rendered(name, problems=tuple(problems))
    dags = tuple(RenderedDag(d["dag_id"], d["spec"], d["line"], d["lines"]) for d in data["dags"])
    return Rendered(name, dags=dags)


def _last_line(stderr: bytes | None, path: Path) -> int | None:
    """The line of ``path`` the child was on when killed (from its faulthandler dump), if it said."""
    text = (stderr or b"").decode(errors="replace")
    marker = f'File "{os.path.abspath(path)}", line '
    found = [chunk.split()[0] for chunk in text.split(marker)[1:] if chunk.split()]
    return int(found[0]) if found and found[0].isdigit() else None


# --------------------------------------------------------------------------- the child

class _StdoutGuard(io.TextIOBase):
    """Stands in for ``sys.stdout`` while the file runs: remembers where the first write came from."""

    def __init__(self, real: TextIO, path: str) -> None:
        self.real = real
        self.path = path
        self.first_line: int | None = None
        self.written = False

    def write(self, text: str) -> int:
        if text and not self.written:
            self.written = True
            self.first_line = _line_in(self.path, traceback.extract_stack())
        return self.real.write(text)

    def flush(self) -> None:
        self.real.flush()


def _line_in(path: str, frames: traceback.StackSummary) -> int | None:
    """The innermost line of ``frames`` in ``path``."""
    lines = [f.lineno for f in frames if os.path.abspath(f.filename) == path and f.lineno]
    return lines[-1] if lines else None


def _child(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m leoflow.sdk.render")
    parser.add_argument("file", nargs="?")
    parser.add_argument("--name")
    parser.add_argument("--result")
    parser.add_argument("--batch", help="a JSON list of {path, name}: fork one child per file")
    parser.add_argument("--out", help="with --batch: where each child writes N.json, N.stdout, N.stderr")
    parser.add_argument("--root", required=True)
    parser.add_argument("--deadline", type=float, required=True)
    args = parser.parse_args(argv)
    # The SDK and the validator load before any clock starts: the deadline is the file's own time.
    import leoflow.model.spec.dag
    import leoflow.sdk  # noqa: F401
    if args.batch:
        _batch(json.loads(Path(args.batch).read_text()), args.out, args.root, args.deadline)
    else:
        _render_one(os.path.abspath(args.file), args.name, args.root, args.deadline, args.result)
    return 0


def _batch(files: list[dict[str, str]], out: str, root: str, deadline: float) -> None:
    """Fork a child per file, :data:`PARALLEL` at a time; kill one that outlives its own deadline."""
    pending = list(enumerate(files))
    running: dict[int, float] = {}
    while pending or running:
        while pending and len(running) < PARALLEL:
            i, entry = pending.pop(0)
            pid = os.fork()
            if pid == 0:  # the child: its output to files, the file rendered, gone without cleanup
                code = 1
                try:
                    for fd, suffix in ((1, "stdout"), (2, "stderr")):
                        os.dup2(os.open(os.path.join(out, f"{i}.{suffix}"), os.O_WRONLY | os.O_CREAT, 0o600), fd)
                    _render_one(entry["path"], entry["name"], root, deadline, os.path.join(out, f"{i}.json"))
                    code = 0
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    os._exit(code)
            running[pid] = time.monotonic()
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            running.pop(pid, None)
            continue
        for child, started in list(running.items()):
            if time.monotonic() - started > deadline + KILL_GRACE:  # faulthandler could not end it
                os.kill(child, signal.SIGKILL)
        time.sleep(0.005)


def _render_one(path: str, name: str, root: str, deadline: float, result: str) -> None:
    """Run one file and write its outcome to ``result`` (in a fresh child: a process or a fork)."""
    # At the deadline faulthandler prints where the file is (the parent reads the line) and exits.
    faulthandler.dump_traceback_later(deadline, exit=True)
    sys.path[:0] = [os.path.dirname(path), os.path.abspath(root)]
    guard = _StdoutGuard(sys.stdout, path)
    problems: list[dict[str, Any]] = []
    dags: list[dict[str, Any]] = []
    sys.stdout = guard
    try:
        runpy.run_path(path, run_name="__leoflow_render__")
    except SystemExit as exit_:
        problems.append(FileProblem(name, _line_in(path, traceback.extract_tb(exit_.__traceback__)),
                                    f"called sys.exit({exit_.code!r}) while being rendered").to_json())
    except SyntaxError as exc:
        problems.append(FileProblem(name, exc.lineno, f"invalid Python: {exc.msg}").to_json())
    except Exception as exc:  # the boundary: any failure of the user's code becomes a problem naming its line
        problems.extend(_raised(name, path, exc))
    finally:
        sys.stdout = guard.real
    if guard.written:
        problems.append(FileProblem(name, guard.first_line, "wrote to standard output (render prints the specs "
                                    "there); log to sys.stderr instead").to_json())
    if not problems:
        dags, problems = _specs(name, path)
    faulthandler.cancel_dump_traceback_later()
    Path(result).write_text(json.dumps({"dags": dags, "problems": problems}))


def _shown(name: str, path: str, file: str) -> str:
    return name if os.path.abspath(file) == path else os.path.relpath(file)


def _raised(name: str, path: str, exc: BaseException) -> list[dict[str, Any]]:
    from leoflow.sdk.located import DagError

    if isinstance(exc, DagError):
        return [FileProblem(_shown(name, path, p.where.file), p.where.line, p.problem, p.path).to_json()
                for p in (exc, *exc.also) if isinstance(p, DagError)]
    line = _line_in(path, traceback.extract_tb(exc.__traceback__))
    return [FileProblem(name, line, f"raised {type(exc).__name__}: {exc}"[:2000]).to_json()]


def _specs(name: str, path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from leoflow.sdk.dag import made_dags
    from leoflow.sdk.located import DagError

    made = made_dags()
    dags: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for dag in made:
        try:
            spec = dag.to_spec()
            json.dumps(spec, allow_nan=False)
        except DagError as exc:
            problems.extend(_raised(name, path, exc))
            continue
        except (TypeError, ValueError) as exc:
            problems.append(FileProblem(_shown(name, path, dag.where.file), dag.where.line,
                                        f"DAG {dag.dag_id!r} is not JSON: {exc}").to_json())
            continue
        lines = {f"tasks[{i}]": t.where.line for i, t in enumerate(dag.tasks)}
        lines.update({f"on_exit[{i}]": t.where.line for i, t in enumerate(dag.exit_tasks)})
        dags.append({"dag_id": dag.dag_id, "spec": spec, "line": dag.where.line, "lines": lines})
    return dags, problems


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1:]))
