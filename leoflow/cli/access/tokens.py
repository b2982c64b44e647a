"""``leoflow tokens create|list|revoke``: runtime API tokens (via the HTTP API; admins only).

``create`` prints the new secret once, on its own line, so a script can capture it
(``TOKEN=$(leoflow tokens create ci --role operator --expires-in-days 30 --output json | jq -r .secret)``);
the server keeps only its hash. ``revoke`` takes effect on every replica within a second.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, short, table
from leoflow.cli.verbs import noun, verb
from leoflow.client.api import Api, q

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings

TOKENS = "/api/v2/tokens"
ROLES = ("viewer", "operator", "editor", "admin")


def register(sub: Any) -> None:
    tokens = noun(sub, "tokens", "runtime API tokens: create (secret shown once), list, revoke (via the HTTP API)")
    verb(tokens, "list", "usable tokens with their role, team, expiry and last use", tokens_list, f"GET {TOKENS}")
    create = verb(tokens, "create", "create a token and print its secret (shown this once)", tokens_create,
                  f"POST {TOKENS}")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--role", choices=ROLES, required=True, help="what the token may do")
    create.add_argument("--team", help="the team whose DAGs it acts on (none: every team, for admin)")
    create.add_argument("--expires-in-days", type=int, required=True, dest="expires_in_days",
                        help="days until it expires (at most the server's LEOFLOW_API_TOKEN_MAX_DAYS)")
    revoke = verb(tokens, "revoke", "revoke a token: every replica refuses it within a second", tokens_revoke,
                  f"DELETE {TOKENS}/{{token_id}}")
    revoke.add_argument("token_id", metavar="TOKEN_ID")


def tokens_list(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        items = api.json("GET", TOKENS)["items"]
    if emitted(args, items):
        return 0
    table([[t["id"], t["name"], t["role"], t["team"] or "-", t["prefix"] + "…", short(t["expires_at"]),
            short(t["last_used_at"]), t["created_by"]] for t in items],
          ["ID", "NAME", "ROLE", "TEAM", "PREFIX", "EXPIRES", "LAST USED", "CREATED BY"])
    return 0


def tokens_create(args: argparse.Namespace, client: ClientSettings) -> int:
    body: dict[str, Any] = {"name": args.name, "role": args.role, "expires_in_days": args.expires_in_days}
    if args.team is not None:
        body["team"] = args.team
    with Api(client) as api:
        token = api.request("POST", TOKENS, ok=(201,), json=body).json()
    if emitted(args, token):
        return 0
    print(f"created token {token['id']} ({token['name']}, {token['role']}"
          f"{', team ' + token['team'] if token['team'] else ''}), expires {short(token['expires_at'])}",
          file=sys.stderr)
    print("the secret below is shown this once; store it now:", file=sys.stderr)
    print(token["secret"])
    return 0


def tokens_revoke(args: argparse.Namespace, client: ClientSettings) -> int:
    with Api(client) as api:
        api.request("DELETE", f"{TOKENS}/{q(args.token_id)}", ok=(204,))
    if not emitted(args, {"id": args.token_id, "revoked": True}):
        print(f"revoked token {args.token_id}")
    return 0
