"""The webhook deliverer: sends the outbox's due notifications, at least once, with backoff.

A leader service. Each round records the outcomes of the deliveries that finished since the
last one and claims as many due rows as there is room for (one short fenced transaction each,
see :mod:`leoflow.db.stores.notifications`); each claimed row is posted by a task of its own with
no transaction open (:mod:`leoflow.notify.transport`). A round never waits for a delivery, so a
slow receiver delays only its own notifications: at most :attr:`WebhookDeliverer.concurrency`
posts run at once, at most :attr:`~WebhookDeliverer.per_destination` of them to one
``scheme://host:port``; a row whose destination is already that busy is handed back unsent
(its attempt not counted) and claimed again a little later.

A delivery that fails (no answer within the transport's total deadline, a non-2xx status, a
secret that cannot be read) is retried after ``LEOFLOW_NOTIFY_RETRY_DELAY`` seconds, doubled per
attempt up to :data:`MAX_RETRY_DELAY`, until 24 hours after it was queued; then it is marked
``failed`` (``leoflow notifications retry`` queues it again). A destination the operator's
allow-list refuses (``LEOFLOW_NOTIFY_ALLOWED_HOSTS``), or a header secret not bound to the
rule's host, fails at once and for good: retrying cannot change the answer. What is stored and
shown of a failure is a fixed reason and the status code, never what the receiver said.

What a receiver gets: ``POST`` of the JSON payload (:func:`leoflow.model.spec.notify.payload`) with
``Content-Type: application/json``, ``X-Leoflow-Event``, ``X-Leoflow-Delivery`` (the outbox id:
the same for every attempt, so a receiver can drop a duplicate), ``X-Leoflow-Signature-256:
sha256=<hex HMAC of the body>`` when the rule has a ``secret``, and the ``header_from_env``
header when it has one and the header may go to that host
(:func:`leoflow.model.webhook_hosts.header_may_go_to`).

Secrets stay secret: the default webhook's URL (``LEOFLOW_NOTIFY_WEBHOOK``), signing keys and
header values are read when sending and never logged, stored or put in an error message. If
leadership ends mid-delivery, the in-flight posts are cancelled and their leases expire: the
next leader sends them again (a receiver may see a delivery twice).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from leoflow import __version__
from leoflow.aiotasks import cancel_and_wait
from leoflow.db.stores import notifications as notification_store
from leoflow.db.stores.notifications import Claimed, Outcome
from leoflow.leadership import LeaderContext, run_periodically
from leoflow.metrics.notify import NOTIFICATION_ATTEMPTS
from leoflow.model.spec.notify import HEADER_ENV_PREFIX
from leoflow.model.webhook_hosts import DestinationPolicy, header_may_go_to, parse_allowed_hosts, parse_host_patterns
from leoflow.notify.transport import (
    MAX_RESPONSE_BYTES,
    REQUEST_DEADLINE,
    Courier,
    DeliveryFailed,
    destination_of,
    host_of,
)
from leoflow.settings import NotifySettings

log = logging.getLogger(__name__)

#: A claim's lease: longer than a POST can take (REQUEST_DEADLINE), so a live leader never
#: sends a row twice.
LEASE = timedelta(seconds=60)
#: Longest pause between two attempts of one notification.
MAX_RETRY_DELAY = 600.0
#: Largest secret file read (a signing key is tens of bytes).
MAX_SECRET_BYTES = 4096
#: Prefix of the variables binding a header value to its hosts (``LEOFLOW_NOTIFY_HOSTS_<NAME>``).
HEADER_HOSTS_PREFIX = "LEOFLOW_NOTIFY_HOSTS_"


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    headers: dict[str, str]


def destination_policy(settings: NotifySettings) -> DestinationPolicy:
    """The operator's allow-list, refusing the cluster's API service address too."""
    return parse_allowed_hosts(settings.allowed_hosts).with_refused(*settings.refused_addresses)


def build_request(row: Claimed, settings: NotifySettings) -> Request:
    """The HTTP request for one outbox row, with its secrets resolved now."""
    body = json.dumps(row.payload, separators=(",", ":"), ensure_ascii=False).encode()
    headers = {"Content-Type": "application/json", "User-Agent": f"leoflow/{__version__}",
               "X-Leoflow-Event": row.event, "X-Leoflow-Delivery": str(row.id)}
    if row.target == "default":
        if not settings.webhook:
            raise DeliveryFailed("LEOFLOW_NOTIFY_WEBHOOK is not set on the leader")
        return Request(settings.webhook, body, headers)
    hook = row.webhook
    url = str(hook["url"])
    secret = hook.get("secret")
    if secret:
        key = read_secret(settings.secrets_dir, secret["name"], secret["key"])
        headers["X-Leoflow-Signature-256"] = "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
    from_env = hook.get("header_from_env")
    if from_env:
        env = str(from_env["env"])
        value = settings.header_value(env)
        if value is None:
            raise DeliveryFailed(f"{env} is not set on the leader")
        binding_name = HEADER_HOSTS_PREFIX + env.removeprefix(HEADER_ENV_PREFIX)
        binding = dict(settings.header_hosts).get(binding_name)
        if not header_may_go_to(host_of(url), parse_host_patterns(binding) if binding else None,
                                host_of(settings.webhook) if settings.webhook else None):
            raise DeliveryFailed(f"{env} may not be sent to this host (bind it with {binding_name})",
                                 permanent=True)
        headers[from_env["header"]] = value
    return Request(url, body, headers)


def read_secret(directory: Path, name: str, key: str) -> bytes:
    """``<directory>/<name>/<key>`` (names were validated: no path can escape the directory)."""
    path = directory / name / key
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_SECRET_BYTES + 1)
    except OSError as exc:
        raise DeliveryFailed(f"secret {name}/{key} cannot be read under {directory} ({exc.strerror})") from None
    if len(data) > MAX_SECRET_BYTES:
        raise DeliveryFailed(f"secret {name}/{key} is larger than {MAX_SECRET_BYTES} bytes")
    return data.strip()


def next_attempt(row: Claimed, now: datetime, retry_delay: float) -> datetime | None:
    """When to try again after a failed attempt, or None to give up."""
    delay = min(MAX_RETRY_DELAY, retry_delay * 2 ** min(row.attempts - 1, 30))
    at = now + timedelta(seconds=delay)
    return None if at > row.give_up_at else at


@dataclass
class InFlight:
    """The posts under way: their tasks, how many per destination, the outcomes not yet recorded."""

    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    per_destination: dict[str, int] = field(default_factory=dict)
    finished: list[Outcome] = field(default_factory=list)

    def take_finished(self) -> list[Outcome]:
        done, self.finished = self.finished, []
        return done


class WebhookDeliverer:
    """LeaderService: see the module docstring."""

    name = "webhook-deliverer"

    def __init__(self, *, batch: int = 20, concurrency: int = 16, per_destination: int = 2, interval: float = 1.0,
                 request_deadline: float = REQUEST_DEADLINE, max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.batch = batch
        self.concurrency = concurrency
        self.per_destination = per_destination
        self.interval = interval
        self.request_deadline = request_deadline
        self.max_response_bytes = max_response_bytes

    async def run(self, ctx: LeaderContext) -> None:
        policy = destination_policy(ctx.settings.notify)
        flight = InFlight()
        async with Courier(policy, deadline=self.request_deadline, max_response_bytes=self.max_response_bytes,
                           max_connections=self.concurrency) as courier:
            async def step(ctx: LeaderContext) -> bool:
                return await self.deliver_once(ctx, courier, flight)
            try:
                await run_periodically(ctx, self.name, step, interval=self.interval)
            finally:
                await cancel_and_wait(flight.tasks)

    async def deliver_once(self, ctx: LeaderContext, courier: Courier, flight: InFlight) -> bool:
        """Record what finished, start what is due and has room; True when more may be due."""
        settings = ctx.settings.notify
        outcomes = flight.take_finished()
        room = self.concurrency - len(flight.tasks)
        claimed: list[Claimed] = []
        now = ctx.clock.now()
        try:
            async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
                await notification_store.record_outcomes(conn, outcomes, now)
                if room > 0:
                    claimed = await notification_store.claim_due(conn, now, now + LEASE, min(self.batch, room))
        except BaseException:
            flight.finished[:0] = outcomes  # recorded next round (or, fenced out, their leases expire)
            raise
        if not claimed:
            return False
        immediate: list[Outcome] = []
        deferred: list[int] = []
        for row in claimed:
            try:
                request = build_request(row, settings)
            except DeliveryFailed as problem:
                immediate.append(self._failed(ctx, row, None, str(problem), problem.permanent))
                continue
            except Exception as exc:  # boundary: one malformed row fails its attempt, never the batch
                log.exception("notification could not be built", extra={"notification_id": row.id})
                immediate.append(self._failed(ctx, row, None, f"internal error: {type(exc).__name__}", False))
                continue
            try:
                destination = destination_of(request.url)
            except Exception:  # an unparsable URL: the courier's own refusal says it
                destination = ""
            if flight.per_destination.get(destination, 0) >= self.per_destination:
                deferred.append(row.id)
                continue
            self._start(ctx, courier, flight, row, request, destination)
        if immediate or deferred:
            later = ctx.clock.now() + timedelta(seconds=max(0.5, self.request_deadline / 2))
            async with ctx.db.fenced(ctx.cluster, ctx.term) as conn:
                await notification_store.record_outcomes(conn, immediate, ctx.clock.now())
                await notification_store.release_claims(conn, deferred, later)
        return len(claimed) == min(self.batch, room) and len(deferred) < len(claimed)

    def _start(self, ctx: LeaderContext, courier: Courier, flight: InFlight, row: Claimed, request: Request,
               destination: str) -> None:
        flight.per_destination[destination] = flight.per_destination.get(destination, 0) + 1

        async def deliver() -> None:
            try:
                outcome = await self._send(ctx, courier, row, request)
                flight.finished.append(outcome)  # the list after the await: take_finished swaps it
            finally:
                left = flight.per_destination.get(destination, 1) - 1
                if left > 0:
                    flight.per_destination[destination] = left
                else:
                    flight.per_destination.pop(destination, None)

        task = asyncio.create_task(deliver(), name=f"notification-{row.id}")
        flight.tasks.add(task)
        task.add_done_callback(flight.tasks.discard)

    async def _send(self, ctx: LeaderContext, courier: Courier, row: Claimed, request: Request) -> Outcome:
        status: int | None = None
        try:
            answer = await courier.post(request.url, request.body, request.headers)
            status = answer.status
            if 200 <= status < 300:
                NOTIFICATION_ATTEMPTS.labels("delivered").inc()
                return Outcome(row.id, delivered=True, status=status, error=None, next_attempt_at=None)
            return self._failed(ctx, row, status, f"HTTP {status}", False)
        except DeliveryFailed as problem:
            return self._failed(ctx, row, status, str(problem), problem.permanent)
        except Exception as exc:  # boundary: one delivery's bug fails its attempt, never the service
            log.exception("notification could not be sent", extra={"notification_id": row.id})
            return self._failed(ctx, row, status, f"internal error: {type(exc).__name__}", False)

    def _failed(self, ctx: LeaderContext, row: Claimed, status: int | None, error: str, permanent: bool) -> Outcome:
        retry_at = None if permanent else next_attempt(row, ctx.clock.now(), ctx.settings.notify.retry_delay)
        NOTIFICATION_ATTEMPTS.labels("retrying" if retry_at else "failed").inc()
        log.warning("notification not delivered" + ("; will retry" if retry_at else "; giving up"), extra={
            "notification_id": row.id, "dag_id": row.dag_id, "event": row.event, "target": row.target,
            "attempt": row.attempts, "status": status, "error": error})
        return Outcome(row.id, delivered=False, status=status, error=error, next_attempt_at=retry_at)
