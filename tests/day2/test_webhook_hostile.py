"""Webhooks that cannot be turned on the cluster (issue 44, items 1, 2 and 16's last clause).

A DAG author names the URL, and the leader posts from inside the cluster: the allow-list
(``LEOFLOW_NOTIFY_ALLOWED_HOSTS``) is checked on the addresses actually connected to, header
secrets go only to their hosts, and what a receiver answers is never stored. A receiver that
answers slowly or hugely costs its own notifications a deadline, never anyone else's, and
never the leader's memory. Every receiver here is a real HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import resource
from typing import Any

import httpcore
import pytest

from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.memory import MemoryExecutor
from leoflow.model.webhook_hosts import (
    DestinationPolicy,
    is_public_address,
    parse_allowed_hosts,
    parse_host_patterns,
)
from leoflow.notify.deliverer import WebhookDeliverer
from leoflow.notify.transport import Courier, DeliveryFailed, GuardedBackend
from leoflow.settings import NotifySettings, Settings
from tests.day2.harness import LOOPBACK, WebhookReceiver, leader, wait_for
from tests.harness.hostile_receivers import HugeBody, SlowDrip
from tests.scheduler.harness import apply, fast, rows, trigger


def notifying(settings: Settings, **notify: Any) -> Settings:
    return fast(settings).replace(notify=NotifySettings(**{"retry_delay": 0.05, **notify}))


def failing_dag(dag_id: str, url: str, **webhook: Any) -> dict[str, Any]:
    return {"dag_id": dag_id, "notify": [{"on": ["failure"], "webhook": {"url": url, **webhook}}],
            "tasks": [{"id": "t", "image": "busybox", "command": ["false"]}]}


def always_fails(_: Any) -> Any:
    return ("failed", 1, "exit code 1")


async def notifications(engine: Any, dag_id: str) -> list[Any]:
    return await rows(engine, "SELECT state, attempts, last_status, last_error FROM notifications "
                      "WHERE dag_id = :d ORDER BY id", d=dag_id)


async def ended(engine: Any, dag_id: str, count: int = 1) -> bool:
    got = await rows(engine, "SELECT count(*) FROM notifications WHERE dag_id = :d AND state <> 'pending'", d=dag_id)
    return bool(got[0][0] >= count)


# ------------------------------------------------------------------ the policy, alone

@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "10.0.0.5", "172.16.3.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
    "0.0.0.0", "224.0.0.1", "240.0.0.1", "255.255.255.255", "::1", "::", "fe80::1", "fd00::5", "ff02::1",
    "::ffff:127.0.0.1", "::ffff:10.1.2.3", "64:ff9b::7f00:1", "2002:7f00:1::1"])
def test_internal_addresses_are_not_public(address: str) -> None:
    assert not is_public_address(ipaddress.ip_address(address))
    assert not DestinationPolicy().permits("hooks.example.com", ipaddress.ip_address(address))


def test_the_default_admits_public_addresses_but_not_cluster_names_or_the_api_service() -> None:
    public = ipaddress.ip_address("93.184.216.34")
    policy = parse_allowed_hosts("public").with_refused("93.184.216.99")
    assert policy.permits("hooks.example.com", public)
    assert policy.permits("2606:2800:220:1::1", ipaddress.ip_address("2606:2800:220:1::1"))
    for name in ("localhost", "kubernetes", "kubernetes.default", "leoflow-postgresql", "db.prod.svc",
                 "db.prod.svc.cluster.local", "metadata.google.internal", "x.localhost"):
        assert not policy.permits(name, public), name
    assert not policy.permits("hooks.example.com", ipaddress.ip_address("93.184.216.99"))


def test_operator_patterns_names_domains_and_networks() -> None:
    policy = parse_allowed_hosts("alerts.corp, *.hooks.corp, 10.1.0.0/16, 127.0.0.1")
    assert not policy.public
    assert policy.permits("alerts.corp", ipaddress.ip_address("10.9.9.9"))  # the operator vouches for the name
    assert policy.permits("a.b.hooks.corp", ipaddress.ip_address("192.168.0.1"))
    assert not policy.permits("hooks.corp", ipaddress.ip_address("192.168.0.1"))  # *.x is not x
    assert policy.permits("anything.example", ipaddress.ip_address("10.1.200.3"))
    assert policy.permits("127.0.0.1", ipaddress.ip_address("127.0.0.1"))
    assert not policy.permits("hooks.example.com", ipaddress.ip_address("93.184.216.34"))  # no `public`
    for bad in ("*", "a..b", "*.", "10.0.0.0/33", "ex ample.com", "a/b", "-x.com"):
        with pytest.raises(ValueError):
            parse_allowed_hosts(bad)


class _Recorded(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self.hosts: list[str] = []

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        self.hosts.append(host)
        raise httpcore.ConnectError("recorded")


def test_the_backend_connects_to_the_address_it_checked_never_to_the_name_again() -> None:
    """DNS rebinding: the name is resolved once, every answer checked, and the socket opened to a
    checked address; a second resolution (which could say 127.0.0.1) never happens."""
    inner = _Recorded()
    backend = GuardedBackend(DestinationPolicy(), inner)
    answers = iter([[ipaddress.ip_address("93.184.216.34")], [ipaddress.ip_address("127.0.0.1")]])

    async def resolve(host: str, port: int) -> list[Any]:
        return next(answers)

    backend.resolve = resolve  # type: ignore[method-assign]
    with pytest.raises(httpcore.ConnectError):
        asyncio.run(backend.connect_tcp("rebind.example.com", 80))
    assert inner.hosts == ["93.184.216.34"]


def test_a_name_resolving_to_loopback_is_refused_by_the_courier() -> None:
    """``localhost`` (and any name pointing at 127.0.0.1) is refused on its resolved address."""
    with WebhookReceiver().serving() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]

        async def main() -> None:
            async with Courier(DestinationPolicy(public=True, patterns=parse_host_patterns("localhost.corp"))) as c:
                for url in (f"http://localhost:{port}/hook", f"http://127.0.0.1:{port}/hook",
                            f"http://[::ffff:127.0.0.1]:{port}/hook"):
                    with pytest.raises(DeliveryFailed) as refused:
                        await c.post(url, b"{}", {})
                    assert str(refused.value) == "destination not allowed" and refused.value.permanent
        asyncio.run(main())
        assert receiver.attempts == 0


# ------------------------------------------------------------------ end to end, with a leader

def test_a_webhook_to_loopback_is_refused_unless_allowed(settings: Settings) -> None:
    with WebhookReceiver().serving() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]

        async def main(s: Settings, expect_delivered: bool) -> list[Any]:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, failing_dag("direct", receiver.url))
                await apply(engine, failing_dag("by-name", f"http://localhost:{port}/hook"))
                # Allowed, `localhost` may be admitted too (by its address) or not resolve as an
                # absolute name: only the first round sends to it.
                dags = ("direct",) if expect_delivered else ("direct", "by-name")
                async with leader(s, MemoryExecutor(outcome=always_fails), engine=engine):
                    for dag in dags:
                        await trigger(engine, dag, f"r-{expect_delivered}")
                    done = 2 if expect_delivered else 1  # the second round finds the first's rows
                    for dag in dags:
                        await wait_for(lambda d=dag: ended(engine, d, done), timeout=30)
                return [await notifications(engine, "direct"), await notifications(engine, "by-name")]
            finally:
                await engine.dispose()

        direct, by_name = asyncio.run(main(notifying(settings), False))
        # Refused at once and for good: one attempt, failed, a fixed reason, nothing sent.
        assert direct == [("failed", 1, None, "destination not allowed")]
        assert by_name == [("failed", 1, None, "destination not allowed")]
        assert receiver.attempts == 0

        direct, by_name = asyncio.run(main(notifying(settings, allowed_hosts=LOOPBACK), True))
        assert direct[-1][:3] == ("delivered", 1, 200)
        assert receiver.attempts == 1


def test_what_a_receiver_answers_is_never_stored(settings: Settings) -> None:
    with WebhookReceiver(fail_first=100, fail_status=500).serving() as receiver:
        s = notifying(settings, allowed_hosts=LOOPBACK)

        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, failing_dag("answered", receiver.url))
                async with leader(s, MemoryExecutor(outcome=always_fails), engine=engine):
                    await trigger(engine, "answered", "r1")
                    await wait_for(lambda: receiver.attempts >= 2, timeout=30)
                    await wait_for(lambda: _has_error(engine), timeout=30)
                (state, _attempts, status, error), = await notifications(engine, "answered")
                assert (state, status, error) == ("pending", 500, "HTTP 500")
                everything = json.dumps([list(r) for r in await rows(engine, "SELECT * FROM notifications")],
                                        default=str)
                assert "nope" not in everything  # the receiver's body
            finally:
                await engine.dispose()

        asyncio.run(main())


async def _has_error(engine: Any) -> bool:
    return bool(await rows(engine, "SELECT 1 FROM notifications WHERE last_error IS NOT NULL"))


def test_a_header_secret_goes_only_to_the_hosts_it_is_bound_to(settings: Settings) -> None:
    """Unbound, a header goes only to LEOFLOW_NOTIFY_WEBHOOK's host (here 127.0.0.1), never to a
    URL a DAG names elsewhere (``localhost``); bound, to its hosts."""
    with WebhookReceiver().serving() as receiver:
        port = receiver.url.split(":")[2].split("/")[0]
        s = notifying(settings, allowed_hosts="127.0.0.1,localhost", webhook=receiver.url + "/default",
                      header_values=(("LEOFLOW_NOTIFY_HEADER_FREE", "Bearer free-secret"),
                                     ("LEOFLOW_NOTIFY_HEADER_BOUND", "Bearer bound-secret")),
                      header_hosts=(("LEOFLOW_NOTIFY_HOSTS_BOUND", "localhost"),))
        elsewhere = f"http://localhost:{port}/hook"

        def header(env: str) -> dict[str, Any]:
            return {"header_from_env": {"header": "Authorization", "env": env}}

        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, failing_dag("free-same-host", receiver.url + "/same", **header(
                    "LEOFLOW_NOTIFY_HEADER_FREE")))
                await apply(engine, failing_dag("free-elsewhere", elsewhere + "/stolen", **header(
                    "LEOFLOW_NOTIFY_HEADER_FREE")))
                await apply(engine, failing_dag("bound-elsewhere", elsewhere + "/bound", **header(
                    "LEOFLOW_NOTIFY_HEADER_BOUND")))
                await apply(engine, failing_dag("bound-same-host", receiver.url + "/unbound-host", **header(
                    "LEOFLOW_NOTIFY_HEADER_BOUND")))
                async with leader(s, MemoryExecutor(outcome=always_fails), engine=engine):
                    for dag in ("free-same-host", "free-elsewhere", "bound-elsewhere", "bound-same-host"):
                        await trigger(engine, dag, "r1")
                    for dag in ("free-same-host", "free-elsewhere", "bound-elsewhere", "bound-same-host"):
                        await wait_for(lambda d=dag: ended(engine, d), timeout=30)
                by_path = {d.path: d.headers.get("Authorization") for d in receiver.accepted()}
                assert by_path == {"/hook/same": "Bearer free-secret", "/hook/bound": "Bearer bound-secret"}
                (state, attempts, _s, error), = await notifications(engine, "free-elsewhere")
                assert (state, attempts) == ("failed", 1)
                assert error == "LEOFLOW_NOTIFY_HEADER_FREE may not be sent to this host " \
                                "(bind it with LEOFLOW_NOTIFY_HOSTS_FREE)"
                assert (await notifications(engine, "bound-same-host"))[0][0] == "failed"
            finally:
                await engine.dispose()

        asyncio.run(main())


def test_a_slow_drip_receiver_delays_only_its_own_notifications(settings: Settings) -> None:
    """A byte every second keeps a per-read timeout happy forever; the total deadline cuts it,
    and meanwhile another destination's notification is delivered at once."""
    deadline = 10.0  # the product default: the quick delivery has all of it to arrive while the slow posts drip
    with SlowDrip(every=1.0).serving() as slow, WebhookReceiver().serving() as quick:
        s = notifying(settings, allowed_hosts=LOOPBACK)

        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            deliverer = WebhookDeliverer(interval=0.05, request_deadline=deadline)
            try:
                await apply(engine, failing_dag("slow", slow.url))
                await apply(engine, failing_dag("quick", quick.url))
                async with leader(s, MemoryExecutor(outcome=always_fails), engine=engine, deliverer=deliverer):
                    for i in range(4):
                        await trigger(engine, "slow", f"s{i}")
                    await wait_for(lambda: slow.requests >= 2, timeout=30)  # two posts are dripping now
                    await trigger(engine, "quick", "q1")
                    await wait_for(lambda: quick.accepted(), timeout=30)
                    # Delivered while the slow posts are still in their first attempt.
                    open_attempts = await rows(engine, "SELECT count(*) FROM notifications WHERE dag_id = 'slow' "
                                               "AND last_error IS NULL")
                    assert open_attempts[0][0] == 4
                    await wait_for(lambda: _has_error(engine), timeout=60)
                errors = {(r[2], r[3]) for r in await notifications(engine, "slow") if r[3] is not None}
                assert errors == {(None, "timed out")}  # status unknown: cut before the answer was whole
                await wait_for(lambda: len(slow.held) >= 2, timeout=30)
                assert max(slow.held[:2]) < deadline + 10  # cut near the deadline, not after minutes
            finally:
                await engine.dispose()

        asyncio.run(main())


