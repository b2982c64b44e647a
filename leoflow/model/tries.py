"""A task try as the scheduler and the executors exchange it: its key, its launch, its reports.

A *try* is one attempt at one task of one run. :class:`TryKey` names it everywhere (pod names,
claims, reports); :class:`TaskLaunch` is everything an executor needs to start it; a
:class:`StatusUpdate` is what an executor observed about it. Executors never decide task
states: the scheduler folds these reports into compare-and-set transitions
(:mod:`leoflow.scheduler.transitions`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from leoflow.model.artifacts.declared import TaskArtifacts

if TYPE_CHECKING:  # model.pod imports the run context, which imports this module
    from leoflow.model.k8s.pod import PodFields

#: The default of a launch's mappings: empty, and read-only so no launch can change another's.
_NOTHING: Mapping[str, Any] = MappingProxyType({})


class TryKey(NamedTuple):
    """Identifies one try of one task in one run (the cluster is implied by the executor).

    A named tuple, not a frozen dataclass: the scheduler builds one per try it queues and hashes it
    into its in-flight map, hundreds per step; a frozen dataclass sets each field through
    ``object.__setattr__`` and hashes a fresh tuple on every lookup (2.0 and 0.6 µs against 0.7
    and a cached C hash, measured). Immutable, ordered and printed the same way.
    """

    dag_id: str
    run_id: str
    task_id: str
    try_number: int
    #: Which instance of a mapped task (ADR 0014, decision 3); -1: an unmapped task.
    map_index: int = -1
    #: A mapped instance's task-instance row id (0 for unmapped tries): part of its pod name, so an
    #: instance re-created by a re-expansion, whose try numbers restart, never meets an old pod.
    instance: int = 0


def try_key(dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1,
            task_instance_id: int = 0) -> TryKey:
    """The key of a try as every reader builds it from a row: an unmapped try's key has exactly
    today's four parts (its pod name and annotations never change, ADR 0004)."""
    if map_index < 0:
        return TryKey(dag_id, run_id, task_id, try_number)
    return TryKey(dag_id, run_id, task_id, try_number, map_index, task_instance_id)


class TaskLaunch(NamedTuple):
    """Everything needed to start one try.

    A named tuple, like :class:`TryKey` and for the same reason: the scheduler builds one per try
    it hands over, 1,568 in one step of ``bench/scheduler.py``'s burst; as a frozen dataclass each
    took about 3 µs (ten ``object.__setattr__`` calls), as a named tuple about 1.5. Immutable, and
    so are its defaults (an empty read-only mapping, not one shared dict).
    """

    key: TryKey
    task_try_id: int
    term: int
    image: str | None
    command: Sequence[str]
    args: Sequence[str] = ()
    env: Mapping[str, str] = _NOTHING
    resources: Mapping[str, Any] = _NOTHING
    timeout_seconds: float | None = None
    #: Pod fields of the task (secret refs, volumes, placement, ...); None: none set.
    pod: PodFields | None = None
    #: The task declares outputs (leoflow.model.outputs): the try gets ``LEOFLOW_OUTPUTS`` and its
    #: executor reads what it wrote when it succeeds.
    outputs_declared: bool = False
    #: ``artifacts:`` (leoflow.model.artifacts.declared); None: the task declares none. The executor
    #: fetches the inputs before the try starts and uploads the outputs when it ends.
    artifacts: TaskArtifacts | None = None


#: What an executor can say about a try: it started, or it ended and how. ``skipped`` is never an
#: executor's word: the leader turns a failure whose exit code the task lists in
#: ``skip_on_exit_code`` into one (leoflow.scheduler.transitions.skipped_by_exit_code).
TryState = Literal["running", "success", "failed", "skipped"]


class StatusUpdate(NamedTuple):
    """One observation of a try by its executor (at least once per transition; duplicates are harmless).

    A named tuple (see :class:`TaskLaunch`): executors report two per try, thousands per second.
    """

    key: TryKey
    state: TryState
    at: datetime
    exit_code: int | None = None
    reason: str | None = None
    executor_ref: str | None = None
    #: What a successful try of a task declaring outputs wrote to ``LEOFLOW_OUTPUTS``, raw and
    #: unchecked (at most :data:`leoflow.model.outputs.READ_AT_MOST` bytes; ``b""``: nothing);
    #: None for every other report. The leader checks it (leoflow.model.outputs.check_outputs).
    outputs: bytes | None = None
