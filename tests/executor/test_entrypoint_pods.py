"""A task without ``command`` on Kubernetes: the ``task`` container has no ``command`` and the image's
entrypoint runs with ``args`` (ADR 0014, decision 8) — through the official client against the
fake API server, and in the rendered pod whatever a template says (Leoflow owns that command).
"""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.executor.kubernetes.pod_render import render_pod
from leoflow.executor.naming import try_name
from leoflow.model.tries import TaskLaunch, TryKey
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.test_kubernetes import run, started
from tests.executor.world import Recorder, seed_tries
from tests.harness.fake_k8s import FakeKubernetes

METADATA = {"name": "etl-t-1", "namespace": NAMESPACE, "labels": {}, "annotations": {}}


def test_a_pod_without_command_runs_the_images_entrypoint_with_the_args(settings: Settings,
                                                                       fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        rec.track([t])
        ex = await started(s, engine, 1, rec)
        # The fake kubelet runs command + args; with no command, the args are what the entrypoint gets.
        await ex.submit(t.launch([], term=1, args=("sh", "-c", "echo from the entrypoint")))
        assert (await rec.wait_final(t.key)).state == "success"
        assert await ex.logs(t.key) == "from the entrypoint\n"
        await ex.stop()
        [pod] = [p for p in fake_k8s.pods(NAMESPACE) if p["metadata"]["name"] == try_name("default", t.key)]
        [container] = pod["spec"]["containers"]
        assert "command" not in container and container["args"] == ["sh", "-c", "echo from the entrypoint"]

    run(s, body)


def test_a_templates_command_never_replaces_the_images_entrypoint() -> None:
    launch = TaskLaunch(key=TryKey("etl", "r", "t", 1), task_try_id=1, term=1, image="ghcr.io/acme/etl:5.1",
                        command=(), args=("combine",))
    template = {"spec": {"containers": [{"name": "task", "command": ["/bin/evil"], "args": ["x"]}]}}
    pod = render_pod(launch, METADATA, service_account=None, image_pull_secrets=(), template=template)
    [container] = pod["spec"]["containers"]
    assert "command" not in container and container["args"] == ["combine"]
    with_command = render_pod(launch._replace(command=("run",)), METADATA, service_account=None,
                              image_pull_secrets=(), template=template)
    assert with_command["spec"]["containers"][0]["command"] == ["run"]
