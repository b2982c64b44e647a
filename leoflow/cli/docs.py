"""Renders the documentation's generated tables: configuration (:data:`leoflow.settings.VARIABLES`,
in ``docs/configuration.md``), input limits (:data:`leoflow.model.limits.LIMITS`, in
``docs/limits.md``) and what each role may call (:func:`leoflow.api.access.role_table`, in
``docs/access-control.md``); and the typed API client's two generated modules
(:func:`client_modules`: ``leoflow/client/models.py`` and ``operations.py``, rendered from the
OpenAPI document).

The pages are checked against this output by a test, so neither table can drift from the code.
``python -m leoflow.cli.docs`` rewrites both blocks in place.
"""

from __future__ import annotations

from leoflow.model.limits import LIMITS
from leoflow.settings import VARIABLES

START = "<!-- settings-table:start -->"
END = "<!-- settings-table:end -->"
LIMITS_START = "<!-- limits-table:start -->"
LIMITS_END = "<!-- limits-table:end -->"
ROLES_START = "<!-- roles-table:start -->"
ROLES_END = "<!-- roles-table:end -->"


def settings_table() -> str:
    rows = ["| Variable | Default | Meaning |", "| --- | --- | --- |"]
    rows += [f"| `{v.name}` | {v.default_text} | {v.meaning} |" for v in VARIABLES]
    return "\n".join(rows)


def limits_table() -> str:
    rows = ["| Input | Limit | Why |", "| --- | --- | --- |"]
    rows += [f"| {limit.subject} | {limit.rule} | {limit.why} |" for limit in LIMITS]
    return "\n".join(rows)


def roles_table() -> str:
    """What each role may call (:func:`leoflow.api.access.role_table` over every operation)."""
    from leoflow.api.access import role_table  # the API only for this table, not for the others
    from leoflow.api.routes.table import OPERATIONS

    return role_table((op.method, op.path, op.auth) for op in OPERATIONS)


def client_modules() -> dict[str, str]:
    """The typed client's generated modules (:mod:`leoflow.client.codegen`), by path in the repository."""
    from leoflow.api.openapi.document import openapi_document  # the API only for these, as for the roles
    from leoflow.client.codegen import render_models, render_operations

    document = openapi_document()
    return {"leoflow/client/models.py": render_models(document),
            "leoflow/client/operations.py": render_operations(document)}


def _replace_block(text: str, start: str, end: str, table: str) -> str:
    head, _, rest = text.partition(start)
    _, _, tail = rest.partition(end)
    return f"{head}{start}\n{table}\n{end}{tail}"


#: The page that holds each generated table, relative to the repository.
PAGES = {"docs/configuration.md": (START, END), "docs/limits.md": (LIMITS_START, LIMITS_END),
         "docs/access-control.md": (ROLES_START, ROLES_END)}


def render_readme(text: str) -> str:
    """``text`` with the blocks between the markers it holds replaced by the current tables."""
    if START in text:
        text = _replace_block(text, START, END, settings_table())
    if LIMITS_START in text:
        text = _replace_block(text, LIMITS_START, LIMITS_END, limits_table())
    if ROLES_START in text:
        text = _replace_block(text, ROLES_START, ROLES_END, roles_table())
    return text


if __name__ == "__main__":
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    for page in PAGES:
        (root / page).write_text(render_readme((root / page).read_text()))
    for module, text in client_modules().items():
        (root / module).write_text(text)
