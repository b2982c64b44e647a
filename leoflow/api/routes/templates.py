"""Cluster template routes: store (PUT), list, show and delete named, versioned task shapes.

A cluster template is a task shape many DAGs share (:mod:`leoflow.model.spec.reuse`): a DAG
says ``uses: cluster/NAME@V`` (or ``cluster/NAME``, the newest when it is applied) and the apply
inlines it. ``PUT /api/v2/templates/{name}`` checks the body as a DAG's ``templates:`` entry is
checked (422 naming the field) and stores it as the next version — or answers 200 with the same
version when the document is the newest one already (``templates apply`` is idempotent).
``DELETE`` marks every version deleted: DAG versions that used one keep their inlined copy and
run unchanged; new applies naming it are refused. Writes need ``admin`` and are audited.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from leoflow.api.audit import audited_transaction
from leoflow.api.endpoint import api_state, read_document, require_object
from leoflow.api.errors import ApiError, bad_field
from leoflow.api.jsonresp import JsonResponse
from leoflow.api.openapi import components as oas
from leoflow.api.openapi import templates as template_schemas
from leoflow.api.operations import Operations
from leoflow.api.url_params import query_int
from leoflow.clock import SystemClock
from leoflow.db.stores import task_templates as template_store
from leoflow.model import limits
from leoflow.model.spec.dag import parse_cluster_template
from leoflow.model.spec.reuse import check_cluster_template, cluster_template_hash


def path_template(request: Request) -> str:
    """The ``{name}`` path parameter; names that cannot exist are simply not found."""
    name: str = request.path_params["name"]
    if not limits.TEMPLATE_NAME.matches(name):
        raise ApiError(404, f"template {name[:60]!r} not found")
    return name


def _not_found(name: str, version: int | None = None) -> ApiError:
    return ApiError(404, f"template {name!r}" + (f" has no version {version}" if version else " not found"))


OPERATIONS = Operations()

TEMPLATES = "/api/v2/templates"
TEMPLATE = TEMPLATES + "/{name}"


@OPERATIONS("GET", TEMPLATES, "List cluster templates", oas.json_answer("200", "TaskTemplateList"))
async def list_templates(request: Request) -> Response:
    async with api_state(request).db.connect() as conn:
        return JsonResponse({"items": await template_store.list_templates(conn)})


@OPERATIONS("GET", TEMPLATE, "Get cluster template", oas.json_answer("200", "TaskTemplate"), errors="400 404",
            params=[template_schemas.TEMPLATE, template_schemas.VERSION])
async def get_template(request: Request) -> Response:
    name = path_template(request)
    version = query_int(request, "version", limits.TRY_NUMBER)
    async with api_state(request).db.connect() as conn:
        found = await template_store.get_template(conn, name, version)
    if found is None:
        raise _not_found(name, version)
    return JsonResponse(found)


_PUT_ANSWERS = {**oas.json_answer("200", "TaskTemplate", "Unchanged"),
                **oas.json_answer("201", "TaskTemplate", "Created")}


@OPERATIONS("PUT", TEMPLATE, "Put cluster template", _PUT_ANSWERS,
            body="TaskTemplateSpec", auth="admin", errors="409", params=[template_schemas.TEMPLATE])
async def put_template(request: Request) -> Response:
    name: str = request.path_params["name"]
    if not limits.TEMPLATE_NAME.matches(name):
        raise bad_field("name", f"{name[:60]!r} is not a valid name: {limits.TEMPLATE_NAME.rule}", status=422)
    document = require_object(await read_document(request))
    if document.get("name", name) != name:
        raise bad_field("name", f"is {str(document['name'])[:60]!r} in the body but {name!r} in the path", status=422)
    spec = {k: v for k, v in document.items() if k != "name"}
    check_cluster_template(spec)
    parse_cluster_template(spec, name)  # 422 naming the field
    async with audited_transaction(request, status=201) as write:
        version, created = await template_store.put_template(
            write.conn, name, spec, cluster_template_hash(spec), created_by=request.state.principal.name,
            now=SystemClock().now())
        write.status = 201 if created else 200
        write.details.update(template=name, version=version, changed=created)
        found = await template_store.get_template(write.conn, name, version)
    assert found is not None
    return JsonResponse(found, status_code=201 if created else 200)


@OPERATIONS("DELETE", TEMPLATE, "Delete cluster template", {"204": {"description": "Deleted"}}, auth="admin",
            errors="404", params=[template_schemas.TEMPLATE])
async def delete_template(request: Request) -> Response:
    name = path_template(request)
    async with audited_transaction(request, status=204) as write:
        write.details["template"] = name
        if not await template_store.delete_template(write.conn, name):
            raise _not_found(name)
    return Response(status_code=204)