def test_a_huge_answer_is_read_only_up_to_the_cap(settings: Settings) -> None:
    """A 200 MB 2xx answer: delivered, a few chunks read, the rest never reaches the leader."""
    with HugeBody().serving() as huge:
        s = notifying(settings, allowed_hosts=LOOPBACK)

        async def main() -> None:
            engine = make_async_engine(s.database, pool_size=4)
            try:
                await apply(engine, failing_dag("huge", huge.url))
                async with leader(s, MemoryExecutor(outcome=always_fails), engine=engine):
                    before = _max_rss_mb()
                    for i in range(3):
                        await trigger(engine, "huge", f"h{i}")
                    await wait_for(lambda: ended(engine, "huge", 3), timeout=60)
                    grown = _max_rss_mb() - before
                assert [r[0] for r in await notifications(engine, "huge")] == ["delivered"] * 3
                await wait_for(lambda: len(huge.sent) >= 3, timeout=30)
                # What the kernel's socket buffers took before the leader hung up, not 200 MB.
                assert max(huge.sent) < 32 * 1024 * 1024, huge.sent
                assert grown < 100, f"the process grew {grown:.0f} MB"
            finally:
                await engine.dispose()

        asyncio.run(main())


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ------------------------------------------------------------------ settings

def test_bad_patterns_are_settings_errors_naming_the_variable() -> None:
    from leoflow.errors import SettingsError
    from leoflow.settings import load_settings

    base = {"LEOFLOW_DATABASE_URL": "postgresql://u@h/db"}
    loaded = load_settings({**base, "LEOFLOW_NOTIFY_ALLOWED_HOSTS": "public, *.corp.example, 10.0.0.0/8",
                            "LEOFLOW_NOTIFY_HOSTS_ALERTS": "events.pagerduty.com",
                            "KUBERNETES_SERVICE_HOST": "10.96.0.1"})
    assert loaded.notify.header_hosts == (("LEOFLOW_NOTIFY_HOSTS_ALERTS", "events.pagerduty.com"),)
    assert loaded.notify.refused_addresses == ("10.96.0.1",)
    for variable in ("LEOFLOW_NOTIFY_ALLOWED_HOSTS", "LEOFLOW_NOTIFY_HOSTS_ALERTS"):
        with pytest.raises(SettingsError, match=variable):
            load_settings({**base, variable: "hooks.example.com, not a host"})


def test_user_info_in_a_url_is_sent_as_basic_auth_to_that_host_only() -> None:
    with WebhookReceiver().serving() as receiver:
        url = receiver.url.replace("http://", "http://bot:s3cr%3At@") + "/basic"

        async def main() -> None:
            async with Courier(parse_allowed_hosts("127.0.0.1")) as courier:
                assert (await courier.post(url, b"{}", {})).status == 200
        asyncio.run(main())
        (delivery,) = receiver.accepted()
        assert delivery.headers["Authorization"] == "Basic Ym90OnMzY3I6dA=="  # bot:s3cr:t
        assert delivery.headers["Host"] == url.split("@")[1].split("/")[0]
