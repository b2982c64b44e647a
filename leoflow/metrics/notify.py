"""Prometheus metrics of webhook notifications (the leader's deliverer)."""

from __future__ import annotations

from prometheus_client import Counter

NOTIFICATION_ATTEMPTS = Counter(
    "leoflow_notification_attempts_total",
    "Webhook delivery attempts by this replica, by `result` (`delivered`, `retrying`, `failed`: given up).",
    ("result",))
