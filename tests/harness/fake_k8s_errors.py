"""Errors of the fake Kubernetes API server, rendered as real ``Status`` objects."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An API failure, rendered as a ``Status`` object with this code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: dict[str, Any] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = details or {}
        self.headers = headers or {}

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                "message": self.message, "reason": self.reason, "code": self.code}
        if self.details:
            body["details"] = self.details
        return body


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)
