"""Task pods through the fake API server: every pod field runs, sidecars end, unschedulable pods fail.

The fake's scheduler and kubelet (tests/harness/fake_k8s_kubelet.py) resolve Secret and
ConfigMap references, check PVCs, node selectors, affinity and taints, and run sidecars
(regular ones that never end, and native ones in ``initContainers``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from leoflow.executor.kubernetes import pods
from leoflow.executor.naming import try_name
from leoflow.settings import Settings, load_settings
from tests.executor.conftest import NAMESPACE, k8s_settings
from tests.executor.pod_cases import CASES, Case, launch_of
from tests.executor.test_kubernetes import run, started
from tests.executor.world import Recorder, log_row, seed_tries
from tests.harness.fake_k8s import FakeKubernetes


def _world(fake: FakeKubernetes) -> None:
    """The objects the cases refer to: a Secret, a ConfigMap, a PVC, node labels."""
    kubelet = fake.kubelet
    kubelet.secrets["pg"] = {"password": "s3cr3t", "user": "etl"}
    kubelet.config_maps["etl-config"] = {"user": "etl"}
    kubelet.pvcs.add("etl-data")
    kubelet.node.labels.update({"pool": "batch", "zone": "a"})


def _allowing_the_cases(s: Settings) -> Settings:
    """The cases use an added capability and their own service account: the operator allows both."""
    k8s = dataclasses.replace(s.executor.kubernetes, pod_allowances=frozenset({"capabilities"}),
                              allowed_service_accounts=("etl-runner",))
    return s.replace(executor=dataclasses.replace(s.executor, kubernetes=k8s))


def _pod(fake: FakeKubernetes, name: str) -> dict[str, Any]:
    return next((p for p in fake.pods(NAMESPACE) if p["metadata"]["name"] == name), {})


def _requests(fake: FakeKubernetes, verb: str, name: str) -> list[dict[str, Any]]:
    return [r for r in fake.requests if r.get("verb") == verb and r.get("name") == name]


def test_every_pod_field_runs_through_the_fake_api_server(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    """Each case's pod is created exactly as rendered, and its try succeeds."""
    s = _allowing_the_cases(k8s_settings(settings))
    cases = {name: case for name, case in CASES.items() if not case.cluster_template}
    _world(fake_k8s)

    async def body(engine: AsyncEngine) -> None:
        seeded = await seed_tries(engine, len(cases))
        rec = Recorder(engine)
        rec.track(seeded)
        ex = await started(s, engine, 1, rec)
        launches = {}
        for (name, case), t in zip(cases.items(), seeded, strict=True):
            launch = launch_of(case, t.key, t.task_try_id, term=1)
            launches[name] = launch
            await ex.submit(launch)
        finals = {name: await rec.wait_final(launch.key) for name, launch in launches.items()}
        logs = {name: await ex.logs(launch.key) for name, launch in launches.items()}
        await ex.stop()
        for name, final in finals.items():
            assert (final.state, final.exit_code) == ("success", 0), (name, final)
        sent = {r["name"]: r for r in fake_k8s.creates(code=201)}
        assert len(sent) == len(cases)
        # What reached the server is exactly the rendered pod (nothing lost on the way through the client).
        for name, launch in launches.items():
            pod_name = try_name("default", launch.key)
            expected = pods.pod_spec("default", NAMESPACE, launch, service_account=None, image_pull_secrets=())
            assert sent[pod_name]["body"] == expected, name
            if name == "pod-template":  # its never-ending sidecar kept it running: Leoflow deleted it
                assert _requests(fake_k8s, "delete", pod_name)
            else:
                assert _pod(fake_k8s, pod_name)["status"]["phase"] == "Succeeded", name
        assert logs["env-refs"] == "user=etl\n"  # the kubelet resolved the ConfigMap reference
        assert logs["env-from"] == "user=etl\n"

    run(s, body)


