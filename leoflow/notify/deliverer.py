"""The webhook deliverer: sends the outbox's due notifications, at least once, with backoff.

A leader service. Each round claims a batch of due rows with a lease (one short fenced
transaction), posts them concurrently with no transaction open, and records every outcome (a
second short fenced transaction) — see :mod:`leoflow.db.notification_store`. A delivery that
fails (no answer in :data:`REQUEST_TIMEOUT` seconds, a non-2xx status, a secret that cannot be
read) is retried after ``LEOFLOW_NOTIFY_RETRY_DELAY`` seconds, doubled per attempt up to
:data:`MAX_RETRY_DELAY`, until 24 hours after it was queued; then it is marked ``failed``
(``leoflow notifications retry`` queues it again). Redirects are not followed: a webhook
answers where it was configured.

What a receiver gets: ``POST`` of the JSON payload (:func:`leoflow.model.notify.payload`) with
``Content-Type: application/json``, ``X-Leoflow-Event``, ``X-Leoflow-Delivery`` (the outbox id:
the same for every attempt, so a receiver can drop a duplicate), ``X-Leoflow-Signature-256:
sha256=<hex HMAC of the body>`` when the rule has a ``secret``, and the ``header_from_env``
header when it has one.

Secrets stay secret: the default webhook's URL (``LEOFLOW_NOTIFY_WEBHOOK``), signing keys and
header values are read when sending and never logged, stored or put in an error message.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import httpx

from leoflow import __version__
from leoflow.db import notification_store
from leoflow.db.notification_store import Claimed, Outcome
from leoflow.leadership import LeaderContext, run_periodically
from leoflow.metrics.notify import NOTIFICATION_ATTEMPTS
from leoflow.settings import NotifySettings

log = logging.getLogger(__name__)

#: Seconds one POST may take (connect + answer).
REQUEST_TIMEOUT = 10.0
#: A claim's lease: longer than a POST can take, so a live leader never sends a row twice.
LEASE = timedelta(seconds=60)
#: Longest pause between two attempts of one notification.
MAX_RETRY_DELAY = 600.0
#: Largest secret file read (a signing key is tens of bytes).
MAX_SECRET_BYTES = 4096


class DeliveryProblem(Exception):
    """Why one attempt could not be made or failed; the message is safe to store and show."""


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str]


def build_request(row: Claimed, settings: NotifySettings) -> Request:
    """The HTTP request for one outbox row, with its secrets resolved now."""
    body = json.dumps(row.payload, separators=(",", ":"), ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "User-Agent": f"leoflow/{__version__}",
               "X-Leoflow-Event": row.event, "X-Leoflow-Delivery": str(row.id)}
    if row.target == "default":
        if not settings.webhook:
            raise DeliveryProblem("LEOFLOW_NOTIFY_WEBHOOK is not set on the leader")
        return Request(settings.webhook, body, headers)
    hook = row.webhook
    secret = hook.get("secret")
    if secret:
        key = read_secret(settings.secrets_dir, secret["name"], secret["key"])
        headers["X-Leoflow-Signature-256"] = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    from_env = hook.get("header_from_env")
    if from_env:
        value = settings.header_value(from_env["env"])
        if value is None:
            raise DeliveryProblem(f"{from_env['env']} is not set on the leader")
        headers[from_env["header"]] = value
    return Request(str(hook["url"]), body, headers)


def read_secret(directory: Path, name: str, key: str) -> bytes:
    """``<directory>/<name>/<key>`` (names were validated: no path can escape the directory)."""
    path = directory / name / key
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise DeliveryProblem(f"secret {name}/{key} cannot be read under {directory} ({exc.strerror})") from None
    if len(data) > MAX_SECRET_BYTES:
        raise DeliveryProblem(f"secret {name}/{key} is larger than {MAX_SECRET_BYTES} bytes")
    return data.strip()


def next_attempt(row: Claimed, now: datetime, retry_delay: float) -> datetime | None:
    """When to try again after a failed attempt, or None to give up."""
    delay = min(MAX_RETRY_DELAY, retry_delay * 2 ** min(row.attempts - 1, 30))
    at = now + timedelta(seconds=delay)
    return None if at > row.give_up_at else at


class WebhookDeliverer:
    """LeaderService: see the module docstring."""

    name = "webhook-deliverer"

    def __init__(self, *, batch: int = 20, concurrency: int = 8, interval: float = 1.0) -> None:
        self.batch = batch
        self.concurrency = concurrency
        self.interval = interval

    async def run(self, ctx: LeaderContext) -> None:
        async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT, follow_redirects=False) as client:
            async def step(ctx: LeaderContext) -> bool:
                return await self.deliver_once(ctx, client)
            await run_periodically(ctx, self.name, step, interval=self.interval)

    async def deliver_once(self, ctx: LeaderContext, client: httpx.AsyncClient) -> bool:
        """Send one batch of due notifications; True when more may be due."""
        now = ctx.clock.now()
        async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
            claimed = await notification_store.claim_due(conn, now, now + LEASE, self.batch)
        if not claimed:
            return False
        gate = asyncio.Semaphore(self.concurrency)

        async def attempt(row: Claimed) -> Outcome:
            async with gate:
                return await self._send(ctx, client, row)

        outcomes = await asyncio.gather(*(attempt(row) for row in claimed))
        async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
            await notification_store.record_outcomes(conn, outcomes, ctx.clock.now())
        return len(claimed) == self.batch

    async def _send(self, ctx: LeaderContext, client: httpx.AsyncClient, row: Claimed) -> Outcome:
        settings = ctx.settings.notify
        status: int | None = None
        try:
            request = build_request(row, settings)
            try:
                answer = await client.post(request.url, content=request.body, headers=request.headers)
            except httpx.HTTPError as exc:
                # The exception's text may name the URL (a secret for the default webhook).
                raise DeliveryProblem(f"no answer: {type(exc).__name__}") from None
            status = answer.status_code
            if 200 <= status < 300:
                NOTIFICATION_ATTEMPTS.labels("delivered").inc()
                return Outcome(row.id, delivered=True, status=status, error=None, next_attempt_at=None)
            raise DeliveryProblem(f"HTTP {status}: {answer.text.strip()[:200]}")
        except DeliveryProblem as problem:
            error = str(problem)
        except Exception as exc:  # boundary: one malformed row fails its attempt, never the batch
            log.exception("notification could not be sent", extra={"notification_id": row.id})
            error = f"internal error: {type(exc).__name__}"
        retry_at = next_attempt(row, ctx.clock.now(), settings.retry_delay)
        NOTIFICATION_ATTEMPTS.labels("retrying" if retry_at else "failed").inc()
        log.warning("notification not delivered" + ("; will retry" if retry_at else "; giving up"), extra={
            "notification_id": row.id, "dag_id": row.dag_id, "event": row.event, "target": row.target,
            "attempt": row.attempts, "status": status, "error": error})
        return Outcome(row.id, delivered=False, status=status, error=error, next_attempt_at=retry_at)
