"""Running pods' container logs streamed into the log archive while they run (ADR 0019's index, unchanged).

Before this, a pod's logs reached the archive only after the pod ended (:func:`.logs.archive_pod_logs`):
a day-long Spark driver's log was unreadable from the archive all day, and lost with the node if
the node went away first. Now the leader follows each running container's log (``follow=true``)
and ships it in chunks as the local executor does (:meth:`LogArchiver.ship`), so a running try's
archived log grows every ``LEOFLOW_LOG_ARCHIVE_FLUSH_INTERVAL`` seconds.

- **Exactly once, across leaders.** Where to continue is read from the index (its end, contiguous
  from byte 0), never remembered. The log API has no byte offset, so a follower that resumes (a new
  leader adopting the pod, a stream that was cut) reads the log from its start and drops the bytes
  the archive already has (:meth:`KubernetesApi.follow_log`'s ``skip``), writing the rest into a
  sparse spool file at their own offsets: file offsets are output offsets, and the archiver's
  "append only where the index ends" rule leaves no gap and no duplicate whoever writes.
- **Completion stays with the end of the pod.** A stream that ends may mean the container ended or
  the connection was cut, so this never marks a log complete: the log shipper does, after the pod
  ended (:func:`.logs.archive_pod_logs`, which now reads only what the archive lacks).
- **Bounded.** One 64 KiB read buffer and one chunk being compressed per followed container; at
  most :data:`~.kube_client.MAX_LOG_FOLLOWS` followed at once per replica (others are archived when
  they end, as before). The spool is on local disk (sparse below the resume point).
- **Never in the way.** Storage or database failures are logged and retried at the next flush; a
  Kubernetes error ends the follow (the end-of-pod archive completes the log). The try's outcome
  never waits on it.
"""

from __future__ import annotations

import asyncio
import logging
import tempfile
from pathlib import Path

from leoflow.db.connection.database import Database
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.errors import DatabaseError
from leoflow.executor.kubernetes.errors import CallNotSent, KubernetesError
from leoflow.executor.kubernetes.kube_client import KubernetesApi
from leoflow.executor.log_archive import LogArchiver
from leoflow.storage.objects import StorageError

log = logging.getLogger(__name__)


async def archived_end(db: Database, task_try_id: int, container: str) -> int | None:
    """Where the container's archived log ends (None: it is complete already)."""
    async with db.transaction() as conn:
        state = await archive_store.open_log(conn, task_try_id, container)
    return None if state.complete else state.size_bytes


class LiveArchive:
    """Follows the containers of running pods into the archive (see the module docstring)."""

    def __init__(self, api: KubernetesApi, archiver: LogArchiver, *, flush_interval: float | None = None) -> None:
        self.api = api
        self.archiver = archiver
        self.flush_interval = archiver.flush_interval if flush_interval is None else flush_interval

    async def follow_pod(self, task_try_id: int, ref: str, containers: list[tuple[str, str]]) -> None:
        """Follow every one of ``containers`` (name, archive name: ``name#N`` after N restarts) of the pod
        until each stream ends (a containment boundary: whatever goes wrong here is logged and ends
        only this pod's live archive)."""
        try:
            await asyncio.gather(*(self.follow_container(task_try_id, ref, c, archived_as=a) for c, a in containers))
        except Exception:
            log.exception("following a running pod's logs failed; the end of the pod archives them",
                          extra={"pod": ref})

    async def follow_container(self, task_try_id: int, ref: str, container: str, *,
                               archived_as: str | None = None) -> None:
        """Stream one container's log into the archive (as ``archived_as``: this run's name) until its
        stream ends; never raises for storage, database or API errors (logged)."""
        source, container = container, archived_as or container
        try:
            archived = await archived_end(self.archiver.db, task_try_id, container)
        except DatabaseError as exc:
            log.warning("cannot read the log archive's index; not following this log live",
                        extra={"task_try_id": task_try_id, "container": container, "error": str(exc)[:300]})
            return
        if archived is None:
            return
        with tempfile.TemporaryDirectory(prefix="leoflow-live-log-") as spool:
            path = Path(spool) / "log"
            with path.open("wb") as sink:
                sink.truncate(archived)  # sparse below: offsets in the file are offsets in the output
                sink.seek(archived)
                stream = asyncio.ensure_future(self.api.follow_log(ref, source, sink, skip=archived))
                stream.add_done_callback(_retrieved)  # its error is read below, or dropped if cancelled first
                try:
                    while True:
                        await asyncio.wait({stream}, timeout=self.flush_interval)
                        archived = await self._ship(task_try_id, container, path, archived)
                        if stream.done():
                            break
                finally:
                    if not stream.done():  # cancelled (the term ends): cut the stream, let its thread return
                        self.api.stop_following(ref, source)
                        await asyncio.wait({stream}, timeout=5.0)
                error = stream.exception() if stream.done() and not stream.cancelled() else None
            if isinstance(error, CallNotSent):
                log.info("not following a log live: too many followed already", extra={"pod": ref})
            elif isinstance(error, KubernetesError):
                log.warning("following a container's log ended with an error; the end of the pod archives "
                            "the rest", extra={"pod": ref, "container": container, "error": str(error)[:300]})
            elif error is not None:
                raise error

    async def keep_previous(self, task_try_id: int, ref: str, container: str, archived_as: str) -> None:
        """Archive (and complete) the log of ``container``'s run before its last restart as ``archived_as``,
        read with ``previous=true`` while the kubelet still has it (only the one run before the
        current one is kept there). Never raises (logged)."""
        await keep_previous_log(self.archiver, self.api, task_try_id, ref, container, archived_as)

    async def _ship(self, task_try_id: int, container: str, path: Path, archived: int) -> int:
        """Ship what the spool holds past ``archived``; where the archive ends now."""
        try:
            size = path.stat().st_size
        except OSError:
            return archived
        if size <= archived:
            return archived
        try:
            return await self.archiver.ship(task_try_id, container, path, archived, partial=True)
        except (StorageError, DatabaseError) as exc:
            log.warning("archiving a running pod's log failed; will retry", extra={
                "task_try_id": task_try_id, "container": container, "error": str(exc)[:300]})
            try:
                return await archived_end(self.archiver.db, task_try_id, container) or archived
            except DatabaseError:
                return archived


async def keep_previous_log(archiver: LogArchiver, api: KubernetesApi, task_try_id: int, ref: str, container: str,
                            archived_as: str) -> None:
    """Archive and complete the log of ``container``'s previous run as ``archived_as`` (see
    :meth:`LiveArchive.keep_previous`); what the archive has of it already is read past."""
    try:
        done = await archived_end(archiver.db, task_try_id, archived_as)
    except DatabaseError:
        done = 0
    if done is None:
        return
    ended = asyncio.Event()
    ended.set()
    with tempfile.TemporaryDirectory(prefix="leoflow-previous-log-") as spool:
        path = Path(spool) / "log"
        try:
            with path.open("wb") as sink:
                sink.truncate(done)  # sparse, and as long as the output even if nothing more comes
                sink.seek(done)
                await api.copy_log(ref, container, sink, skip=done, previous=True)
        except (KubernetesError, OSError) as err:
            log.warning("cannot read the log of a restarted container's previous run",
                        extra={"pod": ref, "container": container, "error": str(err)[:300]})
            return
        await archiver.follow_file(task_try_id, archived_as, path, ended, archived=done)


def _retrieved(future: asyncio.Future[int]) -> None:
    """Mark a follow's outcome as seen (a term that ends may stop waiting for it first)."""
    if not future.cancelled():
        future.exception()
