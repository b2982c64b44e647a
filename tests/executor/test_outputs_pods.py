"""Outputs on Kubernetes: the task container's termination message (ADR 0014 decision 1).

The pod of a task that declares outputs sets ``terminationMessagePath: /dev/termination-log``,
``terminationMessagePolicy: File`` and ``LEOFLOW_OUTPUTS`` naming that file on the ``task``
container — Leoflow's fields, which no template overrides; the executor reads
``state.terminated.message`` on success, also when a new leader adopts the pod. Through the
official client against the fake API server, whose kubelet copies the file's last 4,096 bytes
into the status as kuberuntime does.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.executor.kubernetes import pods
from leoflow.executor.naming import try_name
from leoflow.model.outputs import OutputDecl, check_outputs
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.pod_cases import Case, launch_of, validate_strictly
from tests.executor.test_kubernetes import run, started
from tests.executor.world import Recorder, seed_tries, set_term
from tests.harness.fake_k8s import FakeKubernetes

OUTPUTS = '{"n": 3, "files": ["a","b"]}'
WRITE = f"printf '{OUTPUTS}' > $LEOFLOW_OUTPUTS"
HOSTILE = {"spec": {"containers": [{"name": "task", "terminationMessagePath": "/tmp/elsewhere",
                                    "terminationMessagePolicy": "FallbackToLogsOnError",
                                    "env": [{"name": "LEOFLOW_OUTPUTS", "value": "/tmp/elsewhere"}]}]}}


def task_container(pod: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "task")  # type: ignore[no-any-return]


def render(declared: bool, template: dict[str, Any] | None = None) -> dict[str, Any]:
    launch = launch_of(Case({}))._replace(outputs_declared=declared)
    return pods.pod_spec("default", NAMESPACE, launch, service_account=None, image_pull_secrets=(),
                         template=template or {})


def test_the_task_container_of_a_task_with_outputs_writes_its_termination_log() -> None:
    container = task_container(render(True))
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert {"name": "LEOFLOW_OUTPUTS", "value": "/dev/termination-log"} in container["env"]
    validate_strictly(render(True))
    plain = task_container(render(False))  # a task without outputs: its pod is what it always was
    assert "terminationMessagePath" not in plain and "terminationMessagePolicy" not in plain
    assert all(e["name"] != "LEOFLOW_OUTPUTS" for e in plain["env"])


def test_no_template_overrides_leoflows_termination_fields() -> None:
    container = task_container(render(True, HOSTILE))
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "File"
    assert [e for e in container["env"] if e["name"] == "LEOFLOW_OUTPUTS"] == \
        [{"name": "LEOFLOW_OUTPUTS", "value": "/dev/termination-log"}]


def _finished(pod: dict[str, Any], code: int, message: str | None) -> dict[str, Any]:
    terminated: dict[str, Any] = {"exitCode": code}
    if message is not None:
        terminated["message"] = message
    return {**pod, "status": {"phase": "Succeeded" if code == 0 else "Failed", "containerStatuses": [
        {"name": "task", "state": {"terminated": terminated}}]}}


def test_the_outcome_of_a_pod_carries_the_message_only_for_a_success_of_a_task_with_outputs() -> None:
    declared, plain = render(True), render(False)
    assert pods.pod_outcome(_finished(declared, 0, OUTPUTS)).outputs == OUTPUTS.encode()
    assert pods.pod_outcome(_finished(declared, 0, None)).outputs == b""  # an untouched log: nothing written
    assert pods.pod_outcome(_finished(declared, 0, "\ud800")).outputs == b"\xed\xa0\x80"  # refused as not UTF-8
    assert pods.pod_outcome(_finished(declared, 1, OUTPUTS)).outputs is None  # a failure's message is its detail
    assert pods.pod_outcome(_finished(plain, 0, "a message")).outputs is None
    # Four containers: past 12 KiB together each message is cut to 3,072 bytes; one that long is refused.
    crowded = _finished(declared, 0, "x" * 3_072)
    crowded["status"]["containerStatuses"] += [{"name": f"sidecar{i}", "state": {"running": {}}} for i in range(3)]
    outcome = pods.pod_outcome(crowded)
    assert (outcome.state, outcome.outputs) == ("failed", None) and "may have cut them" in str(outcome.reason)


def test_the_executor_reports_the_termination_message_and_a_new_leader_reads_it_again(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        done, adopted, plain = await seed_tries(engine, 3)
        rec = Recorder(engine)
        rec.track([done, adopted, plain])
        ex = await started(s, engine, 1, rec)
        await ex.submit(done.launch(["sh", "-c", WRITE], term=1, outputs_declared=True))
        await ex.submit(adopted.launch(["sh", "-c", f"sleep 1.5; {WRITE}"], term=1, outputs_declared=True))
        await ex.submit(plain.launch(["sh", "-c", "echo hi > /dev/termination-log"], term=1))
        final = await rec.wait_final(done.key)
        assert (final.state, final.outputs) == ("success", OUTPUTS.encode())
        declared = {"n": OutputDecl("integer"), "files": OutputDecl("array")}
        assert check_outputs(final.outputs or b"", declared, termination_message=True).values == \
            {"n": 3, "files": ["a", "b"]}
        assert (await rec.wait_final(plain.key)).outputs is None
        await rec.wait_for(lambda: "running" in rec.states(adopted.key), what="running")
        await ex.stop()  # the leader dies before the second pod ends
        await set_term(engine, "default", 2)
        rec2 = Recorder(engine)
        rec2.track([adopted])
        new = await started(s, engine, 2, rec2)
        final = await rec2.wait_final(adopted.key)
        assert (final.state, final.outputs) == ("success", OUTPUTS.encode())
        await new.stop()
        [pod] = [p for p in fake_k8s.pods(NAMESPACE) if p["metadata"]["name"] == try_name("default", done.key)]
        [status] = pod["status"]["containerStatuses"]
        assert status["state"]["terminated"]["message"] == OUTPUTS  # what the kubelet copied, as the API serves it
        assert task_container(pod)["terminationMessagePolicy"] == "File"

    run(s, body)
