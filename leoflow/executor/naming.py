"""Deterministic names for task tries: the idempotency key of every executor.

The name of a try's pod (Kubernetes) or process (local) is a pure function of
``(cluster, dag, run, task, try)``: a readable DNS-1123 prefix from the DAG and task ids plus a
64-bit hash of all five parts. Submitting the same try twice, from the same leader or from a
new one after failover, therefore targets the same object, and the second create is refused by
the API server (409) or the claim row instead of starting a duplicate. See
``docs/adr/0004-idempotent-pod-names.md``.

No part of this module talks to anything; changing its output is a breaking change (a leader
running new code would not recognise pods created by old code).
"""

from __future__ import annotations

import hashlib
import json
import re

from leoflow.model.tries import TryKey

#: Longest pod name we produce (a DNS-1123 label, so it can also be a hostname).
MAX_NAME = 63
#: Hex digits of hash in names and hashed label values: 16 hex digits = 64 bits.
HASH_HEX = 16

_INVALID_NAME_CHARS = re.compile(r"[^a-z0-9-]+")
_DASHES = re.compile(r"-{2,}")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_INVALID_LABEL_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


def _digest(*parts: object) -> str:
    # JSON keeps the parts unambiguous: ("a-b", "c") and ("a", "b-c") hash differently.
    encoded = json.dumps([str(p) for p in parts], separators=(",", ":")).encode()
    return hashlib.sha256(encoded).hexdigest()[:HASH_HEX]


def _dns_prefix(text: str, limit: int) -> str:
    prefix = _DASHES.sub("-", _INVALID_NAME_CHARS.sub("-", text.lower()))
    return prefix[:limit].strip("-") or "task"


def try_name(cluster: str, key: TryKey) -> str:
    """The pod/process name of one try: ``<dag>-<task>-<64-bit hash>``, at most 63 characters.

    A mapped instance's try (ADR 0014, decision 3) is ``<dag>-<task>-<index>-<hash>``: its index and
    its task-instance row id join the hash, so an instance that a re-expansion re-created (new row,
    try numbers from 1 again) never gets the name of an old instance's pod. An unmapped try's name
    is exactly what it always was.
    """
    if key.map_index < 0:
        digest = _digest(cluster, key.dag_id, key.run_id, key.task_id, key.try_number)
        prefix = _dns_prefix(f"{key.dag_id}-{key.task_id}", MAX_NAME - HASH_HEX - 1)
        return f"{prefix}-{digest}"
    digest = _digest(cluster, key.dag_id, key.run_id, key.task_id, key.try_number, key.map_index, key.instance)
    index = str(key.map_index)
    prefix = _dns_prefix(f"{key.dag_id}-{key.task_id}", MAX_NAME - HASH_HEX - len(index) - 2)
    return f"{prefix}-{index}-{digest}"


def label_value(value: str) -> str:
    """``value`` itself when it is a valid label value, else a readable prefix plus its hash."""
    if len(value) <= 63 and _LABEL_VALUE.match(value):
        return value
    cleaned = _INVALID_LABEL_CHARS.sub("-", value)[: 63 - HASH_HEX - 1].strip("-_.")
    digest = _digest(value)
    return f"{cleaned}-{digest}" if cleaned else digest
