"""What the typed client answers with: the API's JSON objects, readable as attributes and shown as tables.

A :class:`Model` wraps the object the API sent, untouched: ``run.state`` reads ``"state"``,
``run.tasks`` wraps each task instance in its own class (the generated
:mod:`leoflow.client.models` says which field holds which), ``run["state"]`` and
``run.to_dict()`` give the JSON itself, and a field the schema declares but the answer left out
reads as ``None``. A field the API adds later is still there for ``[...]`` and ``to_dict()``
before the client is regenerated: an older client reads a newer server.

Why not dataclasses or pydantic: a dataclass copies every field at construction and the
module costs the CLI ~10 ms to import (its start-up budget is a tenth of a second), pydantic
far more; and neither keeps unknown fields. The classes' annotations are what type checkers and
the docs site read.

In Jupyter, every result renders as an HTML table (:meth:`Model._repr_html_`): an object as
field / value rows, a page or list as one row per item.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

#: Result classes by schema name, filled as :mod:`leoflow.client.models` defines them.
_REGISTRY: dict[str, type[Model]] = {}
#: At most this many rows in a notebook's table of a list (the rest: "… N more").
HTML_ROWS = 200


def model_class(schema: str) -> type[Model]:
    """The result class of a named schema (a plain :class:`Model` for one this client does not know).

    The clients import :mod:`leoflow.client.models` (through the generated operations) before
    any answer arrives, so every schema's class is registered by then.
    """
    return _REGISTRY.get(schema, Model)


class Model:
    """One JSON object of the API, read through attributes (see the module docstring)."""

    __slots__ = ("_client", "_data")
    _data: dict[str, Any]
    _client: Any
    _fields: ClassVar[tuple[str, ...]] = ()
    _nested: ClassVar[dict[str, tuple[str, bool]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _REGISTRY[cls.__name__] = cls

    def __init__(self, data: Mapping[str, Any], client: Any = None) -> None:
        object.__setattr__(self, "_data", dict(data))
        object.__setattr__(self, "_client", client)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            value = self._data[name]
        except KeyError:
            if name in self._fields:
                return None
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None
        nested = self._nested.get(name)
        if nested is None or value is None:
            return value
        cls = model_class(nested[0])
        if nested[1]:
            return [cls(item, self._client) if isinstance(item, Mapping) else item for item in value]
        return cls(value, self._client) if isinstance(value, Mapping) else value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only (it is what the API answered)")

    def __getitem__(self, key: str) -> Any:
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object as the API sent it."""
        return self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Model):
            return type(other) is type(self) and other._data == self._data
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable underneath, as a dict

    def __repr__(self) -> str:
        fields = [f for f in self._data if not isinstance(self._data[f], list | dict)][:6]
        inner = ", ".join(f"{f}={self._data[f]!r}" for f in fields)
        return f"{type(self).__name__}({inner}{', …' if len(fields) < len(self._data) else ''})"

    def _repr_html_(self) -> str:
        """A table for Jupyter: a list's items as rows, or this object's fields as rows."""
        items = self._data.get("items")
        if isinstance(items, list) and set(self._data) <= {"items", "next_cursor"}:
            more = " (more: follow next_cursor, or use the client's iter_… method)" if self._data.get(
                "next_cursor") else ""
            return html_rows(items, caption=f"{type(self).__name__}: {len(items)} items{more}")
        return html_fields(self._data, caption=type(self).__name__)


class RunModel(Model):
    """A run (``Run``, ``RunDetail``): the object the API answered, and a way to wait for its end."""

    __slots__ = ()

    def wait(self, timeout: float | None = None, *, progress: bool | None = None) -> Any:
        """Follow this run until it ends (or ``timeout`` seconds pass) and return it as it ended.

        Uses the API's long poll (one request waits for the next change). ``progress``: draw a
        progress bar of tasks done / total on stderr; by default only when stderr is a terminal
        or the code runs in Jupyter. Raises :class:`~leoflow.client.RunWaitTimeout` at the
        timeout. With :class:`~leoflow.client.AsyncClient`, ``await client.wait_for_run(...)``.
        """
        client = self._client
        if client is None or not hasattr(client, "wait_for_run") or getattr(client, "is_async", False):
            raise TypeError("this run did not come from a Client; use `await client.wait_for_run(dag_id, run_id)` "
                            "with an AsyncClient, or Client().wait_for_run(dag_id, run_id)")
        return client.wait_for_run(self._data["dag_id"], self._data["run_id"], timeout=timeout, progress=progress)


def _cell(value: Any) -> str:
    import html
    import json

    if isinstance(value, dict | list):
        text = json.dumps(value, default=str)
        text = text if len(text) <= 120 else text[:119] + "…"
    else:
        text = "" if value is None else str(value)
    return html.escape(text)


def html_fields(data: Mapping[str, Any], *, caption: str) -> str:
    import html

    left = "style='text-align:left'"
    rows = "".join(f"<tr><th {left}>{html.escape(k)}</th><td {left}>{_cell(v)}</td></tr>" for k, v in data.items())
    return f"<table><caption>{html.escape(caption)}</caption>{rows}</table>"


def html_rows(items: list[Any], *, caption: str) -> str:
    """One row per item; the columns are the fields that are not nested lists or objects."""
    import html

    dicts = [i.to_dict() if isinstance(i, Model) else i for i in items]
    columns: list[str] = []
    for item in dicts:
        if isinstance(item, Mapping):
            columns += [k for k, v in item.items() if k not in columns and not isinstance(v, list | dict)]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_cell(item.get(c))}</td>" for c in columns) + "</tr>"
                   for item in dicts[:HTML_ROWS] if isinstance(item, Mapping))
    if len(dicts) > HTML_ROWS:
        body += f"<tr><td colspan='{len(columns) or 1}'>… {len(dicts) - HTML_ROWS} more</td></tr>"
    return f"<table><caption>{html.escape(caption)}</caption><tr>{head}</tr>{body}</table>"
