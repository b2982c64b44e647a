"""The cluster's pod policy at apply time (issue 44, item 16): a DAG author cannot ask for the node.

``pod_template`` and the first-class pod fields accepted a ``hostPath`` of ``/``, privileged
containers, the node's namespaces, added capabilities, any service account and the release's own
Secrets. Each is now a 422 naming the field unless the operator allows it
(``LEOFLOW_K8S_POD_POLICY``, ``LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS``; protected Secrets never).
"""

from __future__ import annotations

from typing import Any

import pytest

from leoflow.api.app import create_app
from tests.api.conftest import ADMIN, api_settings, spec
from tests.api.live import client_for

IMAGE = "python:3.12-slim"


def _task(**fields: Any) -> dict[str, Any]:
    return {"id": "t", "image": IMAGE, "command": ["true"], **fields}


def _template(spec_fields: dict[str, Any]) -> dict[str, Any]:
    return {"pod_template": {"spec": spec_fields}}


def _container(**security: Any) -> dict[str, Any]:
    return {"name": "side", "image": IMAGE, "securityContext": security}


#: (task fields, the path the 422 names, the allowance that lets it through or None).
REFUSED: list[tuple[dict[str, Any], str, str | None]] = [
    (_template({"volumes": [{"name": "ok", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}]}),
     "tasks[0].pod_template.spec.volumes[1].hostPath", "host-path"),
    (_template({"containers": [_container(privileged=True)]}),
     "tasks[0].pod_template.spec.containers[0].securityContext.privileged", "privileged"),
    (_template({"initContainers": [_container(privileged=True)]}),
     "tasks[0].pod_template.spec.initContainers[0].securityContext.privileged", "privileged"),
    ({"security_context": {"container": {"privileged": True}}},
     "tasks[0].security_context.container.privileged", "privileged"),
    ({"security_context": {"container": {"allowPrivilegeEscalation": True}}},
     "tasks[0].security_context.container.allowPrivilegeEscalation", "privilege-escalation"),
    ({"security_context": {"container": {"capabilities": {"add": ["SYS_ADMIN"]}}}},
     "tasks[0].security_context.container.capabilities.add", "capabilities"),
    (_template({"containers": [_container(capabilities={"add": ["NET_ADMIN"]})]}),
     "tasks[0].pod_template.spec.containers[0].securityContext.capabilities.add", "capabilities"),
    (_template({"hostNetwork": True}), "tasks[0].pod_template.spec.hostNetwork", "host-network"),
    (_template({"hostPID": True}), "tasks[0].pod_template.spec.hostPID", "host-pid"),
    (_template({"hostIPC": True}), "tasks[0].pod_template.spec.hostIPC", "host-ipc"),
    ({"service_account": "cluster-admin-sa"}, "tasks[0].service_account", None),
    (_template({"serviceAccountName": "cluster-admin-sa"}), "tasks[0].pod_template.spec.serviceAccountName", None),
]

PROTECTED = "rel-leoflow-db"
#: Ways to read a protected Secret by name, and the path each names.
SECRET_REFS: list[tuple[dict[str, Any], str]] = [
    ({"volumes": [{"name": "s", "secret": {"secretName": PROTECTED}}]}, "tasks[0].volumes[0].secret.secretName"),
    ({"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": PROTECTED}}]}}]},
     "tasks[0].volumes[0].projected.sources[0].secret.name"),
    ({"env": [{"name": "DB", "secret": {"name": PROTECTED, "key": "url"}}]}, "tasks[0].env[0].secret.name"),
    ({"env_from": [{"secret": PROTECTED}]}, "tasks[0].env_from[0].secret"),
    (_template({"volumes": [{"name": "s", "secret": {"secretName": PROTECTED}}]}),
     "tasks[0].pod_template.spec.volumes[0].secret.secretName"),
    (_template({"containers": [{"name": "task", "env": [
        {"name": "DB", "valueFrom": {"secretKeyRef": {"name": PROTECTED, "key": "url"}}}]}]}),
     "tasks[0].pod_template.spec.containers[0].env[0].valueFrom.secretKeyRef.name"),
    (_template({"initContainers": [{"name": "i", "image": IMAGE, "envFrom": [{"secretRef": {"name": PROTECTED}}]}]}),
     "tasks[0].pod_template.spec.initContainers[0].envFrom[0].secretRef.name"),
]


