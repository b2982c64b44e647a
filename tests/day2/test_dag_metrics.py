"""Per-DAG metrics: counted once per ending by the observer, exported by any replica, bounded."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from leoflow.api.app import create_app
from leoflow.clock import SystemClock
from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.leadership import LeaderContext
from leoflow.model.dag_metrics import DURATION_BUCKETS
from leoflow.notify.observer import OutcomeObserver
from leoflow.settings import Settings
from tests.api.conftest import ADMIN, api_settings, spec
from tests.api.live import client_for
from tests.scheduler.harness import set_term

ROOT = Path(__file__).resolve().parents[2]


async def _seed(engine: Any) -> None:
    """Finished runs and failed tries as the scheduler would leave them."""
    async with engine.begin() as conn:
        async def run(dag: str, run_id: str, state: str, seconds: float, ended_ago_h: float) -> int:
            return int((await conn.execute(text("""
                INSERT INTO dag_runs (dag_id, run_id, dag_version_id, run_type, state, started_at, ended_at)
                SELECT dag_id, :r, current_version_id, 'manual', :s,
                       now() - make_interval(secs => :ago * 3600) - make_interval(secs => :sec),
                       now() - make_interval(secs => :ago * 3600)
                FROM dags WHERE dag_id = :d RETURNING id
            """), {"d": dag, "r": run_id, "s": state, "sec": seconds, "ago": ended_ago_h})).scalar_one())

        async def failed_tries(run_pk: int, task: str, n: int) -> None:
            ti = (await conn.execute(text("INSERT INTO task_instances (run_pk, task_id, state, try_number) "
                                          "VALUES (:r, :t, 'failed', :n) RETURNING id"),
                                     {"r": run_pk, "t": task, "n": n})).scalar_one()
            for i in range(1, n + 1):
                await conn.execute(text("INSERT INTO task_tries (task_instance_id, try_number, state, term, ended_at) "
                                        "VALUES (:ti, :i, 'failed', 1, now())"), {"ti": ti, "i": i})

        await run("alpha", "a1", "success", 0.5, 30)
        await run("alpha", "a2", "success", 42, 2)
        a3 = await run("alpha", "a3", "failed", 4000, 1)
        await failed_tries(a3, "extract", 3)
        b1 = await run("beta", "b1", "failed", 10, 1)
        await failed_tries(b1, "load", 1)
        await run("gamma", "g1", "success", 10, 5)
        await run("delta", "d1", "cancelled", 1, 1)


def _families(body: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(body)}


def test_metrics_by_dag_are_exact_bounded_and_the_same_on_every_replica(settings: Settings) -> None:
    base = api_settings(settings.database.url or "")
    async def observe() -> int:
        engine = make_async_engine(settings.database, pool_size=2)
        try:
            await set_term(engine, settings.cluster.name, 1)
            await _seed(engine)
            ctx = LeaderContext(term=1, settings=settings, db=Database(engine), clock=SystemClock())
            observer = OutcomeObserver(batch=3)
            rounds = 0
            while await observer.observe_once(ctx):  # batches of 3: more rounds, same totals
                rounds += 1
            await observer.observe_once(ctx)  # nothing left: counting twice is impossible
            return rounds
        finally:
            await engine.dispose()

    with client_for(create_app(base)) as client:
        for dag in ("alpha", "beta", "gamma", "delta"):
            assert client.post("/api/v2/dags", json=spec(dag), headers=ADMIN).status_code == 201
        assert asyncio.run(observe()) >= 1
        families = _families(client.get("/metrics").text)
    with client_for(create_app(api_settings(settings.database.url or "", LEOFLOW_METRICS_MAX_DAGS="2",
                                            LEOFLOW_METRICS_MAX_TASKS="1", LEOFLOW_NODE_ID="other"))) as client:
        folded = _families(client.get("/metrics").text)

    durations = families["leoflow_dag_run_duration_seconds"]
    counts = {(s.labels["dag_id"], s.labels["state"]): s.value for s in durations.samples
              if s.name.endswith("_count")}
    assert counts == {("alpha", "success"): 2, ("alpha", "failed"): 1, ("beta", "failed"): 1,
                      ("gamma", "success"): 1, ("delta", "cancelled"): 1}
    alpha_ok = {s.labels["le"]: s.value for s in durations.samples if s.name.endswith("_bucket")
                and s.labels["dag_id"] == "alpha" and s.labels["state"] == "success"}
    assert (alpha_ok["1"], alpha_ok["30"], alpha_ok["60"], alpha_ok["+Inf"]) == (1, 1, 2, 2)
    assert len(alpha_ok) == len(DURATION_BUCKETS) + 1
    sums = {(s.labels["dag_id"], s.labels["state"]): s.value for s in durations.samples if s.name.endswith("_sum")}
    assert abs(sums[("alpha", "success")] - 42.5) < 0.01

    last = {s.labels["dag_id"]: s.value for s in families["leoflow_dag_last_success_timestamp_seconds"].samples}
    assert set(last) == {"alpha", "gamma"}  # no success yet: no series (and no false alert)
    assert 1.9 * 3600 < SystemClock().now().timestamp() - last["alpha"] < 2.1 * 3600

    failures = {(s.labels["dag_id"], s.labels["task_id"]): s.value for s in families["leoflow_task_failures"].samples
                if s.name == "leoflow_task_failures_total"}
    assert failures == {("alpha", "extract"): 3, ("beta", "load"): 1}

    # Bounded: 2 DAGs by id (alpha, beta) keep their series, gamma and delta fold into _other.
    folded_counts = {(s.labels["dag_id"], s.labels["state"]): s.value
                     for s in folded["leoflow_dag_run_duration_seconds"].samples if s.name.endswith("_count")}
    assert folded_counts == {("alpha", "success"): 2, ("alpha", "failed"): 1, ("beta", "failed"): 1,
                             ("_other", "success"): 1, ("_other", "cancelled"): 1}
    folded_failures = {(s.labels["dag_id"], s.labels["task_id"]): s.value
                       for s in folded["leoflow_task_failures"].samples if s.name == "leoflow_task_failures_total"}
    assert folded_failures == {("alpha", "extract"): 3, ("beta", "_other"): 1}


def test_the_charts_alerts_use_these_names_and_labels() -> None:
    """The chart's PrometheusRule reads the per-DAG metrics by the names and labels exported here."""
    rules = (ROOT / "helm/leoflow/templates/prometheusrule.yaml").read_text()
    assert "max by (dag_id) (leoflow_dag_last_success_timestamp_seconds" in rules
    assert "max by (dag_id, task_id) (increase(leoflow_task_failures_total" in rules
    from leoflow.metrics.dags import DAG_METRICS

    described = {m.name: m for m in DAG_METRICS.describe()}
    assert set(described) == {"leoflow_dag_run_duration_seconds", "leoflow_dag_last_success_timestamp_seconds",
                              "leoflow_task_failures"}  # the counter is exposed with _total
