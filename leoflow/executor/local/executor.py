"""The local executor (standalone mode): each task try is a subprocess of the leader.

What runs: ``command + args`` (the image is ignored: there is no container), with the task's
``env`` on top of Leoflow's environment minus every ``LEOFLOW_*`` variable, in a per-try working
directory under ``LEOFLOW_HOME/tasks/<try name>/`` with stdout and stderr in ``output.log`` there
(see :mod:`.process`). A task that declares outputs also gets ``LEOFLOW_OUTPUTS``, the try's
``outputs.json``: after the process exits and before ``exit.json`` is written, at most 4,097
bytes of it are read and travel, unchecked, with the success report (the leader checks them).
At most ``LEOFLOW_LOCAL_PARALLELISM`` processes run at once; further submissions wait for a slot.

Failure semantics:

- **Never twice.** Just before spawning, the executor claims the try's row in the database under
  its fencing term (:func:`leoflow.db.stores.tries.claim_try`). A claimed try is never spawned
  again — not by a second submit, not after a restart, not by a new leader. An ex-leader's claim
  fails on the fence, so it spawns nothing.
- **Crash recovery.** On :meth:`start`, and when a submit finds its try already claimed, the
  executor looks at the try's files: ``exit.json`` → the try finished while nobody listened, its
  real outcome is reported; a live orphan process → it is killed and the try reported failed; no
  trace → the process vanished with a crash and the try is reported failed. Whether to retry is
  the scheduler's decision (retries remaining), never a silent rerun here.
- **Tries of another replica.** Replicas on separate hosts each have their own files. A claimed
  try whose files are not on this host and whose claim belongs to another replica is not
  "vanished": that replica ran it and, if it lost leadership meanwhile (a database outage), reports
  the outcome through the database (:mod:`.outcomes`). The executor waits for that report
  for as long as the other replica heartbeats — at least ``LEOFLOW_NODE_DOWN_AFTER`` seconds of
  database time from when it started waiting, so a replica cut off by the same outage gets to
  come back — and only then decides, saying why in the reason.
- **Timeouts** (``timeout_seconds``): SIGTERM to the process group, SIGKILL after
  ``kill_grace`` seconds (``LEOFLOW_KILL_GRACE``); reported failed with reason ``timed out after Ns``.
- **Cancels** (a cancelled run, a cleared task): the same signals; :meth:`cancel` returns only
  once the process has exited, so the scheduler records the try cancelled, and queues a cleared
  task's next try, only when nothing of the old one runs any more.
- **Logs**: while the process runs, its output so far is stored in ``task_logs`` every
  :data:`LIVE_LOG_INTERVAL` seconds when it grew (the API and the dashboard show it, marked
  incomplete); when the process ends the whole output is stored (tail kept, capped at
  ``LEOFLOW_TASK_LOG_MAX_BYTES``) and marked complete *before* the final status is reported.
  A failed partial store is only logged: it never affects the task. Stored output is never
  replaced by less: adopting a try whose files are not on this host keeps what was stored and
  marks the logs "output unavailable on this host" instead.
- Processes survive :meth:`stop` (leadership lost but process alive): they keep running, and
  a later executor in the same process adopts them through a process-wide registry.
- **Containment**: a try whose launch, process or leftovers (at :meth:`start`) make the
  executor raise is reported failed with ``executor error: …`` (:mod:`leoflow.executor.failures`); the other
  tries and the term go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from leoflow import tracing
from leoflow.aiotasks import Registry, cancel_and_wait, start_guarded
from leoflow.db.stores import task_logs as log_store
from leoflow.db.stores import tries as try_store
from leoflow.db.stores import try_outcomes
from leoflow.errors import DatabaseError, FencedOut, is_leader_fault
from leoflow.executor.artifacts import ARTIFACTS_ENV, fetch_for_try, upload_for_try
from leoflow.executor.base import Report
from leoflow.executor.failures import try_error
from leoflow.executor.local.process import (
    ChildProcess,
    Outcome,
    TryFiles,
    child_environment,
    settle,
    shell_status,
    spawn,
    terminate,
)
from leoflow.executor.log_archive import GIVE_UP_AFTER, LogArchiver
from leoflow.executor.log_tail import read_tail
from leoflow.executor.naming import try_name
from leoflow.leadership import LeaderContext
from leoflow.metrics.executor import TASK_LOGS_UNAVAILABLE
from leoflow.model.spec.entrypoint import LOCAL_NEEDS_COMMAND
from leoflow.model.tries import StatusUpdate, TaskLaunch, TryKey
from leoflow.settings import Settings
from leoflow.storage.log_chunks import PROCESS_CONTAINER
from leoflow.storage.objects import ObjectStore

log = logging.getLogger(__name__)
#: Claim attempts on database errors (with backoff up to 5 s: about a minute) before failing the try.
CLAIM_ATTEMPTS = 15
#: Seconds between stores of a running try's output (only when it grew).
LIVE_LOG_INTERVAL = 2.0
#: Seconds between looks for another replica's report on a try it ran.
OWNER_POLL_INTERVAL = 1.0


@dataclass
class _Running:
    """A process of this OS process, shared by successive executor instances (one per term)."""

    key: TryKey
    task_try_id: int
    files: TryFiles
    process: ChildProcess | None = None
    cancel_requested: bool = False
    outcome: asyncio.Future[Outcome] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


#: Every try process this OS process started and has not finished reporting, by try name.
_RUNNING: dict[str, _Running] = {}
#: Strong references to the tasks that own those processes (they outlive an executor's stop()).
_OWNERS: Registry = set()
#: Archivers of tries' output (leoflow.executor.log_archive): like the processes, they outlive a
#: term, and a try's outcome never waits for them.
_ARCHIVERS: Registry = set()
#: Executors of this OS process between start() and stop(): while one runs, it reports this
#: replica's tries itself (the outcome reporter of .outcomes stands aside).
_STARTED: set[int] = set()


async def archives_settled(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for every log archive of this process to complete or give up."""
    if _ARCHIVERS:
        await asyncio.wait(set(_ARCHIVERS), timeout=timeout)
    return not _ARCHIVERS


