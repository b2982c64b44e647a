"""What a failed Kubernetes API call means, as Leoflow errors (raised by :mod:`.kube_client` only).

The official client raises one ``ApiException`` with a status code; callers should not have
to remember which codes are retryable. :func:`.kube_client.translate` maps every failure to one of
these, by meaning:

============================  =====================================  =========
type                          when                                   retryable
============================  =====================================  =========
:class:`ObjectNotFound`       404                                    no
:class:`ObjectAlreadyExists`  409 with reason ``AlreadyExists``      no
:class:`ObjectConflict`       409, any other reason (a race)         yes
:class:`WatchExpired`         410 Gone (resourceVersion too old)     relist
:class:`Throttled`            429 (honour ``retry_after``)           yes
:class:`ApiServerError`       5xx                                    yes
:class:`ApiUnreachable`       no HTTP answer (refused, reset, timeout) yes
:class:`RequestRefused`       any other 4xx (400, 403, 422)          no
:class:`CallNotSent`          never sent: its fenced window closed   yes
============================  =====================================  =========

Every one keeps ``code`` (0 for no answer), ``reason`` (the API's ``Status.reason``),
``message`` and ``retry_after`` for logs and the ``leoflow_pod_api_errors_total{code}`` metric.
"""

from __future__ import annotations

from leoflow.errors import LeoflowError


class KubernetesError(LeoflowError):
    """A Kubernetes API call failed."""

    retryable = False

    def __init__(self, code: int, reason: str, message: str, retry_after: float | None = None) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code, self.reason, self.message, self.retry_after = code, reason, message, retry_after


class ObjectNotFound(KubernetesError):
    """The object does not exist (404)."""


class ObjectAlreadyExists(KubernetesError):
    """An object of that name exists already (409 AlreadyExists)."""


class ObjectConflict(KubernetesError):
    """The write lost a race with another writer (409, not AlreadyExists); try again."""

    retryable = True


class WatchExpired(KubernetesError):
    """The watch's resourceVersion is too old (410 Gone): list again, then watch from there."""


class Throttled(KubernetesError):
    """The API server asks us to slow down (429); wait ``retry_after`` seconds when given."""

    retryable = True


class ApiServerError(KubernetesError):
    """The API server failed (5xx)."""

    retryable = True


class ApiUnreachable(KubernetesError):
    """No HTTP answer at all: connection refused or reset, or a timeout."""

    retryable = True


class RequestRefused(KubernetesError):
    """The API server refused the request itself (400, 403, 422, ...): retrying cannot help."""


class CallNotSent(KubernetesError):
    """A create or delete was not sent: its fenced window (or the term) ended before it could start.

    Nothing reached the API server, so trying again in the next window is always safe.
    """

    retryable = True

    def __init__(self, why: str) -> None:
        super().__init__(0, "NotSent", why)


def error_for(code: int, reason: str, message: str, retry_after: float | None = None) -> KubernetesError:
    """The error type that says what an answer with this status means."""
    kind: type[KubernetesError]
    if code == 0:
        kind = ApiUnreachable
    elif code == 404:
        kind = ObjectNotFound
    elif code == 409:
        kind = ObjectAlreadyExists if reason == "AlreadyExists" else ObjectConflict
    elif code == 410:
        kind = WatchExpired
    elif code == 429:
        kind = Throttled
    elif code >= 500:
        kind = ApiServerError
    else:
        kind = RequestRefused
    return kind(code, reason, message, retry_after)
