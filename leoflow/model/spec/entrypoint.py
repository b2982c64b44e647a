"""A task without ``command``: the image's entrypoint runs with ``args`` (ADR 0014, decision 8).

Every pod spec may leave ``command`` out, and Kubernetes then runs the image's ``ENTRYPOINT``
with the container's ``args``; so may a Leoflow task (canonical form ``command: []``, so the
hashes of specs that have a command do not change). The local executor starts a process, not an
image, and cannot know an image's entrypoint: the API refuses such a spec when the cluster runs
the local executor (422 at ``tasks[i].command``), and a stored spec that reaches it anyway (the
executor was switched after the apply) fails its try with the same words.
"""

from __future__ import annotations

from leoflow.errors import ValidationFailed
from leoflow.model.spec.dag import DagSpec

#: The one sentence both refusals use.
LOCAL_NEEDS_COMMAND = "the local executor needs a command: it cannot read an image's entrypoint"


def check_entrypoints(spec: DagSpec, executor: str) -> None:
    """ValidationFailed naming the first container task without ``command`` when ``executor`` is ``local``."""
    if executor != "local":
        return
    for where, tasks in (("tasks", spec.tasks), ("on_exit", spec.on_exit)):
        for i, task in enumerate(tasks):
            if task.kind == "container" and not task.command:
                raise ValidationFailed(f"{where}[{i}].command", LOCAL_NEEDS_COMMAND)
