"""Authorization: which action each operation needs, what a caller holds, and the one decision.

Every operation needs one :data:`~leoflow.model.access.roles.Action` (:func:`action_for`):
``read`` for GETs, ``operate`` to trigger, cancel, clear, mark, pause and backfill, ``edit`` to
apply, replace, sync and delete DAGs, ``admin`` for the cluster (pools, tokens, cluster templates,
the audit log, notification retries). :class:`~leoflow.api.endpoint.Endpoint` decides once, before
the handler runs (:meth:`AccessControl.check`):

- a route naming a DAG (``{dag_id}``) is decided on the DAG's team: a caller who may not even
  read it gets the same 404 as for a DAG that does not exist (no enumeration of other teams' DAG
  ids), one who may read but not act gets 403;
- a route naming no DAG needs ``admin`` for cluster actions and some role for reads; list routes
  then show only what the caller may read (:func:`readable`), and writes whose DAG is in the
  body (apply, sync) check it in the handler (:func:`require_dag`).

The teams file (``LEOFLOW_TEAMS_FILE``, :mod:`leoflow.model.access.teams`) is read by
:class:`~leoflow.settings.teams_file.TeamsSource` (shared with the Kubernetes executor, which
places a team's pods in its namespace): at start (a bad file stops the server with one line
naming the place) and again when its modification time changes, checked at most once per
second; a bad edit keeps the last good teams and logs the problem once, so a typo never locks
everyone out of a running cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from starlette.requests import Request

from leoflow.api.auth import Principal
from leoflow.api.errors import ApiError
from leoflow.db.connection.database import Database
from leoflow.db.stores import dags as dag_store
from leoflow.model.access.roles import LOWEST_ROLE, ROLES, Action, allows
from leoflow.model.access.teams import NO_TEAMS, Grant, Teams
from leoflow.settings.teams_file import RELOAD_INTERVAL, TeamsSource

__all__ = ["RELOAD_INTERVAL", "AccessControl", "TeamsSource", "action_for", "grant_for", "readable", "refuse_live_move",
           "require_dag"]

log = logging.getLogger(__name__)

#: Seconds a DAG's ``team:`` field, as read from the database, is trusted: a DAG moved to another
#: team by an apply is decided by its new team within this, on every replica.
OWNER_TTL = 1.0
#: DAGs whose ``team:`` field a replica remembers (emptied when full).
OWNER_CACHE_SIZE = 100_000
#: Live runs a refused move names (:func:`refuse_live_move`).
MOVE_RUNS_SHOWN = 5

#: Operations whose action is not what their ``auth`` implies (``read`` → read, ``admin`` → admin).
_ACTIONS: dict[tuple[str, str], Action] = {
    ("POST", "/api/v2/dags/{dag_id}/runs"): "operate",
    ("POST", "/api/v2/dags/{dag_id}/runs/{run_id}/cancel"): "operate",
    ("POST", "/api/v2/dags/{dag_id}/runs/{run_id}/clear"): "operate",
    ("POST", "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/mark"): "operate",
    ("POST", "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/approval"): "operate",
    ("POST", "/api/v2/dags/{dag_id}/runs/{run_id}/mark"): "operate",
    # A try's artifacts are task data like its log and outputs: listed and downloaded with read.
    ("GET", "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/artifacts"): "read",
    ("GET", "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/artifacts/{name}"): "read",
    ("POST", "/api/v2/dags/{dag_id}/backfill"): "operate",
    ("POST", "/api/v2/dags/{dag_id}/backfills/{backfill_id}/cancel"): "operate",
    ("PATCH", "/api/v2/dags/{dag_id}"): "operate",
    ("POST", "/api/v2/dags"): "edit",
    ("PUT", "/api/v2/dags/{dag_id}"): "edit",
    ("DELETE", "/api/v2/dags/{dag_id}"): "edit",
    ("POST", "/api/v2/dags:sync"): "edit",
    # An outside dataset event starts the runs of the DAGs waiting on it, as a trigger would.
    ("POST", "/api/v2/datasets/events"): "operate",
    # Team editors manage their own team's tokens (the handlers narrow it: leoflow.api.routes.tokens).
    ("GET", "/api/v2/tokens"): "edit",
    ("POST", "/api/v2/tokens"): "edit",
    ("DELETE", "/api/v2/tokens/{token_id}"): "edit",
    # A try's pod events are task data beside its log: read like the log.
    ("GET", "/api/v2/dags/{dag_id}/runs/{run_id}/tasks/{task_id}/events"): "read",
}


def action_for(method: str, path: str, auth: str) -> Action | None:
    """The action an operation needs; None for open routes (probes, the document)."""
    if auth == "open":
        return None
    found = _ACTIONS.get((method, path))
    if found is not None:
        return found
    return "admin" if auth == "admin" else "read"


def role_table(operations: Iterable[tuple[str, str, str]]) -> str:
    """The role table of ``docs/access-control.md`` for ``(method, path, auth)`` operations (generated:
    ``python -m leoflow.cli.docs``; ``tests/api/test_role_table.py`` calls every route as every role)."""
    rows = ["| Operation | Action | " + " | ".join(ROLES) + " |", "| --- | --- |" + " :---: |" * len(ROLES)]
    for method, path, auth in operations:
        action = action_for(method, path, "open" if auth == "metrics" else auth)
        cells = ["open"] * len(ROLES) if action is None else ["yes" if allows(r, action) else "—" for r in ROLES]
        needs = "none" if action is None else f"{action} (from {LOWEST_ROLE[action]})"
        if auth == "metrics":
            needs = "none (read with LEOFLOW_METRICS_AUTH=true)"
        rows.append(f"| `{method} {path}` | {needs} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def grant_for(principal: Principal, teams: Teams) -> Grant:
    """What ``principal`` may do under ``teams`` (see :mod:`leoflow.model.access.teams`)."""
    if principal.kind == "anonymous":  # LEOFLOW_AUTH=disabled
        return Grant(admin=True)
    if principal.kind == "token" and principal.role is not None:
        if principal.role == "admin":
            return Grant(admin=True)
        if principal.team is None or not teams.configured:
            return Grant(everywhere=principal.role)
        return Grant(teams={principal.team: principal.role})
    if principal.kind == "oidc":
        if principal.scope == "admin" or teams.admin_groups.intersection(principal.groups):
            return Grant(admin=True)
        if not teams.configured:
            return Grant(everywhere="viewer")
        return Grant(teams=teams.group_roles(principal.groups))
    # A static token: the bootstrap admin, or a reader of everything (as before teams existed).
    return Grant(admin=True) if principal.scope == "admin" else Grant(everywhere="viewer")


def _dag_not_found(dag_id: str) -> ApiError:
    return ApiError(404, f"DAG {dag_id[:60]!r} not found")  # word for word the routes' own 404


class DagOwners:
    """The teams DAGs' ``team:`` fields name, read from the database and kept :data:`OWNER_TTL`."""

    def __init__(self, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._db: Database | None = None
        self._seen: dict[str, tuple[str | None, float]] = {}

    def attach(self, db: Database) -> None:
        self._db = db

    @property
    def db(self) -> Database | None:
        return self._db

    def forget(self, dag_ids: Iterable[str]) -> None:
        """This replica just wrote these DAGs: their next request reads the team they name now."""
        for dag_id in dag_ids:
            self._seen.pop(dag_id, None)

    async def named(self, dag_ids: Iterable[str]) -> dict[str, str | None]:
        wanted = list(dict.fromkeys(dag_ids))
        now = self._monotonic()
        stale = [d for d in wanted if d not in self._seen or now - self._seen[d][1] > OWNER_TTL]
        if stale and self._db is not None:
            async with self._db.connect() as conn:
                found = await dag_store.named_teams(conn, stale)
            if len(self._seen) + len(stale) > OWNER_CACHE_SIZE:
                self._seen.clear()
            for dag_id in stale:
                self._seen[dag_id] = (found.get(dag_id), now)
        return {d: self._seen[d][0] if d in self._seen else None for d in wanted}


class AccessControl:
    """The decision every route takes once (:meth:`check`) and the helpers handlers use."""

    def __init__(self, source: TeamsSource) -> None:
        self.source = source
        self.owners = DagOwners()

    def teams(self) -> Teams:
        return self.source.current()

    async def owners_of(self, teams: Teams, dag_ids: Iterable[str]) -> dict[str, str | None]:
        """Each DAG's team: its ``team:`` field, else its prefix (no lookup without a teams file)."""
        ids = list(dag_ids)
        if not teams.configured:
            return dict.fromkeys(ids)
        named = await self.owners.named(ids)
        return {d: named.get(d) or teams.team_of(d) for d in ids}

    async def check(self, request: Request, principal: Principal, action: Action) -> None:
        teams = self.teams()
        grant = grant_for(principal, teams)
        request.state.grant = grant
        request.state.teams = teams
        request.state.access = self
        dag_id = request.path_params.get("dag_id")
        if isinstance(dag_id, str):
            team = (await self.owners_of(teams, [dag_id]))[dag_id]
            request.state.team = team
            if not grant.may("read", team):
                raise _dag_not_found(dag_id)
            if not grant.may(action, team):
                raise ApiError(403, f"{principal.name!r} may not {action} DAG {dag_id[:60]!r} "
                               f"(role: {grant.role_for(team) or 'none'})")
            return
        if request.url.path == "/metrics" and grant.readable_teams() is not None:
            # Its series carry every team's DAG ids: a cluster-wide reader (a static read token, a
            # token without a team, an admin) may scrape it, a team's caller may not.
            raise ApiError(403, f"{principal.name!r} reads only some teams' DAGs; /metrics carries every DAG's "
                           "series (scrape it with a cluster-wide token)")
        if action == "admin":
            if not grant.admin:
                raise ApiError(403, f"{principal.name!r} is not an admin; this request needs admin")
        elif not grant.could(action):
            raise ApiError(403, f"{principal.name!r} may not {action} any DAG" if grant.anything
                           else f"{principal.name!r} holds no role in any team")


def _state(request: Request) -> tuple[Grant, Teams]:
    grant: Grant = getattr(request.state, "grant", None) or Grant(admin=True)
    teams: Teams = getattr(request.state, "teams", None) or NO_TEAMS
    return grant, teams


async def require_dag(request: Request, dag_id: str, action: Action, *, new_team: str | None = None) -> None:
    """For writes whose DAG is in the body: 403 unless the caller may ``action`` the DAG as it is
    owned now and, when the new spec names a team (``new_team``), as it will be owned."""
    grant, teams = _state(request)
    access: AccessControl | None = getattr(request.state, "access", None)
    team = (await access.owners_of(teams, [dag_id]))[dag_id] if access is not None else teams.team_of(dag_id)
    request.state.team = new_team or team
    if grant.admin:
        return
    for owner, field in ((team, "dag_id"), (new_team, "team")):
        if (owner is not None or field == "dag_id") and not grant.may(action, owner):
            shown = f"team {owner!r}" if owner else "no team (admins only)"
            raise ApiError(403, f"DAG {dag_id[:60]!r} {'belongs' if field == 'dag_id' else 'would belong'} to "
                           f"{shown}; you may not {action} it", details={"field": field})


async def refuse_live_move(request: Request, dag_id: str, new_team: str | None) -> None:
    """409 when applying this spec would move ``dag_id`` to another team while it has live tries.

    A team's pods run in its namespace (:mod:`leoflow.executor.kubernetes.placement`); a DAG moved
    with pods still running would have them in one team's namespace while its next tries go to
    another's, and its Secrets would be read from two places. So an apply or sync that changes the
    DAG's owner (its ``team:`` field, or dropping it so its prefix decides) is refused, naming the
    live runs, until they finish or are cancelled; without live tries the move is allowed. Each
    try's pod stays where it was created whatever happens (its ``executor_ref`` records the
    namespace), so a try launched between this check and the apply is still followed and collected.
    """
    _, teams = _state(request)
    access: AccessControl | None = getattr(request.state, "access", None)
    db = access.owners.db if access is not None else None
    if not teams.configured or access is None or db is None:
        return
    current = (await access.owners_of(teams, [dag_id]))[dag_id]
    after = new_team or teams.team_of(dag_id)
    if current == after:
        return
    async with db.connect() as conn:
        if not await dag_store.dag_exists(conn, dag_id):
            return
        live = await dag_store.live_runs(conn, dag_id, limit=MOVE_RUNS_SHOWN + 1)
    if live:
        more = ", ..." if len(live) > MOVE_RUNS_SHOWN else ""
        shown = ", ".join(repr(r[:100]) for r in live[:MOVE_RUNS_SHOWN]) + more
        raise ApiError(409, f"DAG {dag_id[:60]!r} has live tries in run(s) {shown}; it cannot move from "
                       f"{_owner(current)} to {_owner(after)} until they finish or are cancelled (its pods run "
                       "in its team's namespace)", details={"field": "team", "live_runs": live[:MOVE_RUNS_SHOWN]})


def _owner(team: str | None) -> str:
    return f"team {team!r}" if team else "no team (admins)"


def token_teams(request: Request) -> frozenset[str] | None:
    """The teams whose API tokens the caller manages: None for an admin (every token, teamless ones
    too), else the configured teams the caller edits (a team editor manages its team's tokens)."""
    grant, teams = _state(request)
    if grant.admin:
        return None
    return frozenset(team for team in teams.names if grant.may("edit", team))


def forget_owners(request: Request, dag_ids: Iterable[str]) -> None:
    """After an apply or a sync: the DAGs' ``team:`` fields are read again on this replica's next request
    (the other replicas read them within :data:`OWNER_TTL`)."""
    access: AccessControl | None = getattr(request.state, "access", None)
    if access is not None:
        access.owners.forget(dag_ids)


async def learn_owners(request: Request, dag_ids: Sequence[str]) -> None:
    """Look up the owners of many DAGs in one query (kept like any other), before a loop asks
    :func:`require_dag` and :func:`refuse_live_move` about each: a 10,000-DAG sync in an install
    with teams was otherwise 10,000 lookups, one per DAG."""
    _, teams = _state(request)
    access: AccessControl | None = getattr(request.state, "access", None)
    if access is not None and len(dag_ids) <= OWNER_CACHE_SIZE:
        await access.owners_of(teams, dag_ids)


def reads_every_dag(request: Request) -> bool:
    """Whether the caller may read every DAG: a list's page then needs no filtering (nor parsing)."""
    grant, _ = _state(request)
    return grant.readable_teams() is None


async def readable(request: Request, items: Iterable[dict[str, Any]], key: str = "dag_id") -> list[dict[str, Any]]:
    """The items whose DAG the caller may read (everything for a caller who reads every DAG)."""
    grant, teams = _state(request)
    rows = list(items)
    if grant.readable_teams() is None:
        return rows
    access: AccessControl | None = getattr(request.state, "access", None)
    ids = [str(item.get(key, "")) for item in rows]
    owners = await access.owners_of(teams, ids) if access is not None else {d: teams.team_of(d) for d in ids}
    return [item for item, dag_id in zip(rows, ids, strict=True) if grant.may("read", owners[dag_id])]
