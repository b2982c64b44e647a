"""The API fixtures of tests/api, for the day-2 tests."""

from tests.api.conftest import api_client

__all__ = ["api_client"]
