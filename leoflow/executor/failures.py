"""One try that an executor cannot handle fails alone (issue 16), with a reason its report carries.

An executor handles many tries in a few long-running tasks (a watch, a launcher, a reconcile at
start). If the data of one try — a spec the pod builder chokes on, a process directory a restart
cannot read — raised out of those tasks, the term would end (``LeaderContext.fail``), the next
leader would resubmit the same try and end too: a crash loop. So each executor handles each
try inside a boundary, and what escapes it becomes that try's ``failed`` report with the reason
``executor error: <type>: <message>``, counted in
``leoflow_scheduler_entity_errors_total{kind="try"}``. Leader faults
(:data:`leoflow.errors.LEADER_FAULTS`) are not contained: they belong to the term.
"""

from __future__ import annotations

import logging

from leoflow.metrics import scheduler as metrics
from leoflow.model.tries import TryKey

log = logging.getLogger(__name__)

#: Longest reason an executor stores on a try it failed.
MAX_REASON = 500


def try_error(key: TryKey, exc: BaseException, *, doing: str) -> str:
    """Log and count ``exc`` as the failure of try ``key`` while ``doing``; returns the try's reason."""
    log.error("executor error contained to one try while %s", doing, exc_info=exc,
              extra={"try": str(key), "error": type(exc).__name__})
    metrics.ENTITY_ERRORS.labels(kind="try").inc()
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else "(no message)"
    return f"executor error: {type(exc).__name__}: {message}".replace("\x00", "\\0")[:MAX_REASON]
