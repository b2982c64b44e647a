"""Roles, teams and grants, pure: who holds which role on which DAG."""

from __future__ import annotations

import pytest

from leoflow.api.access import action_for, grant_for
from leoflow.api.auth import ANONYMOUS_ADMIN, Principal
from leoflow.model.access.roles import ROLES, allows
from leoflow.model.access.teams import NO_TEAMS, OWNER_CACHE_SIZE, parse_teams

TEAMS = parse_teams({
    "teams": [
        {"name": "data", "dag_id_prefixes": ["data-"], "rules": [{"group": "data-eng", "role": "editor"},
                                                                 {"group": "everyone", "role": "viewer"}]},
        {"name": "science", "dag_id_prefixes": ["data-science-"], "rules": [{"group": "everyone", "role": "operator"}]},
    ],
    "admin_groups": ["platform"],
})


def test_the_roles_are_a_ladder() -> None:
    assert [role for role in ROLES if allows(role, "operate")] == ["operator", "editor", "admin"]
    assert [role for role in ROLES if allows(role, "admin")] == ["admin"]
    assert not allows(None, "read")


def test_the_longest_prefix_owns_the_dag_and_the_answer_is_remembered() -> None:
    assert TEAMS.team_of("data-etl") == "data"
    assert TEAMS.team_of("data-science-train") == "science"
    assert TEAMS.team_of("other") is None
    for number in range(OWNER_CACHE_SIZE + 10):  # bounded: the memo empties itself when full
        TEAMS.team_of(f"x{number}")
    assert len(TEAMS._owners) <= OWNER_CACHE_SIZE
    assert TEAMS.team_of("data-science-train") == "science"


def test_oidc_groups_map_to_team_roles() -> None:
    person = Principal("ann@example.com", "read", kind="oidc", subject="sub-1", groups=("data-eng", "everyone"))
    grant = grant_for(person, TEAMS)
    assert grant.role_for("data") == "editor" and grant.role_for("science") == "operator"
    assert grant.role_for(None) is None  # a DAG no team owns: admins only
    assert grant_for(Principal("b", "read", kind="oidc", groups=("platform",)), TEAMS).admin
    assert not grant_for(Principal("c", "read", kind="oidc", groups=("nobody",)), TEAMS).anything
    # Without a teams file, a verified person reads everything (as before teams existed).
    assert grant_for(Principal("c", "read", kind="oidc", groups=("nobody",)), NO_TEAMS).role_for(None) == "viewer"


def test_tokens_and_static_credentials() -> None:
    assert grant_for(Principal("t", "read", kind="token", role="operator", team="data"), TEAMS).teams == {
        "data": "operator"}
    assert grant_for(Principal("t", "read", kind="token", role="operator"), TEAMS).everywhere == "operator"
    assert grant_for(Principal("t", "read", kind="token", role="operator", team="data"), NO_TEAMS).everywhere == \
        "operator"
    assert grant_for(Principal("s", "read"), TEAMS).role_for(None) == "viewer"
    assert grant_for(Principal("s", "admin"), TEAMS).admin and grant_for(ANONYMOUS_ADMIN, TEAMS).admin


@pytest.mark.parametrize(("method", "path", "auth", "action"), [
    ("GET", "/healthz", "open", None), ("GET", "/api/v2/dags", "read", "read"),
    ("POST", "/api/v2/dags/{dag_id}/runs", "admin", "operate"), ("DELETE", "/api/v2/dags/{dag_id}", "admin", "edit"),
    ("POST", "/api/v2/pools", "admin", "admin"),
])
def test_each_operation_needs_one_action(method: str, path: str, auth: str, action: str | None) -> None:
    assert action_for(method, path, auth) == action
