"""A dataset event as an outside system reports it (``POST /api/v2/datasets/events``, ``leoflow datasets event``).

The body is ``{uri, extra}``, or the list form ``{events: [{uri, extra}, …]}`` (1 to
:data:`~leoflow.model.limits.DATASET_EVENT_BATCH` events, recorded all or none; a problem names
``events[i].uri``). Each event: the URI follows the spec's rules (:func:`~leoflow.model.spec.datasets.dataset_uri`),
``extra`` is an optional JSON object held to :data:`~leoflow.model.limits.DATASET_EXTRA` (plain JSON, no NUL:
it is stored as ``jsonb`` and handed to the runs it triggers). Every problem names its field, so the API
answers 422 and the CLI prints one line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_size, type_name
from leoflow.model.spec.datasets import dataset_uri

_FIELDS = ("uri", "extra")


@dataclass(frozen=True)
class DatasetEventRequest:
    uri: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def parse_event_request(body: object, where: str = "") -> DatasetEventRequest:
    """``{uri, extra}`` checked; raises ValidationFailed naming the field (prefixed by ``where``)."""
    if not isinstance(body, dict):
        raise ValidationFailed(where.rstrip(".") or "body",
                               f"must be an object with uri (and extra), got {type_name(body)}")
    unknown = [k for k in body if k not in _FIELDS]
    if unknown:
        raise ValidationFailed(where + str(unknown[0])[:100], "unknown field (a dataset event takes uri and extra)")
    if "uri" not in body:
        raise ValidationFailed(where + "uri", "is required")
    uri = dataset_uri(body["uri"], where + "uri")
    extra = body.get("extra")
    if extra is None:
        return DatasetEventRequest(uri)
    if not isinstance(extra, dict):
        raise ValidationFailed(where + "extra", f"must be a JSON object, got {type_name(extra)}")
    check_size(extra, where + "extra", limits.DATASET_EXTRA, plain=True)
    return DatasetEventRequest(uri, extra)


def is_list_form(body: object) -> bool:
    """Whether ``body`` is the list form (``{events: […]}``) rather than one event."""
    return isinstance(body, dict) and "events" in body


def parse_event_requests(body: object) -> list[DatasetEventRequest]:
    """``{events: [{uri, extra}, …]}`` checked whole (one bad event refuses the request, naming
    ``events[i].…``): the list is recorded in one transaction, so it is kept all or none."""
    assert isinstance(body, dict)
    unknown = [k for k in body if k != "events"]
    if unknown:
        raise ValidationFailed(str(unknown[0])[:100], "unknown field (the list form takes only events)")
    events = body["events"]
    if not isinstance(events, list):
        raise ValidationFailed("events", f"must be a list of events, got {type_name(events)}")
    bound = limits.DATASET_EVENT_BATCH
    if not bound.minimum <= len(events) <= bound.maximum:
        raise ValidationFailed("events", f"{len(events)} events: {bound.rule} per request")
    return [parse_event_request(event, f"events[{i}].") for i, event in enumerate(events)]
