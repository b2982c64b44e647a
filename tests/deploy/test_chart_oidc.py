"""The chart's ``oidc`` values: rendered as the LEOFLOW_OIDC_* variables the server reads, secrets by reference."""

from __future__ import annotations

import re

import pytest

from tests.deploy.conftest import Render, validate_strict
from tests.deploy.test_chart_features import container, env_of

OIDC = {"oidc": {"issuer": "https://sso.example.com/realms/data", "clientId": "leoflow",
                 "audiences": ["leoflow", "leoflow-api"], "adminGroups": ["platform-admins", "sre"],
                 "groupsClaim": "realm_access.roles", "existingSecret": "leoflow-sso"}}


def test_no_oidc_values_means_no_oidc_settings(render: Render) -> None:
    assert not [name for name in env_of(container(render())) if name.startswith("LEOFLOW_OIDC_")]


def test_oidc_values_reach_the_replicas_and_load_as_settings(render: Render) -> None:
    from leoflow.settings import load_settings

    docs = render(OIDC)
    for doc in docs:
        validate_strict(doc)
    env = env_of(container(docs))
    assert env["LEOFLOW_OIDC_SESSION_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "leoflow-sso", "key": "sessionSecret", "optional": True}
    assert env["LEOFLOW_OIDC_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"]["key"] == "clientSecret"
    assert "leoflow-sso" in env["LEOFLOW_K8S_PROTECTED_SECRETS"]["value"].split(",")  # no DAG may mount it
    literal = {name: e["value"] for name, e in env.items() if name.startswith("LEOFLOW_OIDC_") and "value" in e}
    oidc = load_settings({"LEOFLOW_DATABASE_URL": "postgresql://u:p@h/d", **literal,
                          "LEOFLOW_OIDC_SESSION_SECRET": "s" * 40}).oidc
    assert oidc.issuer == "https://sso.example.com/realms/data" and oidc.client_id == "leoflow"
    assert oidc.audiences == ("leoflow", "leoflow-api") and oidc.admin_groups == ("platform-admins", "sre")
    assert oidc.groups_claim == "realm_access.roles" and oidc.dashboard_sign_in


def test_an_issuer_without_a_client_id_or_audience_fails_the_install(render: Render) -> None:
    with pytest.raises(Exception, match=r"oidc\.issuer needs oidc\.clientId"):
        render({"oidc": {"issuer": "https://sso.example.com"}})


@pytest.mark.parametrize(("bad", "words"), [({"issuer": "sso.example.com"}, "/oidc/issuer"),
                                            ({"groupsClaim": ""}, "/oidc/groupsClaim"),
                                            ({"adminGroups": [""]}, "/oidc/adminGroups/0"),
                                            ({"unknown": 1}, "'unknown' not allowed")])
def test_bad_oidc_values_are_refused_by_the_schema(render: Render, bad: dict[str, object], words: str) -> None:
    with pytest.raises(Exception, match=re.escape(words)):
        render({"oidc": {"clientId": "leoflow", **bad}})
