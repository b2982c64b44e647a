"""Teams and who holds which role where: the teams file's language and the one decision.

A team owns the DAGs whose spec names it (``team: data``, looked up by the API:
:mod:`leoflow.api.access`), else those with one of its DAG-id prefixes (``dag_id_prefixes``; the
longest matching prefix wins, so ``data-`` and ``data-science-`` can be two teams). A DAG no team
owns belongs to the admins.
Rules give identity-provider groups a role in the team (``{group: data-eng, role: editor}``);
``admin_groups`` makes a group's members cluster admins. The groups are the ones the OpenID Connect
verifier read from ``LEOFLOW_OIDC_GROUPS_CLAIM``, so any claim holding a list of strings
(``groups``, ``roles``, ``realm_access.roles``) can drive the rules::

    teams:
      - name: data
        dag_id_prefixes: [data-, etl-]
        namespace: data            # where its task pods run (none: LEOFLOW_K8S_NAMESPACE)
        service_account: data-tasks  # its pods' default service account (none: the cluster's)
        pod_template:              # merged over the cluster's template, under the DAG's
          metadata: {labels: {cost-center: data}}
        rules:
          - {group: data-viewers, role: viewer}
          - {group: data-eng, role: editor}
    admin_groups: [platform-admins]

Everything is bounded (:data:`MAX_TEAMS` teams, :data:`MAX_PREFIXES` prefixes and
:data:`MAX_RULES` rules a team, :data:`MAX_FILE_BYTES` of YAML) and every problem is one line
naming its place (``teams[2].rules[0].role: must be one of viewer, operator, editor, admin``).

:class:`Grant` is what a caller holds: admin, a role on every DAG (``everywhere``: a static read
token, a runtime token without a team), and roles per team. Without a teams file there is one
implicit team, and every role a caller holds applies to every DAG — today's behaviour.

:meth:`Teams.placement` is where a team's task pods go: its ``namespace`` (its Secrets live
there, and only its pods), its default ``service_account`` and its ``pod_template``; a team
without a namespace, and a DAG of no team, use the cluster's (``LEOFLOW_K8S_NAMESPACE``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.access.roles import Action, Role, allows, higher, role_field
from leoflow.model.bounds import check_name
from leoflow.model.fields import no_unknown, type_name
from leoflow.model.k8s.pod import parse_pod_template

MAX_TEAMS = 1_000
MAX_PREFIXES = 100
MAX_RULES = 100
MAX_ADMIN_GROUPS = 100
MAX_GROUP_LENGTH = 256
MAX_PREFIX_LENGTH = 50
#: Bytes of a teams file: 1,000 teams with a few prefixes and rules each fit in far less.
MAX_FILE_BYTES = 1024 * 1024
#: DAG ids whose owner :meth:`Teams.team_of` remembers (about 10 MB at the most).
OWNER_CACHE_SIZE = 100_000


@dataclass(frozen=True)
class Rule:
    group: str
    role: Role


@dataclass(frozen=True)
class Team:
    name: str
    dag_id_prefixes: tuple[str, ...]
    namespace: str | None = None
    rules: tuple[Rule, ...] = ()
    #: The default service account of the team's task pods (None: the cluster's).
    service_account: str | None = None
    #: A partial Pod merged over the cluster's template and under the DAG's (canonical form).
    pod_template: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Placement:
    """Where and as whom a team's task pods run; None fields fall back to the cluster's settings."""

    team: str | None = None
    namespace: str | None = None
    service_account: str | None = None
    pod_template: Mapping[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Teams:
    """A parsed teams file; ``Teams()`` is "no teams configured" (one implicit team)."""

    teams: tuple[Team, ...] = ()
    admin_groups: frozenset[str] = frozenset()
    #: (prefix, team), longest prefix first: the first match is the owner.
    _prefixes: tuple[tuple[str, str], ...] = field(default=(), compare=False, repr=False)
    _by_group: Mapping[str, tuple[tuple[str, Role], ...]] = field(default_factory=dict, compare=False, repr=False)
    #: team_of's answers (a scan of every prefix costs ~10 µs at 300 prefixes; a lookup ~0.1 µs),
    #: emptied when it holds :data:`OWNER_CACHE_SIZE` DAG ids.
    _owners: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    @property
    def configured(self) -> bool:
        return bool(self.teams)

    @property
    def names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.teams)

    @property
    def namespaces(self) -> frozenset[str]:
        """Every namespace a team names (the executor watches each, plus the cluster's own)."""
        return frozenset(t.namespace for t in self.teams if t.namespace)

    def placement(self, team: str | None) -> Placement:
        """Where ``team``'s pods run (an unknown team or None: the cluster's defaults)."""
        found = next((t for t in self.teams if t.name == team), None) if team is not None else None
        if found is None:
            return Placement()
        return Placement(team=found.name, namespace=found.namespace, service_account=found.service_account,
                         pod_template=found.pod_template)

    def team_of(self, dag_id: str) -> str | None:
        """The team owning ``dag_id`` (its longest matching prefix), None: the admins'."""
        try:
            return self._owners[dag_id]
        except KeyError:
            pass
        owner = next((team for prefix, team in self._prefixes if dag_id.startswith(prefix)), None)
        if len(self._owners) >= OWNER_CACHE_SIZE:
            self._owners.clear()
        self._owners[dag_id] = owner
        return owner

    def group_roles(self, groups: tuple[str, ...]) -> dict[str, Role]:
        """The role per team that the rules give these groups (the highest when several match)."""
        found: dict[str, Role] = {}
        for group in groups:
            for team, role in self._by_group.get(group, ()):
                best = higher(found.get(team), role)
                assert best is not None
                found[team] = best
        return found


@dataclass(frozen=True)
class Grant:
    """What a caller may do: cluster admin, a role on every DAG, and a role per team."""

    admin: bool = False
    everywhere: Role | None = None
    teams: Mapping[str, Role] = field(default_factory=dict)

    def role_for(self, team: str | None) -> Role | None:
        """The caller's role on a DAG of ``team`` (None: a DAG no team owns)."""
        if self.admin:
            return "admin"
        if team is None:
            return self.everywhere
        return higher(self.everywhere, self.teams.get(team))

    def may(self, action: Action, team: str | None) -> bool:
        return allows(self.role_for(team), action)

    def could(self, action: Action) -> bool:
        """Whether the caller may take ``action`` on the DAGs of some team (the DAG is decided later)."""
        return self.admin or allows(self.everywhere, action) or any(allows(r, action) for r in self.teams.values())

    @property
    def anything(self) -> bool:
        """Whether the caller holds any role at all (cluster-wide reads need one)."""
        return self.admin or self.everywhere is not None or bool(self.teams)

    def readable_teams(self) -> frozenset[str] | None:
        """The teams whose DAGs the caller reads; None means every DAG."""
        if self.admin or self.everywhere is not None:
            return None
        return frozenset(self.teams)


NO_TEAMS = Teams()


def _strings(value: object, path: str, *, most: int, longest: int) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list of strings, got {type_name(value)}")
    if len(value) > most:
        raise ValidationFailed(path, f"must have at most {most} entries, got {len(value)}")
    for number, item in enumerate(value):
        if not isinstance(item, str) or not item or len(item) > longest or "\x00" in item:
            raise ValidationFailed(f"{path}[{number}]", f"must be a non-empty string of at most {longest} characters")
    return tuple(value)


def _team(doc: object, path: str) -> Team:
    if not isinstance(doc, dict):
        raise ValidationFailed(path, f"must be a mapping, got {type_name(doc)}")
    no_unknown(doc, {"name", "dag_id_prefixes", "namespace", "service_account", "pod_template", "rules"}, path)
    name = check_name(doc.get("name"), f"{path}.name", limits.TEAM_NAME)
    prefixes = _strings(doc.get("dag_id_prefixes", []), f"{path}.dag_id_prefixes", most=MAX_PREFIXES,
                        longest=MAX_PREFIX_LENGTH)
    namespace = doc.get("namespace")
    if namespace is not None:
        namespace = check_name(namespace, f"{path}.namespace", limits.TEAM_NAMESPACE)
    service_account = doc.get("service_account")
    if service_account is not None:
        service_account = check_name(service_account, f"{path}.service_account", limits.TEAM_SERVICE_ACCOUNT)
    pod_template = parse_pod_template(doc["pod_template"], f"{path}.pod_template") if "pod_template" in doc else {}
    raw_rules = doc.get("rules", [])
    if not isinstance(raw_rules, list):
        raise ValidationFailed(f"{path}.rules", f"must be a list, got {type_name(raw_rules)}")
    if len(raw_rules) > MAX_RULES:
        raise ValidationFailed(f"{path}.rules", f"must have at most {MAX_RULES} rules, got {len(raw_rules)}")
    rules = []
    for number, rule in enumerate(raw_rules):
        where = f"{path}.rules[{number}]"
        if not isinstance(rule, dict):
            raise ValidationFailed(where, f"must be a mapping like {{group: data-eng, role: editor}}, got "
                                   f"{type_name(rule)}")
        no_unknown(rule, {"group", "role"}, where)
        group = _strings([rule.get("group")], f"{where}.group", most=1, longest=MAX_GROUP_LENGTH)[0] \
            if isinstance(rule.get("group"), str) else None
        if group is None:
            raise ValidationFailed(f"{where}.group", "is required (a group name, a string)")
        role = role_field(rule.get("role"), f"{where}.role")
        if role == "admin":
            raise ValidationFailed(f"{where}.role", "admin is cluster-wide: list the group in admin_groups")
        rules.append(Rule(group, role))
    return Team(name=name, dag_id_prefixes=prefixes, namespace=namespace, rules=tuple(rules),
                service_account=service_account, pod_template=pod_template)


def parse_teams(doc: Any) -> Teams:
    """A teams file's document (already read as YAML) → :class:`Teams`; ValidationFailed naming the place."""
    if doc is None:
        return NO_TEAMS
    if not isinstance(doc, dict):
        raise ValidationFailed("", f"a teams file is a mapping with teams: and admin_groups:, got {type_name(doc)}")
    no_unknown(doc, {"teams", "admin_groups"}, "")
    raw = doc.get("teams", [])
    if not isinstance(raw, list):
        raise ValidationFailed("teams", f"must be a list, got {type_name(raw)}")
    if len(raw) > MAX_TEAMS:
        raise ValidationFailed("teams", f"must have at most {MAX_TEAMS} teams, got {len(raw)}")
    teams = tuple(_team(item, f"teams[{number}]") for number, item in enumerate(raw))
    owners: dict[str, str] = {}
    seen: set[str] = set()
    for number, team in enumerate(teams):
        if team.name in seen:
            raise ValidationFailed(f"teams[{number}].name", f"{team.name!r} is declared twice")
        seen.add(team.name)
        for prefix in team.dag_id_prefixes:
            if prefix in owners:
                raise ValidationFailed(f"teams[{number}].dag_id_prefixes",
                                       f"{prefix!r} already belongs to team {owners[prefix]!r}")
            owners[prefix] = team.name
    admin_groups = frozenset(_strings(doc.get("admin_groups", []), "admin_groups", most=MAX_ADMIN_GROUPS,
                                      longest=MAX_GROUP_LENGTH))
    by_group: dict[str, list[tuple[str, Role]]] = {}
    for team in teams:
        for rule in team.rules:
            by_group.setdefault(rule.group, []).append((team.name, rule.role))
    prefixes = tuple(sorted(owners.items(), key=lambda item: -len(item[0])))
    return Teams(teams=teams, admin_groups=admin_groups, _prefixes=prefixes,
                 _by_group={group: tuple(found) for group, found in by_group.items()})
