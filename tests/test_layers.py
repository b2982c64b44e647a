"""The package's layers, enforced: imports run one way, SQL lives in ``db``, one door to Kubernetes.

The rules are docs/adr/0008-layers.md, read mechanically. Every module under ``leoflow/`` is
parsed (not imported) and every import found anywhere in it counts — at the top, inside a
function, behind ``TYPE_CHECKING``, or as a string passed to ``importlib.import_module`` — so a
lazy import cannot slip a dependency past the rule.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "leoflow"

#: Everything above the data layer that runs on a replica or only on the leader.
_SERVICES = ("leoflow.election", "leoflow.executor", "leoflow.scheduler", "leoflow.notify", "leoflow.backfill",
             "leoflow.housekeeping", "leoflow.api", "leoflow.cli", "leoflow.standalone", "leoflow.replica")
#: (importing package, forbidden targets): "a change violates the decision when" one appears.
#: The same rules as the import-linter contracts in pyproject.toml (tests/test_import_contracts.py),
#: read here again because this walk also sees module names passed to ``importlib`` as strings.
FORBIDDEN: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("leoflow.db", ("leoflow.scheduler", "leoflow.executor", "leoflow.election", "leoflow.api", "leoflow.cli",
                    "leoflow.standalone", "leoflow.replica")),
    ("leoflow.election", ("leoflow.scheduler", "leoflow.executor", "leoflow.api", "leoflow.cli",
                          "leoflow.standalone", "leoflow.replica")),
    ("leoflow.api", ("leoflow.scheduler", "leoflow.executor", "leoflow.election.elector", "leoflow.replica",
                     "leoflow.standalone", "leoflow.cli")),
    ("leoflow.scheduler", ("leoflow.api", "leoflow.election", "leoflow.cli", "leoflow.standalone",
                           "leoflow.replica")),
    # The day-2 leader services stand beside the scheduler and know nothing of it.
    ("leoflow.notify", ("leoflow.api", "leoflow.election", "leoflow.cli", "leoflow.standalone", "leoflow.replica",
                        "leoflow.scheduler", "leoflow.executor", "leoflow.backfill")),
    ("leoflow.backfill", ("leoflow.api", "leoflow.election", "leoflow.cli", "leoflow.standalone", "leoflow.replica",
                          "leoflow.scheduler", "leoflow.executor", "leoflow.notify")),
    ("leoflow.model", ("leoflow.db", "leoflow.settings", "leoflow.metrics", "leoflow.api", "leoflow.scheduler",
                       "leoflow.executor", "leoflow.election", "leoflow.cli", "leoflow.replica", "leoflow.leadership")),
    ("leoflow.executor", ("leoflow.api", "leoflow.election", "leoflow.scheduler", "leoflow.cli",
                          "leoflow.standalone", "leoflow.replica")),
    ("leoflow.housekeeping", ("leoflow.api", "leoflow.election", "leoflow.scheduler", "leoflow.executor",
                              "leoflow.cli", "leoflow.standalone", "leoflow.replica")),
    ("leoflow.settings", ("leoflow.db", "leoflow.scheduler", "leoflow.executor", "leoflow.election",
                          "leoflow.api")),
    # Object storage stands beside the data layer: below every service, knowing neither the database nor metrics.
    ("leoflow.storage", ("leoflow.db", "leoflow.metrics", "leoflow.leadership", "leoflow.aiotasks", *_SERVICES)),
    # The API client: only errors of the package, so a client verb loads a few small modules.
    ("leoflow.client", ("leoflow.cli", "leoflow.db", "leoflow.settings", "leoflow.model", "leoflow.metrics",
                        "leoflow.leadership", "leoflow.aiotasks", *_SERVICES)),
    # The Python DAG SDK produces specs: the pure model and the errors only (the server never imports it).
    ("leoflow.sdk", ("leoflow.db", "leoflow.settings", "leoflow.metrics", "leoflow.leadership", "leoflow.aiotasks",
                     "leoflow.client", *_SERVICES)),
    # The Kubernetes object model is checked without a DAG around it.
    ("leoflow.model.k8s", ("leoflow.model.spec", "leoflow.model.files")),
    # The spec language knows nothing of files (a spec from an API body and one from a file are one).
    ("leoflow.model.spec", ("leoflow.model.files",)),
    ("leoflow.errors", ("leoflow.",)),
    ("leoflow.clock", ("leoflow.",)),
    # Prometheus objects: any layer may count, so metrics know only the domain and the settings.
    ("leoflow.metrics", ("leoflow.db", "leoflow.leadership", "leoflow.aiotasks", *_SERVICES)),
    # What a leader service is and receives, and guarded tasks: below every service, beside each other.
    ("leoflow.leadership", ("leoflow.aiotasks", "leoflow.metrics", *_SERVICES)),
    ("leoflow.aiotasks", ("leoflow.leadership", "leoflow.metrics", *_SERVICES)),
    # Traces (OpenTelemetry, when configured): any service may emit, so tracing knows only the domain.
    ("leoflow.tracing", ("leoflow.db", "leoflow.settings", "leoflow.leadership", "leoflow.aiotasks",
                         "leoflow.metrics", *_SERVICES)),
)
#: The one module that may import the official Kubernetes client.
KUBERNETES_DOOR = "leoflow.executor.kubernetes.kube_client"
#: Modules allowed to speak to the database driver or SQLAlchemy directly (the data layer and
#: the migration runner's env script, which lives outside the package).
DRIVER_PACKAGES = ("leoflow.db",)
DRIVERS = ("psycopg", "psycopg_pool", "sqlalchemy", "alembic")

#: Upper-case SQL statements as they appear in code (documentation prose is lower case or
#: names a statement in backticks, which docstrings may do).
SQL_PATTERNS = [re.compile(p) for p in (
    r"\bSELECT\b[\s\S]*\bFROM\b", r"\bSELECT\s+(pg_|count|1\b|\*)", r"\bINSERT\s+INTO\b",
    r"\bUPDATE\s+\w+\s+SET\b", r"\bDELETE\s+FROM\b", r"^\s*LISTEN\b", r"^\s*NOTIFY\b",
    r"\bCREATE\s+(TABLE|INDEX|DATABASE|ROLE)\b", r"^\s*(SET|SHOW|BEGIN|COMMIT|ROLLBACK)\b\s+\w",
    r"\bALTER\s+(TABLE|ROLE|SYSTEM)\b", r"\bDROP\s+(TABLE|DATABASE|ROLE)\b",
)]


@dataclass(frozen=True)
class Found:
    module: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.module}:{self.line}: {self.what}"


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> Iterator[tuple[str, Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield module_name(path), path, ast.parse(path.read_text(), filename=str(path))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def imports(module: str, path: Path, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every module name ``module`` imports, wherever the import statement is."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            yield node.lineno, target
            for alias in node.names:  # ``from leoflow.executor import kubernetes`` names a module too
                yield node.lineno, f"{target}.{alias.name}"
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant):
                value = node.args[0].value
                if isinstance(value, str):
                    yield node.lineno, value
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and re.fullmatch(r"leoflow(\.\w+)+", node.value)):
            # Module names kept in data (e.g. a list of modules to pre-import) count as imports.
            yield node.lineno, node.value


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".") or (package.endswith(".") and name.startswith(package))


def layer_violations() -> list[Found]:
    found: list[Found] = []
    for module, path, tree in modules():
        for line, target in imports(module, path, tree):
            for owner, forbidden in FORBIDDEN:
                if _within(module, owner) and any(_within(target, f) for f in forbidden):
                    found.append(Found(module, line, f"imports {target} ({owner} may not)"))
            top = target.split(".")[0]
            if top == "kubernetes" and module != KUBERNETES_DOOR:
                found.append(Found(module, line, f"imports {target} (only {KUBERNETES_DOOR} may)"))
            if top in DRIVERS and not any(_within(module, p) for p in DRIVER_PACKAGES):
                found.append(Found(module, line, f"imports {target} (only leoflow.db may use the database driver)"))
    return sorted(set(found), key=str)


def _docstrings(tree: ast.Module) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def sql_outside_db() -> list[Found]:
    found: list[Found] = []
    for module, _path, tree in modules():
        if _within(module, "leoflow.db"):
            continue
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and any(p.search(node.value) for p in SQL_PATTERNS)):
                found.append(Found(module, node.lineno, f"SQL in a string literal: {node.value.strip()[:60]!r}"))
    return sorted(set(found), key=str)


def test_imports_run_one_way() -> None:
    violations = layer_violations()
    assert not violations, "layer violations (docs/adr/0008-layers.md):\n" + "\n".join(map(str, violations))


def test_sql_lives_in_the_data_layer() -> None:
    found = sql_outside_db()
    assert not found, "SQL outside leoflow/db (docs/adr/0008-layers.md):\n" + "\n".join(map(str, found))


def test_the_checker_sees_lazy_and_string_imports(tmp_path: Path) -> None:
    """The walker must count imports inside functions and importlib strings, or the rules are hollow."""
    source = ("def f():\n    from leoflow.scheduler import core\n"
              "import importlib\nimportlib.import_module('leoflow.executor.local')\n")
    tree = ast.parse(source)
    targets = {t for _, t in imports("leoflow.election.x", PACKAGE / "election" / "x.py", tree)}
    assert "leoflow.scheduler" in targets and "leoflow.executor.local" in targets
    sql = ast.parse("q = 'SELECT id FROM dag_runs'\nmessage = 'select a value from the list'\n")
    literals = [n.value for n in ast.walk(sql) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    assert [any(p.search(s) for p in SQL_PATTERNS) for s in literals] == [True, False]


#: What ``leoflow/db/`` holds directly besides ``connection/`` (plumbing) and ``stores/`` (named by
#: entity): the tables, shared fragments, migrations.
DB_TOP_LEVEL = {"__init__", "tables", "fragments", "arrays", "queued_tries", "migrations"}
#: The sub-packages of ``db/stores/``: entities whose SQL is split by what it does to them.
STORE_PACKAGES = {"datasets", "log_archive", "pods", "runs", "task_instances", "waits"}


def test_the_data_layer_is_plumbing_tables_and_one_store_per_entity() -> None:
    """A new store goes to ``db/stores/`` named by its entity, plumbing to ``db/connection/``."""
    direct = {p.stem for p in (PACKAGE / "db").glob("*.py")}
    assert direct == DB_TOP_LEVEL, sorted(direct ^ DB_TOP_LEVEL)
    assert {p.name for p in (PACKAGE / "db").iterdir() if p.is_dir() and p.name != "__pycache__"} == {
        "connection", "stores"}
    assert {p.name for p in (PACKAGE / "db" / "stores").iterdir()
            if p.is_dir() and p.name != "__pycache__"} == STORE_PACKAGES
    for folder in ("db", "db/connection", "db/stores"):
        assert len(list((PACKAGE / folder).glob("*.py"))) <= 21, folder  # 20 modules and __init__


#: Words that once named two things, and the modules that may bear each now, all with one meaning
#: (Leoflow's own log lines are ``logging_setup``, a task's captured output ``executor/log_tail``,
#: a URL's parameters ``api/url_params``, the Kubernetes client ``kube_client``, the API's
#: connection pool ``db/connection/api_pool``).
ONE_MEANING: dict[str, set[str]] = {
    "logs": {"api/routes/logs", "executor/kubernetes/logs"},  # a task's logs
    "params": {"model/spec/params"},  # a DAG's run params
    "output": {"cli/output"},  # how the CLI prints
    "client": {"settings/client"},  # the API client's settings (the client itself is the package)
    "session": set(), "pool": set(), "outcome": set(), "outcome_store": set(), "completion_store": set(),
}


def test_no_folder_holds_more_than_twenty_modules() -> None:
    """A folder of more than 20 modules wants sub-packages (STYLE.md 14)."""
    crowded = {str(folder.relative_to(PACKAGE)): n for folder in [PACKAGE, *PACKAGE.rglob("*")]
               if folder.is_dir() and (n := len(list(folder.glob("*.py")))) > 20}
    assert not crowded, crowded


def test_words_that_once_meant_two_things_name_one_module_kind() -> None:
    """``pool``, ``session``, ``outcome``, ``logs``: one word, one meaning (STYLE.md 13)."""
    stems = {p.relative_to(PACKAGE).with_suffix("").as_posix() for p in PACKAGE.rglob("*.py")}
    for word, allowed in ONE_MEANING.items():
        assert {s for s in stems if s.rsplit("/", 1)[-1] == word} == allowed, word
