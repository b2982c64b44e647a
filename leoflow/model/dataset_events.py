"""A dataset event as an outside system reports it (``POST /api/v2/datasets/events``, ``leoflow datasets event``).

The body is ``{uri, extra}``: the URI follows the spec's rules (:func:`~leoflow.model.spec.datasets.dataset_uri`),
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


def parse_event_request(body: object) -> DatasetEventRequest:
    """``{uri, extra}`` checked; raises ValidationFailed naming the field."""
    if not isinstance(body, dict):
        raise ValidationFailed("body", f"must be an object with uri (and extra), got {type_name(body)}")
    unknown = [k for k in body if k not in _FIELDS]
    if unknown:
        raise ValidationFailed(str(unknown[0])[:100], "unknown field (a dataset event takes uri and extra)")
    if "uri" not in body:
        raise ValidationFailed("uri", "is required")
    uri = dataset_uri(body["uri"], "uri")
    extra = body.get("extra")
    if extra is None:
        return DatasetEventRequest(uri)
    if not isinstance(extra, dict):
        raise ValidationFailed("extra", f"must be a JSON object, got {type_name(extra)}")
    check_size(extra, "extra", limits.DATASET_EXTRA, plain=True)
    return DatasetEventRequest(uri, extra)