@pytest.fixture
def policy_client(database_url: str) -> Any:
    settings = api_settings(database_url, LEOFLOW_K8S_PROTECTED_SECRETS=f"{PROTECTED},rel-leoflow-admin-token",
                            LEOFLOW_K8S_SERVICE_ACCOUNT="leoflow-tasks")
    with client_for(create_app(settings)) as client:
        yield client


@pytest.mark.parametrize(("fields", "path", "allowance"), REFUSED, ids=[r[1].split(".", 1)[1] for r in REFUSED])
def test_a_pod_field_the_policy_refuses_is_a_422_naming_it(policy_client: Any, fields: dict[str, Any], path: str,
                                                           allowance: str | None) -> None:
    answer = policy_client.put("/api/v2/dags/pods", json=spec("pods", tasks=[_task(**fields)]), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert path in answer.text and "pod policy" in error["message"], error
    if allowance is not None:
        assert f"LEOFLOW_K8S_POD_POLICY={allowance}" in error["message"]
    assert policy_client.get("/api/v2/dags/pods", headers=ADMIN).status_code == 404  # nothing was stored


@pytest.mark.parametrize(("fields", "path"), SECRET_REFS, ids=[r[1].split(".", 1)[1] for r in SECRET_REFS])
def test_the_releases_own_secrets_cannot_be_read_by_name(policy_client: Any, fields: dict[str, Any],
                                                         path: str) -> None:
    answer = policy_client.put("/api/v2/dags/pods", json=spec("pods", tasks=[_task(**fields)]), headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert path in answer.text and "LEOFLOW_K8S_PROTECTED_SECRETS" in answer.text


def test_defaults_are_checked_with_their_own_path(policy_client: Any) -> None:
    doc = spec("pods", defaults={"security_context": {"container": {"privileged": True}}})
    answer = policy_client.put("/api/v2/dags/pods", json=doc, headers=ADMIN)
    assert answer.status_code == 422 and "defaults.security_context.container.privileged" in answer.text


def test_what_the_policy_allows_is_applied(database_url: str) -> None:
    settings = api_settings(database_url, LEOFLOW_K8S_POD_POLICY="host-path,privileged,privilege-escalation,"
                            "host-network,host-pid,host-ipc,capabilities",
                            LEOFLOW_K8S_ALLOWED_SERVICE_ACCOUNTS="cluster-admin-sa")
    with client_for(create_app(settings)) as client:
        for i, (fields, _, _) in enumerate(REFUSED):
            answer = client.put(f"/api/v2/dags/pods-{i}", json=spec(f"pods-{i}", tasks=[_task(**fields)]),
                                headers=ADMIN)
            assert answer.status_code == 201, answer.text


def test_the_clusters_own_service_account_and_unprotected_secrets_are_fine(policy_client: Any) -> None:
    fields = {"service_account": "leoflow-tasks", "env": [{"name": "K", "secret": {"name": "team-key", "key": "k"}}],
              "volumes": [{"name": "s", "secret": {"secretName": "team-certs"}}]}
    answer = policy_client.put("/api/v2/dags/pods", json=spec("pods", tasks=[_task(**fields)]), headers=ADMIN)
    assert answer.status_code == 201, answer.text


def test_dags_sync_refuses_the_file_naming_the_field(policy_client: Any) -> None:
    content = ("dag_id: synced\nschedule: null\ntasks:\n  - id: t\n    image: busybox\n    command: [\"true\"]\n"
               "    pod_template:\n      spec:\n        hostNetwork: true\n")
    answer = policy_client.post("/api/v2/dags:sync", json={"source": "s", "files": [{"name": "a.yaml",
                                                                                    "content": content}]},
                                headers=ADMIN)
    assert answer.status_code == 422, answer.text
    assert "tasks[0].pod_template.spec.hostNetwork" in answer.text


def test_an_unknown_allowance_is_a_settings_error(database_url: str) -> None:
    from leoflow.errors import SettingsError

    with pytest.raises(SettingsError, match="LEOFLOW_K8S_POD_POLICY"):
        api_settings(database_url, LEOFLOW_K8S_POD_POLICY="host-path,root")
