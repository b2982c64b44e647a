"""A stand-in leader process for crash tests: starts an executor, submits tries, waits to be killed.

    python -m tests.executor.leader_child KIND DATABASE_URL HOME TERM SCRIPT TRY_ID:DAG:RUN:TASK:TRY...

Prints ``RUNNING`` once every try was reported running, then sleeps until SIGKILLed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path

from leoflow.db.connection.database import Database
from leoflow.db.connection.engine import make_async_engine
from leoflow.executor.base import Executor
from leoflow.leadership import LeaderContext
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey
from leoflow.settings import load_settings


async def main(argv: list[str]) -> None:
    kind, url, home, term, script, *tries = argv
    settings = load_settings({"LEOFLOW_DATABASE_URL": url, "LEOFLOW_NODE_ID": "child", "LEOFLOW_LOG_FORMAT": "text",
                              "LEOFLOW_EXECUTOR": kind, "LEOFLOW_HOME": home})
    engine = make_async_engine(settings.database, pool_size=4)
    running: set[TryKey] = set()

    async def report(update: StatusUpdate) -> None:
        if update.state == "running":
            running.add(update.key)

    executor: Executor
    if kind == "kubernetes":
        from leoflow.executor.kubernetes.executor import KubernetesExecutor
        executor = KubernetesExecutor(settings, delete_grace=0)
    else:
        from leoflow.executor.local.executor import LocalExecutor
        executor = LocalExecutor(dataclasses.replace(settings))
    await executor.start(LeaderContext(int(term), settings, Database(engine)), report)
    keys = []
    for spec in tries:
        task_try_id, dag, run, task, number = spec.split(":")
        key = TryKey(dag, run, task, int(number))
        keys.append(key)
        await executor.submit(TaskLaunch(key=key, task_try_id=int(task_try_id), term=int(term), image="busybox",
                                         command=["sh", "-c", script]))
    while not all(k in running for k in keys):
        await asyncio.sleep(0.02)
    print("RUNNING", flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    asyncio.run(main(sys.argv[1:]))
