"""The soak's workload: layered DAGs with flaky tasks, triggered and cancelled over the HTTP API.

Each DAG has ``tasks`` container tasks in layers of eight; a task depends on one to three tasks
of the layer above, plus one ``slow`` task (6 s, timeout 40 s) with no dependencies. A few
tasks per DAG are *flaky by design*: their command carries
:data:`FLAKY_MARKER`, which the soak's kubelet hook turns into ``exit 1`` on try 1 — so try 1
fails and try 2 (after a 1 s retry delay) succeeds. A few runs are cancelled shortly after
their trigger.

All calls go through :class:`Api`, which fails over between replicas and retries connection
errors and 5xx until a deadline (PostgreSQL may be restarting). Triggers carry an explicit
``run_id``, so a retry after an ambiguous failure answers 409 instead of creating a second run.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from bench.chaos import audit, waits

log = logging.getLogger(__name__)

FLAKY_MARKER = "chaos-fail-first-try"
LAYER_WIDTH = 8
#: Timeout of each DAG's ``slow`` task (it runs 6 s): well under the 60 s clock skew injected.
SLOW_TIMEOUT = 40


def dag_spec(dag_id: str, tasks: int, rng: random.Random, *, flaky: int = 3) -> dict[str, Any]:
    """A layered DAG of ``tasks`` container tasks, ``flaky`` of them failing their first try."""
    ids = [f"t{i // LAYER_WIDTH}-{i % LAYER_WIDTH}" for i in range(tasks)]
    flaky_ids = set(rng.sample(ids[LAYER_WIDTH:] or ids, min(flaky, len(ids))))
    specs = []
    for i, task_id in enumerate(ids):
        layer = i // LAYER_WIDTH
        above = ids[(layer - 1) * LAYER_WIDTH: layer * LAYER_WIDTH] if layer else []
        # Known, checksummed lines: the audit compares each try's archived log with them.
        printed = "; ".join(f"echo {line}" for line in audit.printed_lines(dag_id, task_id))
        script = f"{printed}; sleep 0.{rng.randint(1, 6)}"
        if task_id in flaky_ids:
            script += f"; {FLAKY_MARKER}"
        spec: dict[str, Any] = {"id": task_id, "image": "busybox:1.36", "command": ["sh", "-c", script],
                                "retries": 3, "retry_delay_seconds": 1}
        if above:
            spec["depends_on"] = sorted(rng.sample(above, rng.randint(1, min(3, len(above)))))
        specs.append(spec)
    # One task long enough to be running at a failover, with a timeout shorter than the clock
    # skew the soak injects: a leader whose clock is ahead must not time it out early.
    # Its success is a dataset event too (DATASET_DAG waits on it): each must trigger it exactly once.
    specs.append({"id": "slow", "image": "busybox:1.36", "command": ["sh", "-c", f"echo {dag_id} slow; sleep 6"],
                  "timeout_seconds": SLOW_TIMEOUT, "retries": 3, "retry_delay_seconds": 1,
                  "produces": [dataset_uri(dag_id)]})
    return {"dag_id": dag_id, "description": "chaos soak workload", "schedule": None,
            "max_active_runs": 1000, "tasks": specs}


#: The DAG that runs on the layered DAGs' datasets (each ``slow`` success is an event): the soak checks
#: that every event was consumed by exactly one of its runs or still waits in its queue.
DATASET_DAG = "chaos-datasets"


def dataset_uri(dag_id: str) -> str:
    return f"chaos://{dag_id}/slow"


def dataset_dag_spec(producers: list[str]) -> dict[str, Any]:
    return {"dag_id": DATASET_DAG, "description": "chaos soak dataset consumer",
            "schedule": {"datasets": {"any": [dataset_uri(d) for d in producers]}},
            "tasks": [{"id": "consume", "image": "busybox:1.36", "retries": 3, "retry_delay_seconds": 1,
                       "command": ["sh", "-c", "echo consumed $LEOFLOW_TRIGGERING_EVENTS"]}]}


#: The list → map → combine DAG of the workload, and how many items its list publishes.
MAP_DAG = "chaos-map"
MAP_ITEMS = 6


def map_dag_spec(dag_id: str = MAP_DAG, items: int = MAP_ITEMS) -> dict[str, Any]:
    """list → process (mapped over the list's output) → combine: each instance publishes an output
    that is a function of its run and index, which the soak's audit checks (one success per instance,
    every stored output what its try wrote) across leader kills."""
    parts = ",".join(str(i) for i in range(items))
    publish = "printf '{\"v\":\"{{ run.id }}-{{ item }}\"}' > $LEOFLOW_OUTPUTS"
    return {"dag_id": dag_id, "description": "chaos soak map workload", "schedule": None, "max_active_runs": 1000,
            "tasks": [
                {"id": "list", "image": "busybox:1.36", "outputs": {"parts": {"type": "array"}},
                 "command": ["sh", "-c", f"echo listing; printf '{{\"parts\":[{parts}]}}' > $LEOFLOW_OUTPUTS"],
                 "retries": 3, "retry_delay_seconds": 1},
                {"id": "process", "image": "busybox:1.36", "depends_on": ["list"], "max_parallel": 4,
                 "map_over": "{{ tasks.list.outputs.parts }}", "outputs": {"v": {"type": "string"}},
                 "command": ["sh", "-c", f"echo item {{{{ item }}}}; sleep 0.3; {publish}"],
                 "retries": 3, "retry_delay_seconds": 1},
                {"id": "combine", "image": "busybox:1.36", "depends_on": ["process"],
                 "command": ["sh", "-c", "echo {{ tasks.process.outputs.v }}"], "retries": 3,
                 "retry_delay_seconds": 1}]}


class Api:
    """Requests to whichever replica answers; retries until ``deadline`` seconds pass."""

    def __init__(self, urls: Callable[[], list[str]], rng: random.Random) -> None:
        self.urls = urls
        self.rng = rng
        self.client = httpx.Client(timeout=10)
        self.retries = 0

    def call(self, method: str, path: str, *, body: Any = None, accept: tuple[int, ...] = (200, 201),
             deadline: float = 120) -> httpx.Response:
        end = time.monotonic() + deadline
        last: str = ""
        while time.monotonic() < end:
            urls = self.urls()
            self.rng.shuffle(urls)
            for url in urls:
                try:
                    response = self.client.request(method, url + path, json=body)
                except httpx.HTTPError as exc:
                    last = f"{url}: {type(exc).__name__}"
                    continue
                if response.status_code in accept:
                    return response
                last = f"{url}: {response.status_code} {response.text[:200]}"
                if response.status_code < 500:
                    raise RuntimeError(f"{method} {path} -> {last}")
            self.retries += 1
            time.sleep(0.5)
        raise TimeoutError(f"{method} {path} gave up after {deadline}s (last: {last})")

    def close(self) -> None:
        self.client.close()


@dataclass
class PlannedRun:
    dag_id: str
    run_id: str
    trigger_at: float  # seconds after the workload starts
    cancel_after: float | None = None  # seconds after its trigger, when cancelled
    triggered_at: float | None = None  # wall clock (time.time())
    cancelled_at: float | None = None
    cancel_status: int | None = None


@dataclass
class Workload:
    """What to run and when; :meth:`drive` performs it (in a thread)."""

    dags: list[dict[str, Any]]
    runs: list[PlannedRun]
    errors: list[str] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def plan(cls, *, runs: int, tasks: int, spread: float, seed: int, cancellations: int | None = None,
             dag_count: int = 2) -> Workload:
        rng = random.Random(seed)
        dags = [dag_spec(f"chaos-{chr(ord('a') + i)}", tasks, rng) for i in range(dag_count)] + [map_dag_spec()]
        dag_count += 1  # triggered by the workload; the dataset consumer below is started by their events
        dags.append(dataset_dag_spec([d["dag_id"] for d in dags[:dag_count - 1]]))
        cancel_count = cancellations if cancellations is not None else max(1, runs // 16)
        cancelled = set(rng.sample(range(runs), min(cancel_count, runs)))
        planned = []
        for i in range(runs):
            at = spread * i / max(1, runs - 1) if runs > 1 else 0.0
            planned.append(PlannedRun(dags[i % dag_count]["dag_id"], f"chaos-{seed}-{i:03d}", at,
                                      rng.uniform(1.0, 6.0) if i in cancelled else None))
        # Two runs of the waits scenario (bench.chaos.waits), never cancelled: their gates open meanwhile.
        dags.append(waits.waits_dag_spec())
        planned += [PlannedRun(waits.WAITS_DAG, f"chaos-{seed}-waits-{i}", spread * share)
                    for i, share in enumerate((0.2, 0.6))]
        return cls(dags, planned)

    @property
    def task_count(self) -> int:
        return sum(len(next(d for d in self.dags if d["dag_id"] == r.dag_id)["tasks"]) for r in self.runs)

    def apply(self, api: Api) -> None:
        for spec in self.dags:
            api.call("POST", "/api/v2/dags", body=spec)

    def drive(self, api: Api, stop: threading.Event) -> None:
        """Trigger and cancel on schedule; every call retried until it is known to have happened."""
        start = time.monotonic()
        actions: list[tuple[float, str, PlannedRun]] = [(r.trigger_at, "trigger", r) for r in self.runs]
        try:
            while actions and not stop.is_set():
                actions.sort(key=lambda a: a[0])
                at, kind, run = actions[0]
                if time.monotonic() - start < at:
                    time.sleep(min(0.2, at - (time.monotonic() - start)))
                    continue
                actions.pop(0)
                path = f"/api/v2/dags/{run.dag_id}/runs"
                try:
                    if kind == "trigger":
                        api.call("POST", path, body={"run_id": run.run_id}, accept=(201, 409))
                        run.triggered_at = time.time()
                        if run.cancel_after is not None:
                            actions.append((time.monotonic() - start + run.cancel_after, "cancel", run))
                        actions += [(at, action, run) for at, action in
                                    waits.follow_ups(run.dag_id, time.monotonic() - start)]
                    elif kind in ("event", "approve"):
                        waits.perform(api, kind, run.dag_id, run.run_id, self.errors)
                    else:
                        response = api.call("POST", f"{path}/{run.run_id}/cancel", accept=(200, 409))
                        run.cancelled_at, run.cancel_status = time.time(), response.status_code
                except (RuntimeError, TimeoutError) as exc:
                    self.errors.append(f"{kind} {run.run_id}: {exc}")
                    log.warning("workload call failed", extra={"run_id": run.run_id, "error": str(exc)})
        finally:
            self.done.set()
