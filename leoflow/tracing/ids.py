"""Deterministic trace and span ids: every replica, every leader, computes the same ones.

Why: a run outlives the leader that started it (a failover, a rolling deploy), and its tries run
in pods or processes that outlive their leader too. A span id kept in memory is lost with the
process that made it, so the run's spans would land in several traces (Airflow's users report
exactly this: spans lost or split when the scheduler restarts). Instead each id is a hash of what
names the thing in the database, so whichever process emits a span knows its trace and its parent
without asking anyone:

- a run's trace id: SHA-256 of (``dag_id``, ``run_id``), first 16 bytes;
- the run span's id: SHA-256 of the same with another prefix, first 8 bytes;
- a try's span id: SHA-256 of (``dag_id``, ``run_id``, ``task_id``, map index, try number).

Consequences (ADR 0021): a run deleted and triggered again under the same run id lands in the
old trace (two clusters of spans, years apart at worst); ids are not secret (anyone who knows a
run's name can compute them), which W3C trace context never promised either.
"""

from __future__ import annotations

import hashlib

from leoflow.model.tries import TryKey

#: W3C ``trace-flags``: sampled.
SAMPLED = 0x01


def _digest(kind: str, *parts: str) -> bytes:
    # The unit separator cannot occur in a DAG, run or task id (they are checked names), so
    # ("a", "bc") and ("ab", "c") never hash alike.
    return hashlib.sha256("\x1f".join((kind, *parts)).encode()).digest()


def _nonzero(value: int) -> int:
    return value or 1  # an all-zero id is invalid in W3C trace context (odds 2**-64; still handled)


def run_trace_id(dag_id: str, run_id: str) -> int:
    """The 128-bit trace id every span of the run carries."""
    return _nonzero(int.from_bytes(_digest("leoflow.trace", dag_id, run_id)[:16], "big"))


def run_span_id(dag_id: str, run_id: str) -> int:
    """The run span's 64-bit id: the parent of its tries' spans and of API requests about it."""
    return _nonzero(int.from_bytes(_digest("leoflow.run", dag_id, run_id)[:8], "big"))


def try_span_id(key: TryKey) -> int:
    """A try's span id: the parent of its pod creation, log shipping and the task's own spans.

    The map index and try number, not the mapped instance's row id: the executor that reports
    and the leader that queued may build the key from different rows' views.
    """
    return _nonzero(int.from_bytes(
        _digest("leoflow.try", key.dag_id, key.run_id, key.task_id, str(key.map_index), str(key.try_number))[:8],
        "big"))


def traceparent(trace_id: int, span_id: int, flags: int = SAMPLED) -> str:
    """The W3C ``traceparent`` header value (version 00)."""
    return f"00-{trace_id:032x}-{span_id:016x}-{flags:02x}"


def parse_traceparent(value: str) -> tuple[int, int, int] | None:
    """``(trace_id, span_id, flags)`` of a W3C ``traceparent``; None when it is not one (ignored)."""
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff" or len(parts[1]) != 32 or len(parts[2]) != 16 \
            or len(parts[3]) != 2 or (parts[0] == "00" and len(parts) != 4):
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
        int(parts[0], 16)
    except ValueError:
        return None
    if trace_id == 0 or span_id == 0:
        return None
    return trace_id, span_id, flags
