"""The Kubernetes executor through the official client against the fake API server."""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.world import Recorder, Seeded, run_with_term, seed_tries, set_term, try_row
from tests.harness.fake_k8s import FakeKubernetes, Fault


def run(settings: Settings, body: Callable[[AsyncEngine], Awaitable[None]]) -> None:
    run_with_term(settings, body, pool_size=6)


def executor(s: Settings, **kw: object) -> KubernetesExecutor:
    options: dict[str, object] = {"resync_interval": 0.5, "create_deadline": 20.0, "delete_grace": 0, **kw}
    return KubernetesExecutor(s, **options)  # type: ignore[arg-type]


async def started(s: Settings, engine: AsyncEngine, term: int, rec: Recorder, **kw: object) -> KubernetesExecutor:
    ex = executor(s, **kw)
    await ex.start(LeaderContext(term, s, Database(engine)), rec)
    return ex


async def one_running_pod(s: Settings, engine: AsyncEngine, command: list[str],
                          **kw: object) -> tuple[Seeded, Recorder, KubernetesExecutor]:
    """One try launched in term 1 as a pod running ``command``, once the executor reports it running."""
    [t] = await seed_tries(engine, 1)
    rec = Recorder(engine)
    ex = await started(s, engine, 1, rec, **kw)
    await ex.submit(t.launch(command, term=1))
    await rec.wait_for(lambda: "running" in rec.states(t.key), what="running")
    return t, rec, ex


