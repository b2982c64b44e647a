"""A set of DAG files, validated as a whole: what ``leoflow dags sync`` and the leader apply.

A sync is all-or-nothing, so it needs *every* problem of *every* file at once, not the first
one: :func:`parse_dag_files` reads each file's documents (:mod:`.documents`), validates each
document as a DAG spec (:func:`leoflow.model.spec.dag.parse_dag_spec`), rejects a DAG id defined
twice in the set, and returns the valid DAGs next to the list of problems, each naming its
file, document, path, line and column. Callers apply the DAGs only when that list is empty.

File names are labels for messages (a path relative to the synced directory); nothing here
touches a file system. A source label (``LEOFLOW_DAGS_SOURCE``, ``dags sync --source``) names
who owns the DAGs a sync creates: pruning only ever deletes DAGs carrying the sync's own label
(:mod:`.source_labels`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from leoflow.errors import ValidationFailed
from leoflow.model.bounds import check_string_keys
from leoflow.model.files.documents import DocumentError, Location, load_documents
from leoflow.model.files.yaml_loader import YamlBudget
from leoflow.model.spec.dag import DagSpec, parse_dag_spec
from leoflow.model.spec.entrypoint import check_entrypoints
from leoflow.model.spec.pod_policy import PodPolicy, check_dag_pods
from leoflow.model.spec.reuse import ClusterTemplates, cluster_refs

#: Which files of a directory are DAG files (compared case-insensitively).
DAG_FILE_SUFFIXES = (".yaml", ".yml", ".json")
#: Most files in one sync, and the longest file name (a relative path) reported back.
MAX_FILES = 10_000
MAX_FILE_NAME = 1024
#: Most DAGs one sync may define.
MAX_DAGS = 10_000


@dataclass(frozen=True)
class DagFile:
    """One file of a sync: a name (relative path) and its text."""

    name: str
    text: str


@dataclass(frozen=True)
class LocatedDag:
    """A valid DAG spec and where it was defined."""

    spec: DagSpec
    file: str
    #: Its index among the file's documents (None when it is the file's only one).
    document: int | None
    #: Where its ``dag_id`` is (None for JSON files).
    location: Location | None = None

    def problem(self, path: str, problem: str) -> dict[str, object]:
        """A problem with this DAG in the shape of :meth:`DocumentError.to_json`."""
        return DocumentError(self.file, problem, document=self.document, path=path, location=self.location).to_json()


@dataclass(frozen=True)
class DagSet:
    """The valid DAGs of a set of files and every problem found; apply only when ``ok``."""

    dags: tuple[LocatedDag, ...]
    errors: tuple[DocumentError, ...]

    @property
    def ok(self) -> bool:
        return not self.errors


def cluster_templates_named(files: Sequence[DagFile]) -> set[tuple[str, int | None]]:
    """The cluster templates the files may use: every ``cluster/NAME[@V]`` in their text (a superset)."""
    return {ref for file in files for ref in cluster_refs(file.text)}


def is_dag_file(name: str) -> bool:
    return name.lower().endswith(DAG_FILE_SUFFIXES)


def parse_dag_files(files: Sequence[DagFile], budget: YamlBudget | None = None, *,
                    pod_policy: PodPolicy | None = None, executor: str | None = None,
                    cluster_templates: ClusterTemplates | None = None) -> DagSet:
    """Every DAG of ``files`` and every problem in them (see the module docstring).

    With a ``pod_policy`` (the cluster's, :mod:`leoflow.model.spec.pod_policy`), a pod field it refuses
    is a problem of its document like any invalid field; with an ``executor`` kind, so is a task
    that the executor cannot start (:mod:`leoflow.model.spec.entrypoint`). ``cluster_templates``: those
    the files may use (``uses: cluster/NAME[@V]``; the caller reads :func:`cluster_templates_named`).

    With a ``budget`` (the API's ``dags:sync``), the files are held to it *together*: what their
    YAML stands for adds up, and reading stops at the first file past it or past its deadline
    (that file's error says so; the files after it are not read).
    """
    dags: list[LocatedDag] = []
    errors: list[DocumentError] = []
    defined: dict[str, LocatedDag] = {}
    for file in files:
        if budget is not None and budget.exhausted:
            break
        try:
            documents = load_documents(file.name, file.text, budget)
        except DocumentError as exc:
            errors.append(exc)
            continue
        several = len(documents) > 1
        for document in documents:
            if budget is not None and budget.out_of_time():
                errors.append(document.error("", budget.timed_out().problem, several=several))
                break
            try:
                check_string_keys(document.data, "")
                spec = parse_dag_spec(document.data, cluster_templates=cluster_templates)
                if pod_policy is not None:
                    check_dag_pods(spec, pod_policy)
                if executor is not None:
                    check_entrypoints(spec, executor)
            except ValidationFailed as exc:
                errors += [document.error(e.path, e.problem, several=several) for e in (exc, *exc.also)]
                continue
            located = LocatedDag(spec, file.name, document.index if several else None, document.locate("dag_id"))
            first = defined.get(spec.dag_id)
            if first is not None:
                also = first.file if first.document is None else f"{first.file} (document {first.document})"
                errors.append(document.error("dag_id", f"DAG {spec.dag_id!r} is also defined in {also}",
                                             several=several))
                continue
            defined[spec.dag_id] = located
            dags.append(located)
    if len(dags) > MAX_DAGS:
        errors.append(DocumentError("", f"{len(dags)} DAGs in one sync; at most {MAX_DAGS} are allowed"))
    return DagSet(tuple(dags), tuple(errors))
