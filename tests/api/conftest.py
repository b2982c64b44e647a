"""Fixtures for API tests: the app on a fresh migrated database, with a read and an admin token."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.settings import Settings, load_settings
from tests.api.live import client_for

READ_TOKEN = "read-token-0123456789"
ADMIN_TOKEN = "admin-token-0123456789"
TOKENS = f"reader:read:{READ_TOKEN},boss:admin:{ADMIN_TOKEN}"
READ = {"Authorization": f"Bearer {READ_TOKEN}"}
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


def api_settings(database_url: str, **extra: str) -> Settings:
    return load_settings({
        "LEOFLOW_DATABASE_URL": database_url,
        "LEOFLOW_NODE_ID": "api-test",
        "LEOFLOW_LOG_FORMAT": "text",
        "LEOFLOW_API_TOKENS": TOKENS,
        "LEOFLOW_DB_POOL_SIZE": "4",
        **extra,
    })


@pytest.fixture
def api_client(database_url: str) -> Iterator[httpx.Client]:
    with client_for(create_app(api_settings(database_url))) as client:
        yield client


def spec(dag_id: str = "etl", **changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "dag_id": dag_id,
        "schedule": None,
        "tasks": [
            {"id": "extract", "image": "python:3.12-slim", "command": ["true"]},
            {"id": "load", "image": "python:3.12-slim", "command": ["true"], "depends_on": ["extract"]},
        ],
    }
    doc.update(changes)
    return doc