def test_a_never_ending_sidecar_does_not_hold_the_try(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    """The task container's exit decides; Leoflow keeps its log, then deletes the still-running pod."""
    s = k8s_settings(settings)
    sidecar = {"pod_template": {"spec": {"containers": [
        {"name": "istio-proxy", "image": "istio/proxyv2:1",
         "command": ["sh", "-c", "echo proxy up; sleep infinity"]}]}}}

    async def body(engine: AsyncEngine) -> None:
        ok, bad = await seed_tries(engine, 2)
        rec = Recorder(engine)
        rec.track([ok, bad])
        ex = await started(s, engine, 1, rec, resync_interval=3600)
        await ex.submit(launch_of(Case(sidecar, command="echo done; exit 0"), ok.key, ok.task_try_id, term=1))
        await ex.submit(launch_of(Case(sidecar, command="echo broke; exit 3"), bad.key, bad.task_try_id, term=1))
        good, failed = await rec.wait_final(ok.key), await rec.wait_final(bad.key)
        await rec.wait_for(lambda: not fake_k8s.pods(NAMESPACE), what="both pods deleted")
        await ex.stop()
        assert (good.state, good.exit_code) == ("success", 0)
        assert (failed.state, failed.exit_code) == ("failed", 3) and "exit code 3" in str(failed.reason)
        for t, text in ((ok, "done\n"), (bad, "broke\n")):
            name = try_name("default", t.key)
            stored = await log_row(engine, t.task_try_id)
            assert stored is not None and stored["content"] == text  # the task container's log, shipped first
            [delete] = _requests(fake_k8s, "delete", name)
            # The try was decided from the container status while the pod still ran (the sidecar).
            assert "running" in rec.states(t.key)
            assert delete["seq"] > max(r["seq"] for r in _requests(fake_k8s, "log", name))

    run(s, body)


def test_native_sidecars_end_by_themselves(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    """initContainers with restartPolicy Always: the pod completes on its own, nothing to delete."""
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        rec.track([t])
        ex = await started(s, engine, 1, rec)
        await ex.submit(launch_of(CASES["native-sidecar"], t.key, t.task_try_id, term=1))
        final = await rec.wait_final(t.key)
        name = try_name("default", t.key)
        await rec.wait_for(lambda: _pod(fake_k8s, name)["status"]["phase"] == "Succeeded", what="pod Succeeded")
        await ex.stop()
        assert (final.state, final.exit_code) == ("success", 0)
        pod = _pod(fake_k8s, name)
        [proxy] = pod["status"]["initContainerStatuses"]
        assert proxy["state"]["terminated"]["exitCode"] == 143  # stopped by the kubelet; ignored
        assert not _requests(fake_k8s, "delete", name)  # garbage collection deletes it later, as usual

    run(s, body)


TOLERATION = {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "etl", "effect": "NoSchedule"}]}


