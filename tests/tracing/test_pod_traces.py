"""The Kubernetes executor's spans, through the official client against the fake API server: the
pod's creation and its log's archiving are children of its try's span, and the task in the pod
sees that span as TRACEPARENT."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow import tracing
from leoflow.db.connection.database import Database
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from leoflow.tracing import ids
from tests.executor.conftest import k8s_settings
from tests.executor.world import Recorder, run_with_term, seed_tries
from tests.harness.fake_k8s import FakeKubernetes
from tests.tracing.collector import Collector


def test_pod_creation_is_a_child_of_the_try_and_the_pod_gets_traceparent(
        settings: Settings, fake_k8s: FakeKubernetes, traced: Collector, tmp_path: Path) -> None:
    s = k8s_settings(settings)
    s = s.replace(log_archive=dataclasses.replace(s.log_archive, url=(tmp_path / "archive").as_uri()))
    seen: dict[str, object] = {}

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1, dag="traced", run="r1")
        rec = Recorder(engine)
        rec.track([t])
        ex = KubernetesExecutor(s, resync_interval=0.5, create_deadline=20.0, delete_grace=0)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        env: dict[str, str] = {}
        tracing.add_traceparent(env, t.key)  # as the scheduler builds every launch (scheduler.queueing)
        await ex.submit(t.launch(["sh", "-c", 'echo "$TRACEPARENT"; sleep 1'], term=1, env=env))
        assert (await rec.wait_final(t.key)).state == "success"
        seen["log"] = await ex.logs(t.key)
        await rec.wait_for(lambda: any((tmp_path / "archive").rglob("*.gz")), what="a chunk in the archive")
        seen["key"], seen["pod"] = t.key, try_name("default", t.key)
        await ex.stop()

    run_with_term(s, body, pool_size=6)
    key = seen["key"]
    trace = f"{ids.run_trace_id('traced', 'r1'):032x}"
    try_span = f"{ids.try_span_id(key):016x}"  # type: ignore[arg-type]
    assert seen["log"] == f"00-{trace}-{try_span}-01\n"
    created = traced.wait_for("leoflow.pod.create")
    assert (created.trace_id, created.parent_span_id) == (trace, try_span)
    assert created.attributes["pod"] == seen["pod"] and created.kind == 3  # CLIENT
    assert created.status_code != 2
    # The pod's log, archived while it runs (the live archive), chunk by chunk under the same try.
    upload = traced.wait_for("leoflow.log_archive.upload")
    assert (upload.trace_id, upload.parent_span_id) == (trace, try_span)