def test_pod_spec_labels_and_outcomes(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        ok, bad = await seed_tries(engine, 2, dag="Nightly_ETL", run="scheduled__2026-01-01T00:00:00+00:00" + "x" * 60)
        rec = Recorder(engine)
        rec.track([ok, bad])
        ex = await started(s, engine, 1, rec)
        await ex.submit(ok.launch(["sh", "-c", "echo hello; sleep 0.2"], term=1, env={"A": "1"},
                                  resources={"cpu": "100m"}, timeout_seconds=30.5))
        await ex.submit(bad.launch(["sh", "-c", "echo boom; exit 3"], term=1))
        assert (await rec.wait_final(ok.key)).state == "success"
        final = await rec.wait_final(bad.key)
        assert (final.state, final.exit_code) == ("failed", 3) and "exit code 3" in str(final.reason)
        assert "running" in rec.states(ok.key)
        assert await ex.logs(ok.key) == "hello\n"
        await ex.stop()
        [pod] = [p for p in fake_k8s.pods(NAMESPACE) if p["metadata"]["name"] == try_name("default", ok.key)]
        name = pod["metadata"]["name"]
        assert len(name) <= 63 and re.fullmatch(r"nightly-etl-task0-[0-9a-f]{16}", name)
        labels = pod["metadata"]["labels"]
        assert labels["app.kubernetes.io/managed-by"] == "leoflow"
        assert labels["leoflow.io/cluster"] == "default" and labels["leoflow.io/dag"] == "Nightly_ETL"
        assert labels["leoflow.io/task"] == "task0" and labels["leoflow.io/try"] == "1"
        assert labels["leoflow.io/term"] == "1" and len(labels["leoflow.io/run"]) <= 63
        assert pod["metadata"]["annotations"]["leoflow.io/run-id"] == ok.key.run_id
        assert pod["spec"]["activeDeadlineSeconds"] == 31 and pod["spec"]["restartPolicy"] == "Never"
        assert pod["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}]
        assert (await try_row(engine, ok.task_try_id))["executor_ref"] == name

    run(s, body)


def test_create_twice_and_lost_response_make_one_pod(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        twice, lost = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        launch = twice.launch(["sh", "-c", "sleep 0.3"], term=1)
        await ex.submit(launch)
        await ex.submit(launch)
        # The API server creates the pod but the response never arrives: the retry gets 409 → adopt.
        fake_k8s.inject(Fault("create", drop="after", name_prefix=try_name("default", lost.key)))
        await ex.submit(lost.launch(["sh", "-c", "sleep 0.3"], term=1))
        assert (await rec.wait_final(twice.key)).state == "success"
        assert (await rec.wait_final(lost.key)).state == "success"
        # A second executor of the same term (e.g. restarted in-process) submits again: no new pod.
        await ex.stop()
        ex2 = await started(s, engine, 1, Recorder(engine))
        await ex2.submit(launch)
        await ex2.stop()
        names = [p["metadata"]["name"] for p in fake_k8s.pods(NAMESPACE)]
        assert sorted(names) == sorted({try_name("default", twice.key), try_name("default", lost.key)})
        assert len(fake_k8s.creates(code=201)) == 2
        lost_creates = [r for r in fake_k8s.creates() if r["name"] == try_name("default", lost.key)]
        assert [r["code"] for r in lost_creates] == [201, 409]

    run(s, body)


def test_transient_create_errors_are_retried_permanent_ones_fail(settings: Settings,
                                                                 fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        quota, throttled, broken, forbidden, invalid = await seed_tries(engine, 5)
        name = lambda t: try_name("default", t.key)  # noqa: E731
        fake_k8s.inject(Fault("create", code=409, times=2, name_prefix=name(quota)))
        fake_k8s.inject(Fault("create", code=429, retry_after=0, times=2, name_prefix=name(throttled)))
        fake_k8s.inject(Fault("create", code=500, times=2, name_prefix=name(broken)))
        fake_k8s.inject(Fault("create", code=503, drop="before", times=1, name_prefix=name(broken)))
        fake_k8s.inject(Fault("create", code=403, name_prefix=name(forbidden)))
        fake_k8s.inject(Fault("create", code=422, message="Pod is invalid: spec.containers[0].image: bad",
                              name_prefix=name(invalid)))
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        for t in (quota, throttled, broken, forbidden, invalid):
            await ex.submit(t.launch(["true"], term=1))
        for t in (quota, throttled, broken):
            assert (await rec.wait_final(t.key)).state == "success"
        denied = await rec.wait_final(forbidden.key)
        assert denied.state == "failed" and "403 Forbidden" in str(denied.reason)
        assert "cannot create resource" in str(denied.reason)
        rejected = await rec.wait_final(invalid.key)
        assert rejected.state == "failed" and "spec.containers[0].image: bad" in str(rejected.reason)
        await ex.stop()
        codes = [[r["code"] for r in fake_k8s.creates() if r["name"] == name(n)] for n in (quota, throttled, broken)]
        assert codes == [[409, 409, 201], [429, 429, 201], [500, 500, 0, 201]]

    run(s, body)


def test_new_leader_adopts_running_pods_and_creates_no_second_pod(settings: Settings,
                                                                  fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        tries = await seed_tries(engine, 3)
        rec1 = Recorder(engine)
        rec1.track(tries)
        old = await started(s, engine, 1, rec1)
        for t in tries:
            await old.submit(t.launch(["sh", "-c", "echo hi; sleep 1.5"], term=1))
        await rec1.wait_for(lambda: all("running" in rec1.states(t.key) for t in tries), what="running")
        await old.stop()  # the leader dies; its pods keep running
        await set_term(engine, "default", 2)
        rec2 = Recorder(engine)
        rec2.track(tries)
        new = await started(s, engine, 2, rec2)
        # start() reconciled before returning: every try is already known and reported.
        assert all(rec2.states(t.key) for t in tries)
        for t in tries:  # the scheduler re-submits what it believes is running
            await new.submit(t.launch(["sh", "-c", "echo hi; sleep 1.5"], term=2))
        for t in tries:
            assert (await rec2.wait_final(t.key)).state == "success"
        await new.stop()
        creates = fake_k8s.creates()
        assert len(creates) == 3 and {r["term"] for r in creates} == {"1"}
        assert len(fake_k8s.pods(NAMESPACE)) == 3

    run(s, body)


def test_ex_leader_with_old_term_creates_no_pod(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await set_term(engine, "default", 2)
        await ex.submit(t.launch(["true"], term=1))
        await asyncio.sleep(1.0)  # give a wrong create every chance to happen
        await ex.stop()
        assert fake_k8s.creates() == [] and fake_k8s.pods() == []
        assert (await try_row(engine, t.task_try_id))["executor_ref"] is None

    run(s, body)


def test_two_clusters_in_one_namespace_leave_each_other_alone(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    a, b = k8s_settings(settings, cluster="alpha", pod_retention=0), k8s_settings(settings, cluster="beta")

    async def body(engine: AsyncEngine) -> None:
        await set_term(engine, "beta", 1)
        [ta] = await seed_tries(engine, 1, run="r-alpha")
        [tb] = await seed_tries(engine, 1, run="r-beta")
        # beta launches a long pod; alpha then starts, reconciles, runs, ships and GCs its own.
        rec_b = Recorder(engine)
        ex_b = await started(b, engine, 1, rec_b)
        await ex_b.submit(tb.launch(["sh", "-c", "sleep 3"], term=1))
        await rec_b.wait_for(lambda: "running" in rec_b.states(tb.key), what="beta running")
        await ex_b.stop()
        rec_a = Recorder(engine)
        rec_a.track([ta])
        ex_a = await started(a, engine, 1, rec_a)
        await ex_a.submit(ta.launch(["true"], term=1))
        assert (await rec_a.wait_final(ta.key)).state == "success"
        from leoflow.executor.kubernetes.gc import PodGarbageCollector
        from leoflow.executor.kubernetes.logs import PodLogShipper
        assert await PodLogShipper().ship_once(a, Database(engine), ex_a.api) == 1
        assert await PodGarbageCollector(ex_a).collect_once(LeaderContext(1, a, Database(engine))) == 1
        await ex_a.stop()
        names = {p["metadata"]["name"] for p in fake_k8s.pods(NAMESPACE)}
        assert names == {try_name("beta", tb.key)}
        assert not [r for r in fake_k8s.requests if r["verb"] == "delete" and r["name"] == try_name("beta", tb.key)]
        assert rec_a.updates and all(u.key == ta.key for u in rec_a.updates)

    run(dataclasses.replace(a), body)


def test_missing_kubernetes_configuration_is_a_settings_error(settings: Settings, tmp_path: object,
                                                               monkeypatch: object) -> None:
    import pytest

    from leoflow.errors import SettingsError
    from leoflow.executor.kubernetes.kube_client import KubernetesApi

    mp: pytest.MonkeyPatch = monkeypatch  # type: ignore[assignment]
    mp.setenv("KUBECONFIG", "/nonexistent/kubeconfig")
    mp.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(SettingsError, match="no Kubernetes configuration was found"):
        KubernetesApi(k8s_settings(settings))