def executor_running_here() -> bool:
    return bool(_STARTED)


def process_running_here(name: str) -> bool:
    """Is the try ``name`` a process this OS process started and has not finished with?"""
    return name in _RUNNING


class LocalExecutor:
    """Implements :class:`leoflow.executor.base.Executor` with subprocesses."""

    name = "local"

    def __init__(self, settings: Settings, *, kill_grace: float | None = None,
                 claim_attempts: int = CLAIM_ATTEMPTS, archive_give_up: float = GIVE_UP_AFTER) -> None:
        self.settings = settings
        self.claim_attempts = claim_attempts
        #: Seconds between SIGTERM and SIGKILL (``LEOFLOW_KILL_GRACE``; tests pass their own).
        self.kill_grace = settings.executor.kill_grace if kill_grace is None else kill_grace
        self.home = settings.home
        self.max_log_bytes = settings.executor.task_log_max_bytes
        self._ctx: LeaderContext | None = None
        self._report: Report | None = None
        self._slots = asyncio.Semaphore(max(1, settings.executor.local_parallelism))
        self._pending: dict[str, asyncio.Task[None]] = {}
        self._watchers: Registry = set()
        self._archiver: LogArchiver | None = None
        #: The bucket artifacts go to: the log archive's (leoflow.model.artifacts.objects says why).
        self._artifact_store: ObjectStore | None = None
        #: Seconds the archive of an ended try keeps retrying a failing storage (tests pass less).
        self.archive_give_up = archive_give_up

    # ------------------------------------------------------------------ Executor protocol

    async def start(self, ctx: LeaderContext, report: Report) -> None:
        self._ctx, self._report = ctx, report
        _STARTED.add(id(self))
        self._archiver = self._log_archiver(ctx)
        self._artifact_store = self._archiver.store if self._archiver is not None else None
        async with ctx.db.connect() as conn:
            claims = await try_store.unfinished_claims(conn, ctx.cluster)
        for record in claims:
            name = record.executor_ref or try_name(ctx.cluster, record.key)
            try:
                await self._adopt(record.key, record.task_try_id, name, record.claimed_by)
            except Exception as exc:  # containment: one try's leftovers must not cost the term (issue 16)
                if is_leader_fault(exc):
                    raise
                await self._emit(record.key, "failed", None, try_error(record.key, exc, doing="adopting it"), name)

    async def submit(self, launch: TaskLaunch) -> None:
        ctx = self._require_started()
        name = try_name(ctx.cluster, launch.key)
        if name in self._pending:
            return
        if name in _RUNNING:
            self._watch(_RUNNING[name])
            return
        refs = launch.pod.references() if launch.pod else []
        if refs:  # a subprocess has no kubelet to resolve them: say so instead of running without them
            await self._emit(launch.key, "failed", None, f"env refers to Kubernetes objects ({', '.join(refs)}), "
                             "which only the kubernetes executor can resolve; use plain env values here", name)
            return
        if not launch.command:  # the image's entrypoint: a process has no image to read it from
            await self._emit(launch.key, "failed", None, LOCAL_NEEDS_COMMAND, name)
            return
        task = start_guarded(self._launch_in_slot(launch, name), f"local-try:{name}", may_return=True,
                             on_death=lambda _task, error: self._launch_failed(launch, name, error))
        self._pending[name] = task
        task.add_done_callback(lambda _t, n=name: self._pending.pop(n, None))  # type: ignore[misc]

    async def cancel(self, key: TryKey) -> None:
        ctx = self._require_started()
        name = try_name(ctx.cluster, key)
        pending = self._pending.get(name)
        running = _RUNNING.get(name)
        if running is not None:
            running.cancel_requested = True
            if running.process is not None and running.process.returncode is None:
                await terminate(running.process, self.kill_grace)
            # Gone means gone: also a process still being spawned (it is terminated as soon as it
            # exists, see _own) has exited before the scheduler may record the try cancelled.
            with contextlib.suppress(Exception):
                await asyncio.shield(running.outcome)
        elif pending is not None:
            pending.cancel()

    async def logs(self, key: TryKey) -> str | None:
        ctx = self._require_started()
        files = TryFiles(self.home, try_name(ctx.cluster, key))
        if not files.root.exists():
            return None
        return read_tail(files.log, self.max_log_bytes).text

    def _log_archiver(self, ctx: LeaderContext) -> LogArchiver | None:
        """The archiver of this term, or None without an archive (or one that cannot be set up: logged)."""
        config = self.settings.log_archive
        if config.active_url is None:
            return None
        try:
            store = ObjectStore(config.active_url, timeout=config.timeout)
        except (ValueError, OSError) as exc:  # a file:// directory that cannot be made, ...: no archive
            log.error("the log archive cannot be used; logs are kept in the database only",
                      extra={"error": str(exc)[:300]})
            return None
        return LogArchiver(store, ctx.db, ctx.cluster, flush_interval=config.flush_interval,
                           give_up_after=self.archive_give_up)

    def _archive(self, task_try_id: int, files: TryFiles, ended: asyncio.Event) -> None:
        """Archive the try's output beside it (never awaited by the try: see leoflow.executor.log_archive)."""
        if self._archiver is None:
            return
        start_guarded(self._archiver.follow_file(task_try_id, PROCESS_CONTAINER, files.log, ended),
                      f"archive-log:{files.root.name}", may_return=True, registry=_ARCHIVERS)

    async def stop(self) -> None:
        await cancel_and_wait([*self._pending.values(), *self._watchers])
        self._report = None
        _STARTED.discard(id(self))

    # ------------------------------------------------------------------ launching

    def _launch_failed(self, launch: TaskLaunch, name: str, error: BaseException | None) -> None:
        """Containment: a bug while launching one try fails that try (with a reason), nothing else."""
        reason = try_error(launch.key, error or RuntimeError("the launch ended early"), doing="launching it")
        start_guarded(self._emit(launch.key, "failed", None, reason, name), f"local-report:{name}",
                      may_return=True, registry=self._watchers)

    async def _launch_in_slot(self, launch: TaskLaunch, name: str) -> None:
        async with self._slots:
            claimed = await self._claim(launch, name)
            if claimed is None:
                return
            if not claimed:
                await self._adopt(launch.key, launch.task_try_id, name, await self._claimed_by(launch.task_try_id))
                return
            running = _Running(launch.key, launch.task_try_id, TryFiles(self.home, name))
            _RUNNING[name] = running
            with tracing.in_try(launch.key):  # the owner task's spans (launch, log shipping) are the try's
                start_guarded(self._own(running, launch), f"local-process:{name}", may_return=True, registry=_OWNERS)
            self._watch(running)
            # Hold the slot until the process ends; shield so stop() does not kill the process.
            await asyncio.shield(running.outcome)

    async def _claim(self, launch: TaskLaunch, name: str) -> bool | None:
        """Fenced claim of the try; None when fenced out or the database stayed unusable (reported)."""
        ctx = self._require_started()
        for attempt in range(self.claim_attempts):
            try:
                async with ctx.db.transaction() as conn:
                    return await try_store.claim_try(
                        conn, cluster=ctx.cluster, term=launch.term, task_try_id=launch.task_try_id, key=launch.key,
                        executor_ref=name, node_id=ctx.node_id)
            except FencedOut as exc:
                log.warning("not launching: fenced out", extra={"try": name, "error": str(exc)})
                return None
            except DatabaseError as exc:
                log.warning("claiming a try failed; retrying", extra={"try": name, "error": str(exc)[:300]})
                await asyncio.sleep(min(5.0, 0.2 * 2 ** attempt))
        await self._emit(launch.key, "failed", None, "could not claim the try: the database is unavailable", name)
        return None

    async def _own(self, running: _Running, launch: TaskLaunch) -> None:
        """Run the process to its end, save logs and outcome; survives the executor's stop()."""
        files = running.files
        ended = asyncio.Event()  # the output is final: the archiver ships the rest and completes it
        try:
            files.prepare()
            argv = [*launch.command, *launch.args]
            env = child_environment(os.environ, launch.env)
            if launch.outputs_declared:
                env.update(files.outputs_environment())
            artifacts_root = files.root / "artifacts"
            if launch.artifacts is not None:
                artifacts_root.mkdir(exist_ok=True)
                env[ARTIFACTS_ENV] = str(artifacts_root.absolute())
            self._archive(running.task_try_id, files, ended)
            missing_input = await self._fetch_artifacts(launch, artifacts_root)
            if missing_input is not None:  # the task never runs without its inputs
                with files.log.open("ab") as f:
                    f.write(f"leoflow: {missing_input}\n".encode())
                outcome = Outcome("failed", None, missing_input)
            else:
                try:
                    with tracing.span("leoflow.process.launch"):
                        running.process = await spawn(argv, files, env)
                except OSError as exc:
                    with files.log.open("ab") as f:
                        f.write(f"leoflow: cannot start {argv[0] if argv else '(empty command)'}: {exc}\n".encode())
                    outcome = Outcome("failed", 127, f"cannot start process: {exc.strerror or exc}")
                else:
                    files.write_process(running.process.pid)
                    if running.cancel_requested:  # cancelled while it was being spawned
                        await terminate(running.process, self.kill_grace)
                    await self._emit(running.key, "running", None, None, files.root.name)
                    outcome = await self._wait(running, launch.timeout_seconds)
            if outcome.state == "success" and launch.outputs_declared:
                outcome = replace(outcome, outputs=files.read_outputs() or b"")
            if launch.artifacts is not None and missing_input is None:
                outcome = await self._upload_artifacts(running.task_try_id, launch, artifacts_root, outcome)
            files.write_outcome(outcome)
            ended.set()
            try:
                await self._store_output(running.task_try_id, files, final=True)
            except DatabaseError as exc:  # the outcome still counts; the logs stay on disk
                log.warning("could not store task logs", extra={"try": files.root.name, "error": str(exc)})
        except BaseException as exc:  # not swallowed: whoever waits on the outcome must learn of it
            ended.set()
            if not running.outcome.done():
                running.outcome.set_exception(exc if isinstance(exc, Exception) else RuntimeError("aborted"))
            raise
        finally:
            _RUNNING.pop(files.root.name, None)
        running.outcome.set_result(outcome)

    async def _fetch_artifacts(self, launch: TaskLaunch, root: Path) -> str | None:
        """Unpack the try's input artifacts before it starts; why it cannot start, else None."""
        if launch.artifacts is None:
            return None
        return await fetch_for_try(self._require_started().db, self._artifact_store, launch, root)

    async def _upload_artifacts(self, task_try_id: int, launch: TaskLaunch, root: Path, outcome: Outcome) -> Outcome:
        """Upload and index the try's output artifacts; a success whose required output is missing,
        too large or not stored becomes a failure saying so (leoflow.executor.artifacts)."""
        ctx = self._require_started()
        problem = await upload_for_try(ctx.db, self._artifact_store, ctx.cluster, task_try_id, launch.artifacts, root)
        if problem is None or outcome.state != "success":
            return outcome
        return Outcome("failed", outcome.exit_code, problem)

    async def _wait(self, running: _Running, timeout: float | None) -> Outcome:
        """Wait for the process (killing it at ``timeout``), storing its output as it grows."""
        proc = running.process
        assert proc is not None
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        exited = asyncio.ensure_future(proc.wait())  # not cancelled by our timeouts
        stored_size = 0
        while True:
            step = LIVE_LOG_INTERVAL if deadline is None else min(LIVE_LOG_INTERVAL, deadline - loop.time())
            if step > 0:
                await asyncio.wait({exited}, timeout=step)
            if exited.done():
                code = exited.result()
                break
            if deadline is not None and loop.time() >= deadline:
                code = await terminate(proc, self.kill_grace)
                return Outcome("failed", shell_status(code), f"timed out after {timeout:g}s")
            stored_size = await self._store_partial_logs(running, stored_size)
        status = shell_status(code)
        if running.cancel_requested:
            return Outcome("failed", status, "cancelled")
        if code == 0:
            return Outcome("success", 0, None)
        return Outcome("failed", status, f"exited with code {status}")

    # ------------------------------------------------------------------ adoption and reporting

    def _watch(self, running: _Running) -> None:
        async def report_outcome() -> None:
            try:
                outcome = await asyncio.shield(running.outcome)
            except Exception as exc:  # containment: whatever broke the process owner fails this try alone
                outcome = Outcome("failed", None, try_error(running.key, exc, doing="running its process"))
            await self._emit(running.key, outcome.state, outcome.exit_code, outcome.reason, running.files.root.name,
                             outputs=outcome.outputs)

        start_guarded(report_outcome(), f"local-watch:{running.files.root.name}", may_return=True,
                      registry=self._watchers)

    async def _adopt(self, key: TryKey, task_try_id: int, name: str, claimed_by: str | None) -> None:
        """A claimed try: report what became of it; never start it again."""
        if name in _RUNNING:
            running = _RUNNING[name]
            if running.process is not None:
                await self._emit(key, "running", None, None, name)
            self._watch(running)
            return
        files = TryFiles(self.home, name)
        ctx = self._require_started()
        owner = _owner_node(claimed_by)
        if not files.root.exists() and owner is not None and owner != ctx.node_id:
            start_guarded(self._await_owner(key, task_try_id, name, owner), f"local-await:{name}",
                          may_return=True, registry=self._watchers)
            return
        outcome = await settle(files, self.kill_grace)
        await self._store_adopted_output(task_try_id, files)
        # The file stays beside exit.json: read again, as the process's owner read it (a task that
        # declares none has no such file: None, ignored by the leader anyway).
        outputs = files.read_outputs() if outcome.state == "success" else None
        await self._emit(key, outcome.state, outcome.exit_code, outcome.reason, name, outputs=outputs)

    async def _claimed_by(self, task_try_id: int) -> str | None:
        async with self._require_started().db.connect() as conn:
            record = await try_store.get_try(conn, task_try_id)
        return record.claimed_by if record is not None else None

    async def _await_owner(self, key: TryKey, task_try_id: int, name: str, owner: str) -> None:
        """Report the outcome ``owner`` (another replica) reports; decide only once it is gone."""
        ctx = self._require_started()
        window = self.settings.election.node_down_after
        waiting_since = None
        while True:
            try:
                async with ctx.db.connect() as conn:
                    reported = await try_outcomes.reported_outcome(conn, task_try_id)
                    liveness = await try_outcomes.owner_liveness(conn, ctx.cluster, owner)
            except DatabaseError as exc:
                log.warning("cannot look for another replica's report yet", extra={"try": name, "error": str(exc)})
                await asyncio.sleep(OWNER_POLL_INTERVAL)
                continue
            if reported is not None:
                await self._emit(key, reported.state, reported.exit_code, reported.reason, name,
                                 outputs=reported.outputs)
                return
            if waiting_since is None:
                waiting_since = liveness.now
                log.info("waiting for the replica that ran a try to report it",
                         extra={"try": name, "owner": owner, "down_after": window})
            seen = max(waiting_since, liveness.last_seen or waiting_since)
            if not liveness.member or (liveness.now - seen).total_seconds() >= window:
                last = liveness.last_seen.isoformat() if liveness.last_seen else "never"
                reason = (f"process vanished with replica {owner!r} that ran it: no outcome reported and no "
                          f"heartbeat from it for {window:g}s (last seen {last})")
                await self._store_adopted_output(task_try_id, TryFiles(self.home, name))
                await self._emit(key, "failed", None, reason, name)
                return
            await asyncio.sleep(OWNER_POLL_INTERVAL)

    async def _store_adopted_output(self, task_try_id: int, files: TryFiles) -> None:
        """The final output of an adopted try, from this host's file — or, when the file is not
        here (the try ran on another host), keep what is stored and say so: stored output is never
        replaced by less."""
        if files.log.exists():
            await self._store_output(task_try_id, files, final=True)
            ended = asyncio.Event()
            ended.set()  # the process is over: archive what is not archived yet, then complete
            self._archive(task_try_id, files, ended)
            return
        ctx = self._require_started()
        reason = (f"output unavailable on this host ({ctx.node_id}): {files.log} does not exist here; "
                  "what was stored while the try ran is kept")
        async with ctx.db.transaction() as conn:
            await log_store.mark_logs_unavailable(conn, task_try_id, reason)
        TASK_LOGS_UNAVAILABLE.inc()

    async def _store_partial_logs(self, running: _Running, stored_size: int) -> int:
        """Store the output so far if it grew since ``stored_size``; the size now stored."""
        try:
            size = running.files.log.stat().st_size
        except OSError:
            return stored_size
        if size == stored_size:
            return stored_size
        try:
            return await self._store_output(running.task_try_id, running.files, final=False)
        except DatabaseError as exc:  # a partial store is best effort: it must never affect the task
            log.warning("could not store partial task logs", extra={"try": running.files.root.name,
                                                                    "error": str(exc).splitlines()[0][:200]})
            return stored_size

    async def _store_output(self, task_try_id: int, files: TryFiles, *, final: bool) -> int:
        """Store the capped tail of the try's output (marked complete when ``final``); its full size."""
        ctx = self._require_started()
        capped = read_tail(files.log, self.max_log_bytes)
        store = log_store.store_logs if final else log_store.store_partial_logs
        async with ctx.db.transaction() as conn:
            await store(conn, task_try_id, capped.text, truncated=capped.truncated, size_bytes=capped.size_bytes)
        return capped.size_bytes

    async def _emit(self, key: TryKey, state: str, exit_code: int | None, reason: str | None, ref: str, *,
                    outputs: bytes | None = None) -> None:
        ctx = self._require_started()
        report = self._report
        if report is None:
            return
        update = StatusUpdate(key=key, state=state, at=ctx.clock.now(), exit_code=exit_code,  # type: ignore[arg-type]
                              reason=reason, executor_ref=ref, outputs=outputs)
        await report(update)

    def _require_started(self) -> LeaderContext:
        if self._ctx is None:
            raise RuntimeError("LocalExecutor used before start()")
        return self._ctx


def _owner_node(claimed_by: str | None) -> str | None:
    """The node id in a claim (``<cluster>/<node_id>``)."""
    if not claimed_by or "/" not in claimed_by:
        return None
    return claimed_by.split("/", 1)[1]
