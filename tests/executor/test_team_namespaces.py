"""A namespace per team: pods created, watched, adopted, killed and collected in their team's namespace.

Against the fake API server through the official client: two teams (``alpha-`` and ``beta-`` DAG-id
prefixes) with their own namespaces, service accounts and pod templates, and a DAG of no team that
stays in the cluster's namespace.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.db.connection.database import Database
from leoflow.executor.kubernetes.executor import KubernetesExecutor
from leoflow.executor.kubernetes.gc import PodGarbageCollector
from leoflow.executor.kubernetes.logs import PodLogShipper
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.settings import Settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.world import Recorder, run_with_term, seed_tries, set_term, try_row
from tests.harness.fake_k8s import FakeKubernetes

TEAMS = """
teams:
  - name: alpha
    dag_id_prefixes: [alpha-]
    namespace: team-alpha
    service_account: alpha-tasks
    pod_template:
      metadata: {labels: {cost-center: alpha}}
  - name: beta
    dag_id_prefixes: [beta-]
    namespace: team-beta
  - name: gamma
    dag_id_prefixes: [gamma-]
"""


def team_settings(settings: Settings, tmp_path: Path, *, pod_retention: float = 3600.0) -> Settings:
    path = tmp_path / "teams.yaml"
    path.write_text(TEAMS)
    s = k8s_settings(settings, pod_retention=pod_retention)
    return s.replace(api=dataclasses.replace(s.api, teams_file=str(path)))


def run(settings: Settings, body: Callable[[AsyncEngine], Awaitable[None]]) -> None:
    run_with_term(settings, body, pool_size=6)


async def started(s: Settings, engine: AsyncEngine, term: int, rec: Recorder) -> KubernetesExecutor:
    ex = KubernetesExecutor(s, resync_interval=0.5, create_deadline=20.0, delete_grace=0)
    await ex.start(LeaderContext(term, s, Database(engine)), rec)
    return ex


def where(fake: FakeKubernetes, name: str) -> list[str]:
    return [p["metadata"]["namespace"] for p in fake.pods() if p["metadata"]["name"] == name]


def test_each_teams_pods_run_in_its_namespace_and_only_there(settings: Settings, fake_k8s: FakeKubernetes,
                                                            tmp_path: Path) -> None:
    s = team_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        [a] = await seed_tries(engine, 1, dag="alpha-etl")
        [b] = await seed_tries(engine, 1, dag="beta-etl")
        [g] = await seed_tries(engine, 1, dag="gamma-etl")  # a team without a namespace
        [o] = await seed_tries(engine, 1, dag="orphan")  # no team: the admins'
        rec = Recorder(engine)
        rec.track([a, b, g, o])
        ex = await started(s, engine, 1, rec)
        for t in (a, b, g, o):
            await ex.submit(t.launch(["sh", "-c", f"echo {t.key.dag_id}"], term=1))
        for t in (a, b, g, o):
            assert (await rec.wait_final(t.key)).state == "success"
        assert await ex.logs(a.key) == "alpha-etl\n"  # read from its team's namespace
        await ex.stop()
        expected = [(a, "team-alpha"), (b, "team-beta"), (g, NAMESPACE), (o, NAMESPACE)]
        for t, namespace in expected:
            name = try_name("default", t.key)
            assert where(fake_k8s, name) == [namespace]
            ref = (await try_row(engine, t.task_try_id))["executor_ref"]
            assert ref == (name if namespace == NAMESPACE else f"{namespace}/{name}")
            assert {r["namespace"] for r in fake_k8s.creates() if r["name"] == name} == {namespace}
        [alpha_pod] = fake_k8s.pods("team-alpha")
        assert alpha_pod["spec"]["serviceAccountName"] == "alpha-tasks"
        assert alpha_pod["metadata"]["labels"]["cost-center"] == "alpha"
        [beta_pod] = fake_k8s.pods("team-beta")
        assert "cost-center" not in beta_pod["metadata"]["labels"]
        assert beta_pod["spec"].get("serviceAccountName") in (None, "default")
        # One watch per namespace, each on its own namespace's resourceVersion.
        watched = {r["namespace"] for r in fake_k8s.requests if r["verb"] == "watch"}
        assert watched == {NAMESPACE, "team-alpha", "team-beta"}
        assert not [r for r in fake_k8s.requests if r["verb"] in ("list", "watch") and r["namespace"] is None]

    run(s, body)


def test_new_leader_adopts_team_pods_and_kills_and_collects_them_there(settings: Settings,
                                                                       fake_k8s: FakeKubernetes,
                                                                       tmp_path: Path) -> None:
    s = team_settings(settings, tmp_path, pod_retention=0)

    async def body(engine: AsyncEngine) -> None:
        a1, a2 = await seed_tries(engine, 2, dag="alpha-etl")
        [b] = await seed_tries(engine, 1, dag="beta-etl")
        rec1 = Recorder(engine)
        rec1.track([a1, a2, b])
        old = await started(s, engine, 1, rec1)
        await old.submit(a1.launch(["sh", "-c", "echo one; sleep 1.5"], term=1))
        await old.submit(a2.launch(["sh", "-c", "sleep 60"], term=1))
        await old.submit(b.launch(["sh", "-c", "echo two; sleep 1.5"], term=1))
        await rec1.wait_for(lambda: all("running" in rec1.states(t.key) for t in (a1, a2, b)), what="running")
        await old.stop()  # the leader goes; its pods keep running in the teams' namespaces
        await set_term(engine, "default", 2)
        rec2 = Recorder(engine)
        rec2.track([a1, a2, b])
        new = await started(s, engine, 2, rec2)
        assert all(rec2.states(t.key) for t in (a1, a2, b))  # reconciled from every namespace before start returned
        for t in (a1, b):  # the scheduler re-submits: adopted, never a second pod
            await new.submit(t.launch(["sh", "-c", "sleep 1.5"], term=2))
        await new.cancel(a2.key)  # killed where it runs
        assert where(fake_k8s, try_name("default", a2.key)) == []
        for t in (a1, b):
            assert (await rec2.wait_final(t.key)).state == "success"
        assert {r["name"] for r in fake_k8s.creates()} == {try_name("default", t.key) for t in (a1, a2, b)}
        assert all(r["term"] == "1" for r in fake_k8s.creates())
        kills = [r for r in fake_k8s.requests if r["verb"] == "delete" and r["name"] == try_name("default", a2.key)]
        assert kills and {r["namespace"] for r in kills} == {"team-alpha"}
        db = Database(engine)
        while await PodLogShipper().ship_once(s, db, new.api):
            pass
        reads = {r["name"]: r["namespace"] for r in fake_k8s.requests if r["verb"] == "log"}
        assert reads[try_name("default", b.key)] == "team-beta"
        # Three: the killed try's too (its pod is gone already, found so in its namespace).
        assert await PodGarbageCollector(new).collect_once(LeaderContext(2, s, db)) == 3
        await new.stop()
        assert fake_k8s.pods() == []
        gc_deletes = {r["namespace"] for r in fake_k8s.requests if r["verb"] == "delete"
                      and r["name"] in (try_name("default", a1.key), try_name("default", b.key))}
        assert gc_deletes == {"team-alpha", "team-beta"}

    run(s, body)


def test_a_team_added_while_leading_is_watched_before_its_first_pod(settings: Settings, fake_k8s: FakeKubernetes,
                                                                   tmp_path: Path) -> None:
    s = team_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        [d] = await seed_tries(engine, 1, dag="delta-etl")
        rec = Recorder(engine)
        rec.track([d])
        ex = await started(s, engine, 1, rec)
        path = Path(str(s.api.teams_file))
        path.write_text(TEAMS + "  - {name: delta, dag_id_prefixes: [delta-], namespace: team-delta}\n")
        import os
        os.utime(path, (1, 1))  # a different modification time, however fast the write
        ex.placements.teams._checked_at = float("-inf")  # look at the file now, not within a second
        await ex.submit(d.launch(["sh", "-c", "echo new team"], term=1))
        assert (await rec.wait_final(d.key)).state == "success"
        await ex.stop()
        assert where(fake_k8s, try_name("default", d.key)) == ["team-delta"]
        create = next(r["seq"] for r in fake_k8s.creates() if r["name"] == try_name("default", d.key))
        delta = [r for r in fake_k8s.requests if r["namespace"] == "team-delta"]
        listed = min(r["seq"] for r in delta if r["verb"] == "list")
        assert listed < create and any(r["verb"] == "watch" for r in delta)

    run(s, body)


def test_a_410_relists_only_its_own_namespace(settings: Settings, fake_k8s: FakeKubernetes, tmp_path: Path) -> None:
    from tests.harness.fake_k8s import Fault

    s = team_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        [b] = await seed_tries(engine, 1, dag="beta-etl")
        rec = Recorder(engine)
        rec.track([b])
        # Watches end every second (so one soon meets the fault); no periodic resync lists meanwhile.
        ex = KubernetesExecutor(s, resync_interval=300, watch_timeout=1, create_deadline=20.0, delete_grace=0)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        fake_k8s.inject(Fault("watch", code=410, message="too old resource version"))
        deadline = asyncio.get_running_loop().time() + 10
        while not [r for r in fake_k8s.requests if r.get("fault")]:
            assert asyncio.get_running_loop().time() < deadline, "no watch met the fault"
            await asyncio.sleep(0.05)
        [expired] = [r for r in fake_k8s.requests if r.get("fault")]
        while not [r for r in fake_k8s.requests if r["verb"] == "list" and r["seq"] > expired["seq"]]:
            assert asyncio.get_running_loop().time() < deadline, "the expired namespace was not listed again"
            await asyncio.sleep(0.05)
        await ex.submit(b.launch(["sh", "-c", "echo after"], term=1))  # every watch still follows its pods
        assert (await rec.wait_final(b.key)).state == "success"
        await ex.stop()
        relists = {r["namespace"] for r in fake_k8s.requests if r["verb"] == "list" and r["seq"] > expired["seq"]}
        assert relists == {expired["namespace"]}

    run(s, body)


def test_a_team_namespace_that_cannot_be_listed_does_not_stop_the_others(settings: Settings,
                                                                         fake_k8s: FakeKubernetes,
                                                                         tmp_path: Path) -> None:
    from tests.harness.fake_k8s import Fault

    s = team_settings(settings, tmp_path)
    path = Path(str(s.api.teams_file))
    path.write_text(TEAMS + "  - {name: early, dag_id_prefixes: [early-], namespace: aaa-early}\n")

    async def body(engine: AsyncEngine) -> None:
        [b] = await seed_tries(engine, 1, dag="beta-etl")
        rec = Recorder(engine)
        rec.track([b])
        refused = Fault("list", code=403, message='pods is forbidden: cannot list resource "pods"', times=1000,
                        namespace="aaa-early")
        fake_k8s.inject(refused)
        ex = await started(s, engine, 1, rec)  # starts: the other namespaces are listed and watched
        await ex.submit(b.launch(["sh", "-c", "echo fine"], term=1))
        assert (await rec.wait_final(b.key)).state == "success"
        assert "aaa-early" not in ex._watched
        fake_k8s.clear_faults()  # its Role is granted
        deadline = asyncio.get_running_loop().time() + 10
        while "aaa-early" not in ex._watched:  # the next resync lists and watches it
            assert asyncio.get_running_loop().time() < deadline, "the refused namespace was never retried"
            await asyncio.sleep(0.1)
        await ex.stop()
        lists = [r for r in fake_k8s.requests if r["verb"] == "list" and r["namespace"] == "aaa-early"]
        assert lists[0].get("fault") and len(lists) >= 2

    run(s, body)


def test_a_lost_create_answer_is_adopted_on_409_in_the_teams_namespace(settings: Settings, fake_k8s: FakeKubernetes,
                                                                      tmp_path: Path) -> None:
    from tests.harness.fake_k8s import Fault

    s = team_settings(settings, tmp_path)

    async def body(engine: AsyncEngine) -> None:
        [a] = await seed_tries(engine, 1, dag="alpha-etl")
        rec = Recorder(engine)
        rec.track([a])
        name = try_name("default", a.key)
        # The API server creates the pod but the answer never arrives: the retry meets 409 → GET → adopt.
        fake_k8s.inject(Fault("create", drop="after", name_prefix=name, namespace="team-alpha"))
        ex = await started(s, engine, 1, rec)
        await ex.submit(a.launch(["sh", "-c", "sleep 0.3"], term=1))
        assert (await rec.wait_final(a.key)).state == "success"
        await ex.stop()
        assert [r["code"] for r in fake_k8s.creates() if r["name"] == name] == [201, 409]
        gets = [r for r in fake_k8s.requests if r["verb"] == "get" and r["name"] == name]
        assert gets and {r["namespace"] for r in gets} == {"team-alpha"}
        assert where(fake_k8s, name) == ["team-alpha"]

    run(s, body)