def test_unschedulable_pods_fail_after_the_pending_timeout_with_the_schedulers_message(
        settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings, pending_timeout=1.0)
    fake_k8s.kubelet.node.taints.append({"key": "dedicated", "value": "etl", "effect": "NoSchedule"})

    async def body(engine: AsyncEngine) -> None:
        selector, claim, taint, tolerated = await seed_tries(engine, 4)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        cases = [(selector, {"node_selector": {"gpu": "a100"}, **TOLERATION}),
                 (claim, {**TOLERATION, "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "missing"}}]}),
                 (taint, {}), (tolerated, TOLERATION)]
        for t, fields in cases:
            await ex.submit(launch_of(Case(fields), t.key, t.task_try_id, term=1))
        results = {t.key: await rec.wait_final(t.key) for t, _ in cases}
        await ex.stop()
        assert results[tolerated.key].state == "success"
        expected = {selector.key: "1 node(s) didn't match Pod's node affinity/selector",
                    claim.key: 'persistentvolumeclaim "missing" not found',
                    taint.key: "1 node(s) had untolerated taint {dedicated: etl}"}
        for key, words in expected.items():
            final = results[key]
            assert final.state == "failed", final
            assert str(final.reason).startswith("Unschedulable: 0/1 nodes are available: " + words), final.reason
            assert "(pending longer than 1s)" in str(final.reason)
            assert _requests(fake_k8s, "delete", try_name("default", key))

    run(s, body)


def test_a_pod_that_becomes_schedulable_runs(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings, pending_timeout=60.0)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(launch_of(Case({"node_selector": {"disk": "ssd"}}), t.key, t.task_try_id, term=1))
        name = try_name("default", t.key)
        await rec.wait_for(lambda: "Unschedulable" in str(_pod(fake_k8s, name).get("status")), what="unschedulable")
        fake_k8s.kubelet.node.labels["disk"] = "ssd"  # e.g. the cluster autoscaler added a node
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert final.state == "success"

    run(s, body)


def test_missing_secret_fails_with_the_kubelets_message(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings, pending_timeout=1.0)

    async def body(engine: AsyncEngine) -> None:
        missing, key = await seed_tries(engine, 2)
        fake_k8s.kubelet.secrets["pg"] = {"user": "etl"}
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        for t, ref in ((missing, {"name": "nope", "key": "password"}), (key, {"name": "pg", "key": "password"})):
            await ex.submit(launch_of(Case({"env": [{"name": "P", "secret": ref}]}), t.key, t.task_try_id, term=1))
        absent, no_key = await rec.wait_final(missing.key), await rec.wait_final(key.key)
        await ex.stop()
        assert absent.state == "failed" and 'CreateContainerConfigError: secret "nope" not found' in str(absent.reason)
        assert "couldn't find key password in Secret" in str(no_key.reason)

    run(s, body)


def test_an_invalid_pod_is_never_sent(settings: Settings, fake_k8s: FakeKubernetes) -> None:
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(launch_of(Case({"volume_mounts": [{"name": "data", "mountPath": "/data"}]}), t.key,
                                  t.task_try_id, term=1))
        final = await rec.wait_final(t.key)
        await ex.stop()
        assert final.state == "failed"
        assert str(final.reason).startswith("the task's pod is invalid, not created: "
                                            "spec.containers[0].volumeMounts[0].name: no volume named 'data'")
        assert not fake_k8s.creates()

    run(s, body)


def test_the_cluster_template_from_the_environment_reaches_every_pod(settings: Settings,
                                                                     fake_k8s: FakeKubernetes) -> None:
    template = ('{"metadata": {"annotations": {"example.com/cluster": "prod"}}, "spec": {"initContainers": '
                '[{"name": "vault-agent", "image": "vault:1", "restartPolicy": "Always", "command": ["sleep", '
                '"infinity"]}], "priorityClassName": "batch"}}')
    loaded = load_settings({"LEOFLOW_DATABASE_URL": settings.require_database_url(), "LEOFLOW_NODE_ID": "t",
                            "LEOFLOW_K8S_POD_TEMPLATE": template})
    s = k8s_settings(settings)
    s = s.replace(executor=dataclasses.replace(s.executor, kubernetes=dataclasses.replace(
        s.executor.kubernetes, pod_template=loaded.executor.kubernetes.pod_template)))

    async def body(engine: AsyncEngine) -> None:
        [t] = await seed_tries(engine, 1)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        await ex.submit(launch_of(Case({"priority_class_name": "mine"}), t.key, t.task_try_id, term=1))
        assert (await rec.wait_final(t.key)).state == "success"
        await ex.stop()
        pod = _pod(fake_k8s, try_name("default", t.key))
        assert pod["metadata"]["annotations"]["example.com/cluster"] == "prod"
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["vault-agent"]
        assert pod["spec"]["priorityClassName"] == "mine"  # the task's field beats the template

    run(s, body)


def test_the_local_executor_refuses_env_references_and_ignores_pod_fields(settings: Settings, tmp_path: Any) -> None:
    from leoflow.db.connection.database import Database
    from leoflow.executor.local.executor import LocalExecutor
    from leoflow.leadership import LeaderContext
    from tests.executor.world import run_with_term

    s = settings.replace(home=tmp_path, executor=dataclasses.replace(settings.executor, kind="local"))

    async def body(engine: AsyncEngine) -> None:
        refs, placed = await seed_tries(engine, 2)
        rec = Recorder(engine)
        rec.track([refs, placed])
        ex = LocalExecutor(s)
        await ex.start(LeaderContext(1, s, Database(engine)), rec)
        await ex.submit(launch_of(Case({"env": [{"name": "P", "secret": {"name": "pg", "key": "password"}}]},
                                       command="echo never"), refs.key, refs.task_try_id, term=1))
        await ex.submit(launch_of(Case({"node_selector": {"pool": "batch"}, "labels": {"team": "data"},
                                        "env": [{"name": "MODE", "value": "full"}]}, command="echo mode=$MODE"),
                                  placed.key, placed.task_try_id, term=1))
        refused, ran = await rec.wait_final(refs.key), await rec.wait_final(placed.key)
        await ex.stop()
        assert refused.state == "failed" and "secret/pg" in str(refused.reason)
        assert "only the kubernetes executor can resolve" in str(refused.reason)
        assert "running" not in rec.states(refs.key)  # nothing was started
        assert ran.state == "success"
        stored = await log_row(engine, placed.task_try_id)
        assert stored is not None and stored["content"] == "mode=full\n"  # plain values reach a subprocess

    run_with_term(s, body, pool_size=4)


def test_the_leader_refuses_a_pod_the_policy_refuses_and_fails_only_that_try(settings: Settings,
                                                                            fake_k8s: FakeKubernetes) -> None:
    """A DAG stored before the policy was tightened: its try fails with the reason, the pod is never sent."""
    s = k8s_settings(settings)

    async def body(engine: AsyncEngine) -> None:
        [bad, good] = await seed_tries(engine, 2)
        rec = Recorder(engine)
        ex = await started(s, engine, 1, rec)
        template = {"spec": {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]}}
        await ex.submit(launch_of(Case({"pod_template": template}), bad.key, bad.task_try_id, term=1))
        await ex.submit(launch_of(Case({}), good.key, good.task_try_id, term=1))
        refused, fine = await rec.wait_final(bad.key), await rec.wait_final(good.key)
        await ex.stop()
        assert refused.state == "failed"
        assert str(refused.reason).startswith("the task's pod is invalid, not created: "
                                              "pod.pod_template.spec.volumes[0].hostPath: a hostPath volume")
        assert "LEOFLOW_K8S_POD_POLICY=host-path" in str(refused.reason)
        assert fine.state == "success"
        assert [c.get("name") for c in fake_k8s.creates()] == [try_name("default", good.key)]

    run(s, body)
