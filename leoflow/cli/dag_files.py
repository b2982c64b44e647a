"""DAGs as code on the command line: ``leoflow dags apply|sync|delete`` (via the HTTP API; declared
under the ``dags`` command by :mod:`leoflow.cli.dags`).

- ``dags apply FILE...`` (``-`` reads stdin): each document of each file is applied on its own
  (``POST /api/v2/dags``); one bad document does not stop the others, and the exit code is 1
  if any failed.
- ``dags sync DIR [--prune [--prune-unlabeled]] [--dry-run] [--source NAME]``: every DAG file
  under DIR (``*.yaml``, ``*.yml``, ``*.json``, subdirectories too, dot-entries skipped — the
  way the leader reads ``LEOFLOW_DAGS_DIR``) is sent in one ``POST /api/v2/dags:sync``, which
  applies all of it or nothing. The plan is printed one DAG per line (created / changed /
  unchanged / deleted). ``--source`` defaults to ``LEOFLOW_DAGS_SOURCE``, so running it where
  the replicas run does exactly what the leader does.
- ``dags delete DAG...``: deletes DAGs (their active runs are cancelled; history stays).
- ``dags render FILE.py...``: runs Python DAG files (:mod:`leoflow.sdk`) and prints their specs as
  YAML; ``sync`` renders the ``*.py`` files under DIR the same way and sends the specs beside the
  YAML files. A file runs here, in a child process with a deadline (``--timeout``), never on a
  replica (:mod:`leoflow.sdk.render`); a file that raises, runs too long or prints to standard
  output is a problem of that file, and a sync with one changes nothing.

Every problem is printed the way compilers print them —
``dags/etl.yaml:14:9: tasks[1].depends_on[0]: unknown task 'extrct'`` — for syntax errors found
here and validation errors found by the server alike, and all of them at once: ``apply`` prints
every problem the server found in a document (up to its bound, ``leoflow.model.spec.dag.MAX_PROBLEMS``),
and a sync with an unreadable file still asks the server (as a dry run) about the others before
failing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, for_scripts, usage
from leoflow.cli.verbs import verb
from leoflow.client.api import Api, ApiUnavailable, ClientError, dag_path
from leoflow.errors import ValidationFailed

if TYPE_CHECKING:  # yaml and the DAG model load when apply/sync run, not when any verb parses
    from leoflow.model.files.documents import Document
    from leoflow.sdk.render import Rendered
    from leoflow.settings import ClientSettings

STDIN = "-"
STDIN_NAME = "<stdin>"


def register(dverbs: Any) -> None:
    """Add ``apply``, ``sync`` and ``delete`` to the ``dags`` verb group."""
    apply = verb(dverbs, "apply", "create or update DAGs from YAML/JSON files ('-' reads stdin)", dags_apply,
                 "POST /api/v2/dags")
    apply.add_argument("files", nargs="+", metavar="FILE",
                       help="DAG spec files (YAML, several documents allowed; JSON), or - for stdin")

    sync = verb(dverbs, "sync", "make the DAGs match a directory of DAG files, all or nothing", dags_sync,
                "POST /api/v2/dags:sync")
    sync.add_argument("directory", metavar="DIR",
                      help="directory of *.yaml, *.yml, *.json and *.py (leoflow.sdk) files (or one file)")
    sync.add_argument("--prune", action="store_true",
                      help="delete DAGs of this source that no file defines any more")
    sync.add_argument("--prune-unlabeled", action="store_true",
                      help="with --prune, also delete DAGs applied by hand (they carry no source label)")
    sync.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    sync.add_argument("--source", metavar="NAME",
                      help="sync source label owning these DAGs (default: LEOFLOW_DAGS_SOURCE, else 'default')")
    sync.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                      help="seconds each *.py DAG file may take to render (default 60)")

    # Not a client verb (it calls no operation), though it runs like one: no server settings, no logging.
    about = "run Python DAG files (leoflow.sdk) and print their specs, checked by the spec validator; nothing is sent"
    render = dverbs.add_parser("render", help=about, description=about)
    render.set_defaults(handler=dags_render, client=True, configure_logging=False, stored_login=False)
    render.add_argument("files", nargs="+", metavar="FILE.py", help="Python DAG files (leoflow.sdk)")
    render.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="seconds each file may take to render (default 60)")
    render.add_argument("--output", "-o", choices=("yaml", "json"), default="yaml",
                        help="yaml (default): one document per DAG; json: a list of specs")

    delete = verb(dverbs, "delete", "delete DAGs (active runs are cancelled; history is kept)", dags_delete,
                  "DELETE /api/v2/dags/{dag_id}")
    delete.add_argument("dag_ids", nargs="+", metavar="DAG")


class Problems(Exception):
    """Every validation problem the server found in one document, each located in its file."""

    def __init__(self, errors: list[Any]) -> None:
        super().__init__(f"{len(errors)} problems")
        self.errors = errors


def _error(message: str) -> None:
    print(f"leoflow: error: {message}", file=sys.stderr)


# --------------------------------------------------------------------------- apply

def _read(name: str) -> tuple[str, str]:
    """``(display name, text)`` of a file argument (``-``: stdin)."""
    from leoflow.model.files.documents import DocumentError

    if name == STDIN:
        return STDIN_NAME, sys.stdin.read()
    path = Path(name)
    try:
        return name, path.read_text(encoding="utf-8-sig")
    except OSError as exc:
        raise DocumentError(name, f"cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise DocumentError(name, "is not UTF-8 text") from None


def _apply_document(api: Api, document: Document, several: bool) -> tuple[str, dict[str, Any]]:
    """Apply one document: its line of output and the DAG the API answered."""
    from leoflow.model.files.documents import DocumentError
    from leoflow.model.files.yaml_loader import dump_yaml

    body = dump_yaml(document.data)  # read back by the server's YAML 1.2 loader alike
    try:
        answer = api.request("POST", "/api/v2/dags", ok=(200, 201), content=body.encode(),
                             headers={"Content-Type": "application/yaml"})
    except ApiUnavailable:
        raise
    except ClientError as exc:
        field = exc.details.get("field") if isinstance(exc.details, dict) else None
        every = exc.details.get("errors") if isinstance(exc.details, dict) else None
        if exc.status == 422 and isinstance(every, list) and all(isinstance(e, dict) for e in every):
            raise Problems([document.error(str(e.get("field") or ""), str(e.get("message")), several=several)
                            for e in every]) from None
        if exc.status == 422 and isinstance(field, str):
            problem = str(exc).removeprefix(f"{field}: ") if field else str(exc)
            raise document.error(field, problem, several=several) from None
        raise DocumentError(document.file, str(exc), document=document.index if several else None,
                            location=document.start) from None
    dag = answer.json()
    verb = "applied" if answer.status_code == 201 else "unchanged"
    # A re-apply that picked up a newer cluster template says so: ``cluster/etl 4 → 5``.
    moved = "".join(f", {c['template']} {c['from'] or 'new'} → {c['to'] or 'unused'}"
                    for c in dag.get("template_changes") or ())
    return f"{dag['dag_id']}: {verb} (version {dag['version']}{moved})", dag


def dags_apply(args: argparse.Namespace, client: ClientSettings) -> int:
    from leoflow.model.files.documents import DocumentError, load_documents

    if args.files.count(STDIN) > 1:
        usage("'-' (stdin) can be given only once")
    api = Api(client)
    failed = 0
    applied: list[dict[str, Any]] = []
    try:
        for name in args.files:
            try:
                shown, text = _read(name)
                documents = load_documents(shown, text)
                if not documents:
                    raise DocumentError(shown, "contains no DAG spec")
            except DocumentError as exc:
                failed += 1
                _error(str(exc))
                continue
            for document in documents:
                try:
                    line, dag = _apply_document(api, document, several=len(documents) > 1)
                except DocumentError as exc:
                    failed += 1
                    _error(str(exc))
                    continue
                except Problems as problems:
                    failed += 1
                    for problem in problems.errors:
                        _error(str(problem))
                    continue
                applied.append(dag)
                if not for_scripts(args):
                    print(line)
    finally:
        api.close()
    emitted(args, applied)
    return 1 if failed else 0


# --------------------------------------------------------------------------- sync

def _source(args: argparse.Namespace, client: ClientSettings) -> str:
    from leoflow.model.source_labels import source_label

    try:
        return source_label(args.source if args.source is not None else client.dags_source, "--source")
    except ValidationFailed as exc:
        usage(str(exc))


def dags_sync(args: argparse.Namespace, client: ClientSettings) -> int:
    from leoflow.housekeeping.dag_directory import DagDirectoryError, DirectorySnapshot, read_dag_directory

    if args.prune_unlabeled and not args.prune:
        usage("--prune-unlabeled only applies together with --prune")
    source = _source(args, client)
    try:
        root = Path(args.directory)
        # One .py file is rendered, not read as a spec (the reader takes any single file as one).
        one_python_file = root.suffix == ".py" and root.is_file()
        snapshot = DirectorySnapshot((), (), "") if one_python_file else read_dag_directory(root)
        rendered = _render_python(root, args.timeout)
    except DagDirectoryError as exc:
        raise ClientError(str(exc)) from None
    if args.prune and not snapshot.files and not snapshot.problems and not rendered:
        print(f"leoflow: warning: no DAG files (*.yaml, *.yml, *.json, *.py) under {args.directory}: "
              "every DAG of the source is deleted", file=sys.stderr)
    local = [p.to_json() for p in snapshot.problems] + [p.to_json() for r in rendered for p in r.problems]
    files = [{"name": f.name, "content": f.text} for f in snapshot.files]
    files += [{"name": r.name, "content": r.yaml_text()} for r in rendered if r.dags]
    body = {"source": source, "prune": args.prune, "prune_unlabeled": args.prune_unlabeled,
            # With unreadable files nothing may change; the server still reports on the others.
            "dry_run": args.dry_run or bool(local),
            "files": sorted(files, key=lambda f: f["name"])}
    api = Api(client)
    try:
        plan = api.json("POST", "/api/v2/dags:sync", json=body, timeout=SYNC_ANSWER_TIMEOUT)
    except ApiUnavailable:
        raise
    except ClientError as exc:
        remote = exc.details.get("errors") if isinstance(exc.details, dict) else None
        if not isinstance(remote, list):
            raise
        # The server saw a .py file's specs as YAML: point its problems at the Python lines instead.
        by_name = {r.name: r for r in rendered}
        remote = [by_name[p["file"]].locate(p) if isinstance(p, dict) and p.get("file") in by_name else p
                  for p in remote]
        return _report([*local, *remote])
    finally:
        api.close()
    if local:
        return _report(local)
    if not emitted(args, plan):
        _print_plan(plan)
    return 0


#: Seconds the CLI waits for a sync's answer. The server bounds the work itself (its request
#: deadline, ``LEOFLOW_DB_STATEMENT_TIMEOUT`` + 10 s, rolls the whole sync back), so the CLI must not
#: give up first: at the client's usual 30 s, a 10,000-file sync was abandoned at 35 s while the
#: server still worked on it. Well past the default server deadline, still finite if it hangs.
SYNC_ANSWER_TIMEOUT = 600.0


#: Most seconds ``--timeout`` grants one file: an hour is far past any file that only builds specs.
MAX_RENDER_TIMEOUT = 3600.0


def _render_timeout(value: float | None) -> float:
    """``--timeout``: seconds in (0, 3600], else a usage error naming the flag."""
    from leoflow.sdk.render import DEFAULT_TIMEOUT

    if value is None:
        return DEFAULT_TIMEOUT
    if not 0 < value <= MAX_RENDER_TIMEOUT:  # NaN fails this too
        usage(f"--timeout must be more than 0 and at most {MAX_RENDER_TIMEOUT:g} seconds, got {value:g}")
    return value


def _render_python(root: Path, timeout: float | None) -> list[Rendered]:
    """Every ``*.py`` DAG file under ``root`` rendered (a few at a time, each in its own child process)."""
    from leoflow.sdk.render import python_files, render_files

    seconds = _render_timeout(timeout)
    try:
        found = python_files(root)
    except (OSError, ValueError) as exc:
        raise ClientError(f"{root}: cannot read the Python DAG files ({exc})") from None
    if not found:
        return []
    return render_files(found, root=root if root.is_dir() else root.parent, timeout=seconds)


def dags_render(args: argparse.Namespace, client: ClientSettings) -> int:
    """Print the specs of Python DAG files; every problem of every file on stderr (exit 1), nothing printed then."""
    from leoflow.model.files.yaml_loader import dump_yaml
    from leoflow.sdk.render import FileProblem, render_files

    seconds = _render_timeout(args.timeout)
    for name in args.files:
        if not name.endswith(".py"):
            usage(f"{name}: render takes Python DAG files (*.py); YAML files are specs already")
        if not Path(name).is_file():
            usage(f"{name}: no such file")
    results = render_files([(name, Path(name)) for name in args.files], root=Path.cwd(), timeout=seconds)
    problems = [p for r in results for p in r.problems]
    for result in results:
        if not result.problems and not result.dags:
            problems.append(FileProblem(result.name, None, "defines no DAG (make one with leoflow.sdk.DAG)"))
    if problems:
        for problem in problems:
            _error(str(problem))
        return 1
    specs = [d.spec for r in results for d in r.dags]
    if args.output == "json":
        print(json.dumps(specs, indent=2))
    else:
        print("---\n".join(dump_yaml(spec) for spec in specs), end="")
    return 0


def _report(problems: list[Any]) -> int:
    from leoflow.model.files.documents import describe

    for problem in problems:
        _error(describe(problem) if isinstance(problem, dict) else str(problem))
    files = {p.get("file") for p in problems if isinstance(p, dict)}
    _error(f"{len(problems)} problem(s) in {len(files)} file(s); nothing was changed")
    return 1


def _print_plan(plan: dict[str, Any]) -> None:
    rows = []
    for dag in plan["dags"]:
        version = f"version {dag['version']}" if dag.get("version") is not None else ""
        where = dag.get("file") or ""
        if dag.get("document") is not None and where:
            where += f" (document {dag['document']})"
        note = " (adopted: was applied by hand)" if dag.get("adopted") else ""
        rows.append((dag["action"], dag["dag_id"], version, where + note))
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, [*widths, 0], strict=True)).rstrip())
    counts = plan["counts"]
    summary = ", ".join(f"{counts[a]} {a}" for a in ("created", "changed", "unchanged", "deleted"))
    prefix = "dry run, nothing was changed; the sync would make: " if plan["dry_run"] else ""
    print(f"{prefix}{summary} (source {plan['source']!r})")
    if plan.get("missing"):
        print(f"not in the files, kept (--prune deletes them): {', '.join(plan['missing'])}")


# --------------------------------------------------------------------------- delete

def dags_delete(args: argparse.Namespace, client: ClientSettings) -> int:
    api = Api(client)
    failed = 0
    deleted: list[dict[str, Any]] = []
    try:
        for dag_id in args.dag_ids:
            try:
                api.request("DELETE", dag_path(dag_id), ok=(204,))
            except ApiUnavailable:
                raise
            except ClientError as exc:
                failed += 1
                _error(f"{dag_id}: {exc}")
                continue
            deleted.append({"dag_id": dag_id, "deleted": True})
            if not for_scripts(args):
                print(f"{dag_id}: deleted")
    finally:
        api.close()
    emitted(args, deleted)
    return 1 if failed else 0
