"""Strategic merge of pods: the semantics of ``kubectl patch --type strategic``, checked case by case."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from leoflow.model.k8s.objects import check_pod
from leoflow.model.k8s.strategic_merge import merge_pods

BASE: dict[str, Any] = {
    "metadata": {"labels": {"team": "data", "tier": "batch"}},
    "spec": {
        "containers": [
            {"name": "log-agent", "image": "fluent-bit:3", "args": ["-c", "/etc/fb.conf"]},
            {"name": "task", "image": "base:1", "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
             "volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
        ],
        "volumes": [{"name": "cache", "emptyDir": {}}],
        "tolerations": [{"key": "a", "operator": "Exists"}],
        "nodeSelector": {"pool": "batch", "zone": "a"},
    },
}


def test_containers_merge_by_name_and_scalars_follow_the_patch() -> None:
    merged = merge_pods(BASE, {"spec": {"containers": [
        {"name": "task", "image": "etl:2", "env": [{"name": "B", "value": "two"}, {"name": "C", "value": "3"}]},
        {"name": "proxy", "image": "envoy:1"}]}})
    names = [c["name"] for c in merged["spec"]["containers"]]
    assert names == ["log-agent", "task", "proxy"]  # the original's order, new ones appended
    task = merged["spec"]["containers"][1]
    assert task["image"] == "etl:2"
    assert task["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "two"}, {"name": "C", "value": "3"}]
    assert task["volumeMounts"] == [{"name": "cache", "mountPath": "/cache"}]  # untouched fields stay
    assert merged["spec"]["containers"][0] == BASE["spec"]["containers"][0]


def test_lists_without_a_merge_strategy_are_replaced_and_maps_merge() -> None:
    merged = merge_pods(BASE, {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}],
                                        "nodeSelector": {"zone": "b", "pool": None},
                                        "containers": [{"name": "log-agent", "args": ["-v"]}]},
                               "metadata": {"labels": {"tier": "gold"}}})
    assert merged["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert merged["spec"]["nodeSelector"] == {"zone": "b"}  # null deletes a key
    assert merged["spec"]["containers"][0]["args"] == ["-v"]
    assert merged["metadata"]["labels"] == {"team": "data", "tier": "gold"}


def test_directives() -> None:
    deleted = merge_pods(BASE, {"spec": {"containers": [{"name": "log-agent", "$patch": "delete"}],
                                         "volumes": [{"name": "cache", "$patch": "delete"}]}})
    assert [c["name"] for c in deleted["spec"]["containers"]] == ["task"] and deleted["spec"]["volumes"] == []
    replaced = merge_pods(BASE, {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}})
    assert replaced["spec"]["containers"] == [{"name": "only", "image": "x"}]
    whole = merge_pods(BASE, {"spec": {"nodeSelector": {"$patch": "replace", "gpu": "true"}}})
    assert whole["spec"]["nodeSelector"] == {"gpu": "true"}
    env = merge_pods(BASE, {"spec": {"containers": [{"name": "task", "env": [{"name": "A", "$patch": "delete"}]}]}})
    assert env["spec"]["containers"][1]["env"] == [{"name": "B", "value": "2"}]
    retained = merge_pods(BASE, {"spec": {"volumes": [{"name": "cache", "$retainKeys": ["name", "secret"],
                                                       "secret": {"secretName": "s"}}]}})
    assert retained["spec"]["volumes"] == [{"name": "cache", "secret": {"secretName": "s"}}]
    object_delete = merge_pods(BASE, {"spec": {"containers": [{"name": "task", "volumeMounts": [
        {"mountPath": "/cache", "$patch": "delete"}]}]}})
    assert object_delete["spec"]["containers"][1]["volumeMounts"] == []
    ordered = merge_pods(BASE, {"spec": {"$setElementOrder/containers": [{"name": "task"}, {"name": "log-agent"}]}})
    assert ordered == BASE


def test_inputs_are_never_mutated() -> None:
    before = copy.deepcopy(BASE)
    patch: dict[str, Any] = {"spec": {"containers": [{"name": "task", "env": [{"name": "A", "$patch": "delete"}]}]}}
    patch_before = copy.deepcopy(patch)
    merge_pods(BASE, patch)
    assert before == BASE and patch == patch_before


_names = st.sampled_from(["task", "sidecar", "agent", "proxy"])
_env = st.lists(st.fixed_dictionaries({"name": st.sampled_from(["A", "B", "C"]), "value": st.text(max_size=3)}),
                max_size=3, unique_by=lambda e: e["name"])
_container = st.fixed_dictionaries({"name": _names}, optional={"image": st.text(min_size=1, max_size=5), "env": _env,
                                                               "args": st.lists(st.text(max_size=3), max_size=2)})
_pod = st.fixed_dictionaries({}, optional={
    "spec": st.fixed_dictionaries({}, optional={
        "containers": st.lists(_container, max_size=3, unique_by=lambda c: c["name"]),
        "nodeSelector": st.dictionaries(st.sampled_from(["a", "b"]), st.text(max_size=2), max_size=2),
        "priorityClassName": st.text(max_size=3)}),
    "metadata": st.fixed_dictionaries({}, optional={
        "labels": st.dictionaries(st.sampled_from(["x", "y"]), st.text(max_size=2), max_size=2)})})


@settings(max_examples=150, deadline=None)
@given(_pod, _pod)
def test_merging_is_idempotent_and_keeps_pods_valid(original: dict[str, Any], patch: dict[str, Any]) -> None:
    """Without directives, applying a patch twice equals applying it once; results stay valid pods."""
    once = merge_pods(original, patch)
    assert merge_pods(once, patch) == once
    assert merge_pods(once, {}) == once
    check_pod(once, partial=True)
    for container in (patch.get("spec") or {}).get("containers") or []:
        merged = next(c for c in once["spec"]["containers"] if c["name"] == container["name"])
        for key, value in container.items():
            if key != "env":
                assert merged[key] == value  # the patch wins for what it sets
