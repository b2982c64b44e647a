"""The distilled Pod schema and the strict object checks that read it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from leoflow.errors import ValidationFailed
from leoflow.model.k8s import pod_schema
from leoflow.model.k8s.objects import check_object, check_pod

ROOT = Path(__file__).resolve().parents[2]


def test_generated_schema_is_current() -> None:
    """``python tools/generate_pod_schema.py`` reproduces the checked-in module exactly."""
    spec = importlib.util.spec_from_file_location("generate_pod_schema", ROOT / "tools" / "generate_pod_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "leoflow" / "model" / "k8s" / "pod_schema.py").read_text() == module.render(), (
        "leoflow/model/k8s/pod_schema.py is stale: run python tools/generate_pod_schema.py")


def test_schema_knows_the_merge_keys_kubernetes_uses() -> None:
    types = pod_schema.TYPES
    assert types["PodSpec"]["containers"][2:] == ("merge", "name")
    assert types["PodSpec"]["volumes"][2:] == ("merge", "name")
    assert types["Container"]["env"][2:] == ("merge", "name")
    assert types["Container"]["volumeMounts"][2:] == ("merge", "mountPath")
    assert types["Container"]["ports"][2:] == ("merge", "containerPort")
    assert types["PodSpec"]["tolerations"][2] == "replace" and types["Container"]["command"][2] == "replace"
    assert "restartPolicy" in types["Container"]  # native sidecars
    assert set(types["ObjectMeta"]) == {"labels", "annotations"}


def problem(check: Any, *args: Any, **kw: Any) -> tuple[str, str]:
    with pytest.raises(ValidationFailed) as info:
        check(*args, **kw)
    return info.value.path, info.value.problem


@pytest.mark.parametrize(("value", "path", "words"), [
    ({"containers": [{"name": "a", "image": "x", "imagePullPolcy": "Always"}]}, "spec.containers[0].imagePullPolcy",
     "did you mean imagePullPolicy"),
    ({"containers": [{"name": "a", "ports": [{"containerPort": "80"}]}]}, "spec.containers[0].ports[0].containerPort",
     "must be an integer"),
    ({"containers": [{"name": "a", "stdin": 1}]}, "spec.containers[0].stdin", "must be true or false"),
    ({"activeDeadlineSeconds": True}, "spec.activeDeadlineSeconds", "must be an integer"),
    ({"containers": {"name": "a"}}, "spec.containers", "must be a list"),
    ({"containers": [{"image": "x"}]}, "spec.containers[0].name", "matched by it"),
    ({"containers": [{"name": "a"}, {"name": "a"}]}, "spec.containers[1].name", "duplicate name"),
    ({"containers": [{"name": "a", "resources": {"limits": {"cpu": "lots"}}}]},
     "spec.containers[0].resources.limits.cpu", "not a quantity"),
    ({"nodeSelector": {"a": 1}}, "spec.nodeSelector.a", "must be a string"),
    ({"volumes": [{"name": "v", "$patch": "explode"}]}, "spec.volumes[0].$patch", "must be one of"),
    ({"$bogus": 1}, "spec.$bogus", "unknown strategic-merge directive"),
])
def test_partial_pods_are_checked_strictly(value: dict[str, Any], path: str, words: str) -> None:
    where, what = problem(check_pod, {"spec": value}, partial=True)
    assert (where, words in what) == (path, True), what


def test_top_level_of_a_pod() -> None:
    assert problem(check_pod, {"status": {}}, partial=True) == ("status", "is set by Kubernetes")
    assert problem(check_pod, {"kind": "Deployment"}, partial=True)[0] == "kind"
    assert problem(check_pod, {"metadata": {"name": "x"}}, partial=True)[0] == "metadata.name"
    assert problem(check_pod, [], partial=True)[1].startswith("must be a pod")
    assert problem(check_pod, {"metadata": {}}, partial=False) == ("spec", "is required")


def test_complete_objects_need_required_fields_and_no_directives() -> None:
    assert problem(check_object, {"name": "v", "secret": {"items": [{"key": "k"}]}}, "Volume", "v",
                   partial=False) == ("v.secret.items[0].path", "is required")
    assert problem(check_object, {"nodeSelectorTerms": [{"$patch": "delete"}]}, "NodeSelector", "n",
                   partial=False)[1].startswith("strategic-merge directives are only allowed")
    check_object({"name": "v", "emptyDir": {"sizeLimit": "1Gi"}}, "Volume", "v", partial=False)
