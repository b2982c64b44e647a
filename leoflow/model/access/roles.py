"""The four roles and the actions each allows, ordered so that a higher role includes a lower one.

An API operation declares the one action it needs (:data:`Action`); a caller holds a role, per
team or cluster-wide (``admin``). The roles are a ladder, not a matrix: ``operator`` can do
everything ``viewer`` can, ``editor`` everything ``operator`` can, ``admin`` everything. A ladder
keeps the role table short enough to read and makes "can X do Y" one comparison — the matrices of
Airflow's FAB permissions (dozens of ``can_*`` per view) are what its users complain about.
"""

from __future__ import annotations

from typing import Literal, get_args

from leoflow.errors import ValidationFailed

Role = Literal["viewer", "operator", "editor", "admin"]
#: What an operation needs: ``read`` DAGs, runs, logs, outputs; ``operate`` them (trigger, cancel,
#: clear, mark, backfill); ``edit`` DAGs (apply, sync, delete); ``admin`` the cluster (pools,
#: tokens, teams, the audit log).
Action = Literal["read", "operate", "edit", "admin"]

ROLES: tuple[Role, ...] = get_args(Role)
ACTIONS: tuple[Action, ...] = get_args(Action)

#: The lowest role that may take each action.
LOWEST_ROLE: dict[Action, Role] = {"read": "viewer", "operate": "operator", "edit": "editor", "admin": "admin"}

_RANK: dict[str, int] = {role: rank for rank, role in enumerate(ROLES)}


def allows(role: Role | None, action: Action) -> bool:
    """Whether ``role`` may take ``action`` (no role may take none)."""
    return role is not None and _RANK[role] >= _RANK[LOWEST_ROLE[action]]


def higher(first: Role | None, second: Role | None) -> Role | None:
    """The more capable of two roles (None is below every role)."""
    if first is None:
        return second
    if second is None:
        return first
    return first if _RANK[first] >= _RANK[second] else second


def role_field(value: object, path: str) -> Role:
    """A role named in a request or the teams file; ValidationFailed naming ``path`` otherwise."""
    for role in ROLES:
        if value == role:
            return role
    shown = repr(value)[:60] if isinstance(value, str) else type(value).__name__
    raise ValidationFailed(path, f"must be one of {', '.join(ROLES)}, got {shown}")
