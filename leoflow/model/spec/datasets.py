"""Datasets in a DAG spec: what a task ``produces:`` and the ``schedule: {datasets: …}`` that waits on them.

A dataset is a URI string (``s3://bucket/orders``, ``postgres://warehouse/orders``, any scheme or
none). Leoflow never reads it, only compares it byte for byte, so the rules are those of an
identifier a user types into YAML: not empty, at most :data:`~leoflow.model.limits.DATASET_URI`
characters, no control characters (a newline or NUL in a URI is a paste accident, and NUL cannot
be stored), no duplicates in one list. Two URIs differing only in a trailing slash are two datasets,
as in Airflow; we do not normalise, because normalising what we cannot read would merge datasets
their owners consider distinct.

A DAG's dataset schedule is ``{datasets: {all: [URI…]}}`` (a run once every URI has had an event
since the DAG's last dataset-triggered run) or ``{datasets: {any: [URI…]}}`` (a run per batch of
events of any of them). Airflow users asked for ``&``/``|`` expressions; two flat forms cover what
the issue asked for and keep the queue's rule one line of SQL (nested expressions are left for
later). The canonical form keeps the mapping, so a cron DAG's hash is what it was.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from leoflow.errors import ValidationFailed
from leoflow.model import limits
from leoflow.model.bounds import check_count, shown, type_name

DatasetMode = Literal["all", "any"]
_MODES: tuple[DatasetMode, ...] = ("all", "any")


def dataset_uri(value: object, path: str) -> str:
    """A dataset URI as written (never normalised): a string of 1 to 1,000 characters, no control characters."""
    if not isinstance(value, str):
        raise ValidationFailed(path, f"must be a dataset URI (a string), got {type_name(value)}")
    if not value:
        raise ValidationFailed(path, "must not be empty")
    if len(value) > limits.DATASET_URI.maximum:
        raise ValidationFailed(path, f"must be at most {limits.DATASET_URI.maximum:,} characters, got {len(value):,}")
    for i, char in enumerate(value):
        if unicodedata.category(char) in ("Cc", "Cs"):
            raise ValidationFailed(path, f"must not contain control characters ({char!r} at position {i})")
    return value


def uri_list(value: object, path: str, limit: limits.Count) -> tuple[str, ...]:
    """A list of distinct dataset URIs held to ``limit``."""
    if not isinstance(value, list):
        raise ValidationFailed(path, f"must be a list of dataset URIs, got {type_name(value)}")
    check_count(len(value), path, limit)
    seen: dict[str, int] = {}
    for i, item in enumerate(value):
        uri = dataset_uri(item, f"{path}[{i}]")
        if uri in seen:
            raise ValidationFailed(f"{path}[{i}]", f"duplicate URI {shown(uri)} (also {path}[{seen[uri]}])")
        seen[uri] = i
    return tuple(seen)


def parse_produces(value: object, path: str) -> tuple[str, ...]:
    """``tasks[].produces``: the URIs a success of the task records an event for (absent: none)."""
    if value is None:
        return ()
    return uri_list(value, path, limits.PRODUCES)


@dataclass(frozen=True)
class DatasetCondition:
    """When a dataset-scheduled DAG runs: every URI (``all``) or any URI (``any``) has a queued event."""

    mode: DatasetMode
    uris: tuple[str, ...]

    def met_by(self, queued: Collection[str]) -> bool:
        """Is the condition met by events queued for these URIs (other URIs are ignored)?"""
        if self.mode == "all":
            return all(uri in queued for uri in self.uris)
        return any(uri in queued for uri in self.uris)

    def canonical(self) -> dict[str, Any]:
        return {"datasets": {self.mode: list(self.uris)}}


def is_dataset_schedule(value: object) -> bool:
    """Is ``schedule:`` written as a mapping (a dataset schedule, or a mistake it will name)?"""
    return isinstance(value, dict)


def parse_dataset_schedule(value: object, path: str = "schedule") -> DatasetCondition:
    """``schedule: {datasets: {all|any: [URI…]}}``; every problem names the field."""
    if not isinstance(value, dict):
        raise ValidationFailed(path, f"must be a cron expression, a preset, null or {{datasets: …}}, "
                               f"got {type_name(value)}")
    unknown = [k for k in value if k != "datasets"]
    if unknown:
        raise ValidationFailed(f"{path}.{unknown[0]}", "unknown field (a schedule mapping takes datasets only)")
    datasets = value.get("datasets")
    if not isinstance(datasets, dict):
        raise ValidationFailed(f"{path}.datasets", f"must be {{all: [URI…]}} or {{any: [URI…]}}, "
                               f"got {type_name(datasets)}")
    modes = [k for k in datasets if k in _MODES]
    others = [k for k in datasets if k not in _MODES]
    if others:
        raise ValidationFailed(f"{path}.datasets.{others[0]}", "unknown field (use all or any)")
    if len(modes) != 1:
        raise ValidationFailed(f"{path}.datasets", "must hold exactly one of all or any")
    mode: DatasetMode = "all" if modes[0] == "all" else "any"
    return DatasetCondition(mode, uri_list(datasets[mode], f"{path}.datasets.{mode}", limits.DATASET_CONDITION))


def dataset_run_id(now: datetime, last_event_id: int) -> str:
    """``dataset__<trigger time ISO>_<newest event id consumed>``: unique per DAG, because each event
    is consumed by at most one run of it, whatever two runs' clocks say."""
    return f"dataset__{now.astimezone(UTC).isoformat()}_{last_event_id}"
