"""``leoflow pools list|show|create|resize|delete``: named pools of task slots (via the HTTP API).

A pool bounds how many task instances naming it are queued or running at once; the built-in
``default`` pool holds tasks that name none and has ``LEOFLOW_PARALLELISM`` slots (see the
README, Pools and priorities). ``list`` also shows pools that tasks name but that do not exist
(``missing``): their tasks wait until the pool is created.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from leoflow.cli.output import emitted, short, table
from leoflow.cli.verbs import connect, noun, verb

if TYPE_CHECKING:
    from leoflow.settings import ClientSettings

POOL = "/api/v2/pools/{pool}"


def register(sub: Any) -> None:
    pools = noun(sub, "pools", "named pools of task slots: list, create, resize, delete (via the HTTP API)")
    verb(pools, "list", "every pool with its slots in use and its waiting tasks", pools_list, "GET /api/v2/pools")
    show = verb(pools, "show", "one pool's slots, use and waiting tasks", pools_show, f"GET {POOL}")
    show.add_argument("name", metavar="POOL")
    create = verb(pools, "create", "create a named pool", pools_create, "POST /api/v2/pools")
    create.add_argument("name", metavar="POOL")
    create.add_argument("--slots", type=int, required=True, help="task instances queued or running at once")
    create.add_argument("--description", help="what the pool is for")
    resize = verb(pools, "resize", "change a pool's slots (a smaller pool drains as tries end)", pools_resize,
                  f"PATCH {POOL}")
    resize.add_argument("name", metavar="POOL")
    resize.add_argument("--slots", type=int, required=True, help="the new number of slots (0 holds its tasks back)")
    resize.add_argument("--description", help="a new description")
    delete = verb(pools, "delete", "delete a named pool (its waiting tasks wait for a pool of that name)",
                  pools_delete, f"DELETE {POOL}")
    delete.add_argument("name", metavar="POOL")


def line(p: Any) -> str:
    kind = " (built in: LEOFLOW_PARALLELISM)" if p["builtin"] else " (missing: tasks name it, it does not exist)" \
        if p["missing"] else ""
    return (f"{p['name']}: {p['occupied_slots']}/{p['slots']} slots in use ({p['running_slots']} running, "
            f"{p['queued_slots']} queued), {p['waiting_tasks']} waiting{kind}")


def pools_list(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        items = api.list_pools().items
    if emitted(args, items):
        return 0
    table([[p["name"], str(p["slots"]), str(p["occupied_slots"]), str(p["open_slots"]), str(p["waiting_tasks"]),
            "built in" if p["builtin"] else "MISSING" if p["missing"] else "", p["description"] or ""]
           for p in items], ["POOL", "SLOTS", "USED", "OPEN", "WAITING", "", "DESCRIPTION"])
    return 0


def pools_show(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        p = api.get_pool(args.name)
    if emitted(args, p):
        return 0
    print(line(p))
    if p["description"]:
        print(f"about:    {p['description']}")
    if p["created_at"]:
        print(f"created:  {short(p['created_at'])}, updated {short(p['updated_at'])}")
    return 0


def pools_create(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        p = api.create_pool(name=args.name, slots=args.slots, description=args.description)
    if not emitted(args, p):
        print(f"created {line(p)}")
    return 0


def pools_resize(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        p = api.resize_pool(args.name, slots=args.slots, description=args.description)
    if not emitted(args, p):
        print(f"resized {line(p)}")
    return 0


def pools_delete(args: argparse.Namespace, client: ClientSettings) -> int:
    with connect(client) as api:
        api.delete_pool(args.name)
    if not emitted(args, {"name": args.name, "deleted": True}):
        print(f"deleted pool {args.name}")
    return 0
