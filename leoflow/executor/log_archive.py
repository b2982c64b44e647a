"""Archiving a try's output to object storage while it runs, and completing it when it ends.

A :class:`LogArchiver` ships one container's output (the local executor's ``output.log``) into
compressed chunks (:mod:`leoflow.storage.log_chunks`) and indexes each in PostgreSQL after its
object is written (:mod:`leoflow.db.stores.log_archive`): a chunk goes as soon as
:data:`~leoflow.storage.log_chunks.CHUNK_BYTES` are there, and whatever is new after
``LEOFLOW_LOG_ARCHIVE_FLUSH_INTERVAL`` seconds goes too, so a running try's log is in the archive
within seconds (Airflow's users wait for the end; Argo's lose it with the pod). When the source
has ended, the rest goes and the log is marked complete.

Failure semantics:

- **The try never waits on it.** Archiving runs beside the try in its own guarded task; the
  outcome is reported whatever the storage does, and the tail in PostgreSQL stays as before.
- **Storage failures** (wrong credentials, a missing bucket, refusals mid-stream, an endpoint
  that hangs: every request is bounded, see :mod:`leoflow.storage.objects`) are retried with
  backoff from :data:`RETRY_BASE` doubling to :data:`RETRY_CAP` seconds, each one counted
  (``leoflow_log_archive_failures_total{reason}``) and logged with the bucket and the reason; the
  archive resumes where its index ends. After the source ended, it gives up after
  :data:`GIVE_UP_AFTER` seconds of failures (logged, ``leoflow_log_archive_abandoned_total``): the
  log stays incomplete in the index, what was archived stays readable.
- **Exactly once.** Where to continue is read from the index, never remembered: a writer whose
  chunk was indexed by someone else first (a new leader that adopted the try) re-reads the index
  and carries on from there; an object written but not indexed (killed between the two) is
  rewritten with the same bytes under the same name.
- **Bounded memory**: one chunk, compressed, per log being archived, whatever the log's size or
  its lines' (a 100 MB line is just bytes; binary output is archived as written).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from leoflow import tracing
from leoflow.db.connection.database import Connection, Database
from leoflow.db.stores.log_archive import index as archive_store
from leoflow.errors import DatabaseError
from leoflow.metrics.log_archive import ARCHIVE_FAILURES, ARCHIVED_BYTES, ARCHIVED_OBJECTS, ARCHIVES_ABANDONED
from leoflow.storage.log_chunks import CHUNK_BYTES, READ_BYTES, ChunkCompressor, chunk_key
from leoflow.storage.objects import ObjectStore, StorageError, StorageRefused

log = logging.getLogger(__name__)

#: Seconds before the first retry of a failed request, doubling up to :data:`RETRY_CAP`: a
#: storage blip costs a second; an outage is probed twice a minute, not hammered.
RETRY_BASE = 1.0
RETRY_CAP = 30.0
#: Seconds of failures after the source ended before the archive is abandoned incomplete: long
#: enough to ride out a storage outage or a credential fix, short enough that archivers of
#: finished tries do not pile up behind a bucket that is gone for good.
GIVE_UP_AFTER = 600.0
#: Seconds between looks at a running try's output.
POLL_INTERVAL = 1.0
#: Index transactions one archiver runs at once. The archiver shares its pool with the leader's
#: scheduling; a thousand tries ending together each asked for a connection at once, waited past
#: the pool's timeout, failed and backed off for up to 30 s (1,000 x 1 MB: the last log complete
#: 105 s after its try ended). Queued here instead, they go in turn and the pool keeps room.
INDEX_PARALLEL = 4
#: Chunks compressed at once ahead of the upload, each in a worker thread: two, the cores of a small
#: leader; memory is this many compressed chunks more per log being archived.
COMPRESS_AHEAD = 2
#: A whole short log up to this size is compressed on the event loop (a few hundred microseconds at
#: most), larger ones in a worker thread: the hop to a thread costs more than compressing a few lines.
INLINE_COMPRESS_BYTES = 64 * 1024
#: Seconds a short log's index row waits for others to share its transaction (see _WholeLogIndex).
WHOLE_GATHER = 0.1
#: A chunk being compressed: its bytes and where it ends (None: nothing there to take).
Pending = asyncio.Future[tuple[bytes, int] | None]


class ArchiveAbandoned(Exception):
    """The storage kept failing after the source ended (the archive stays incomplete)."""


class LogArchiver:
    """Ships growing files into the archive of ``store`` (see the module docstring)."""

    def __init__(self, store: ObjectStore, db: Database, cluster: str, *, flush_interval: float = 5.0,
                 chunk_bytes: int = CHUNK_BYTES, retry_base: float = RETRY_BASE, retry_cap: float = RETRY_CAP,
                 give_up_after: float = GIVE_UP_AFTER, poll_interval: float = POLL_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.db = db
        self.cluster = cluster
        self.flush_interval = flush_interval
        self.chunk_bytes = chunk_bytes
        self.retry_base = retry_base
        self.retry_cap = retry_cap
        self.give_up_after = give_up_after
        self.poll_interval = poll_interval
        self.clock = clock
        self._index_gate = asyncio.Semaphore(INDEX_PARALLEL)
        self._whole = _WholeLogIndex(self._index)

    async def follow_file(self, task_try_id: int, container: str, path: Path, ended: asyncio.Event, *,
                          archived: int | None = None) -> None:
        """Archive ``path`` while it grows, then the rest once ``ended`` is set, and complete it.

        ``archived``: the caller opened the archive and found that many bytes in it; its file may
        hold anything below them (a sparse spool), so the log is then never archived whole from
        byte 0 (that object's name would be taken for bytes it does not hold), only resumed.

        Never raises for the storage or the database (it logs and retries, or gives up); returns
        once the log is complete or abandoned.
        """
        began = self.clock()
        if archived is None and await self._archive_short(task_try_id, container, path, ended, began):
            return
        resumed = await self._resume(task_try_id, container, ended)
        if resumed is None:
            return
        archived = resumed
        last_ship = began
        failing_since: float | None = None
        delay = self.retry_base
        while True:
            final = ended.is_set()
            size = _size(path)
            flush = size > archived and (final or self.clock() - last_ship >= self.flush_interval)
            try:
                if flush or size - archived >= self.chunk_bytes:
                    archived = await self.ship(task_try_id, container, path, archived, partial=flush)
                    last_ship = self.clock() if flush else last_ship
                if final:
                    await self._complete(task_try_id, container, path)
                    return
                failing_since, delay = None, self.retry_base
            except (StorageError, DatabaseError) as exc:
                failing_since = failing_since if failing_since is not None else self.clock()
                self._failed(exc, task_try_id, container, delay)
                if final and self.clock() - failing_since >= self.give_up_after:
                    ARCHIVES_ABANDONED.inc()
                    log.error("gave up archiving a log: the object storage kept failing",
                              extra={"task_try_id": task_try_id, "container": container,
                                     "bucket": self.store.url, "archived_bytes": archived})
                    return
                await (asyncio.sleep(delay) if final else _wait(ended, delay))
                delay = min(delay * 2, self.retry_cap)
                reread = await self._resume(task_try_id, container, ended)
                if reread is None:
                    return
                archived = reread
                continue
            if not final:
                await _wait(ended, self.poll_interval)

    async def _archive_short(self, task_try_id: int, container: str, path: Path, ended: asyncio.Event,
                             began: float) -> bool:
        """Archive a short log whole at its end: True when done so, False to take the chunked path.

        Most tries print little and end within seconds. Opening the index at their start and
        completing it at their end cost two transactions per try (+17 % of the replica's CPU on a
        chain of ``true`` tasks); a log that ends before it reaches a chunk or the flush interval is
        instead written as one object (none if empty) and indexed, complete, by one statement shared
        with the other short logs that ended within :data:`WHOLE_GATHER` seconds. A log
        that grows past either bound, an archive another writer opened first (an adopted try) or a
        failure goes the chunked way, which resumes from the index.
        """
        while not ended.is_set():
            size = _size(path)
            if size >= self.chunk_bytes or (size > 0 and self.clock() - began >= self.flush_interval):
                return False
            await _wait(ended, self.poll_interval)
        size = _size(path)
        if size >= self.chunk_bytes:
            return False
        key: str | None = None
        stored = 0
        try:
            if size > 0:
                data = (_compress_range(path, 0, size) if size <= INLINE_COMPRESS_BYTES
                        else await asyncio.to_thread(_compress_range, path, 0, size))
                if data is None or data[1] != size:  # the file changed under us: the chunked path reads it again
                    return False
                compressed = data[0]
                key, stored = chunk_key(self.cluster, task_try_id, container, 0, size), len(compressed)
                with tracing.span("leoflow.log_archive.upload", container=container, bytes=stored):
                    await self.store.put(key, compressed)
            if not await self._whole.index(archive_store.WholeLog(task_try_id, container, size, stored, key)):
                return False
        except (StorageError, DatabaseError) as exc:
            self._failed(exc, task_try_id, container, 0.0)
            return False
        if key is not None:
            ARCHIVED_OBJECTS.inc()
            ARCHIVED_BYTES.inc(size)
        return True

    async def ship(self, task_try_id: int, container: str, path: Path, archived: int, *, partial: bool) -> int:
        """Archive ``path`` from byte ``archived`` in whole chunks (and the last, smaller one if ``partial``).

        Work overlaps in three stages: the next :data:`COMPRESS_AHEAD` chunks are compressed in
        worker threads (zlib runs outside the GIL, so on two cores two chunks compress at once —
        compression at level 1 is the slowest stage, about 100 MB/s a core), the current one is
        uploaded, and the one before it is indexed, so neither the upload waits for the CPU or the
        database nor the other way round (one index transaction per MiB was a fifth of a 1 GB log's
        archiving when it waited its turn). Indexing stays in order, and a chunk is indexed only
        after its object is written. An object uploaded ahead of its predecessor's index row is
        named by its whole byte range (:func:`chunk_key`), so if another writer moved the archive
        meanwhile, that object is at worst one nobody points at — never a different content under a
        name the index uses. Returns where the archive ends now (read back from the index when
        another writer moved it).
        """
        size = _size(path)
        ahead: deque[tuple[int, Pending]] = deque()
        self._fill(ahead, path, archived, size, partial)
        indexing: asyncio.Future[int | None] | None = None
        try:
            while True:
                data = await ahead.popleft()[1] if ahead else None
                if data is not None:
                    compressed, end = data
                    if ahead and ahead[0][0] != end:  # the file shrank under the chunk: start over from its end
                        await _discard_all(ahead)
                    self._fill(ahead, path, ahead[-1][0] if ahead else end, size, partial, after=bool(ahead))
                    key = chunk_key(self.cluster, task_try_id, container, archived, end)
                    with tracing.span("leoflow.log_archive.upload", container=container, bytes=len(compressed)):
                        await self.store.put(key, compressed)
                moved = await indexing if indexing is not None else None
                indexing = None
                if moved is not None:  # another writer moved the archive's end: carry on from the index
                    await _discard_all(ahead)
                    if moved < 0:  # complete
                        return -moved - 1
                    archived = moved
                    self._fill(ahead, path, archived, size, partial)
                    continue
                if data is None:  # nothing more to take (or the file shrank or vanished)
                    break
                indexing = asyncio.ensure_future(self._append(task_try_id, container, archived, end,
                                                              len(compressed), key))
                archived = end
        finally:
            await _discard_all(ahead)
            if indexing is not None:  # a failed upload: let the index write before it finish
                await asyncio.wait({indexing})
                with contextlib.suppress(Exception):
                    indexing.result()
        return archived

    def _fill(self, ahead: deque[tuple[int, Pending]], path: Path, start: int, size: int, partial: bool, *,
              after: bool = False) -> None:
        """Start compressing chunks from ``start`` (or from the end of the chunk starting there, if
        ``after``) until :data:`COMPRESS_AHEAD` are in flight or none is left to take."""
        if after:
            start = min(size, start + self.chunk_bytes)
        while len(ahead) < COMPRESS_AHEAD:
            pending = self._compress(path, start, size, partial)
            if pending is None:
                return
            ahead.append((start, pending))
            start = min(size, start + self.chunk_bytes)

    async def _append(self, task_try_id: int, container: str, start: int, end: int, stored: int,
                      key: str) -> int | None:
        """Index one written chunk: None when it was appended; otherwise where another writer left the
        archive (its size, or ``-(size + 1)`` when it is complete)."""
        async with self._index() as conn:
            if await archive_store.append_chunk(conn, task_try_id, container, start=start, end=end,
                                                stored_bytes=stored, object_key=key):
                ARCHIVED_OBJECTS.inc()
                ARCHIVED_BYTES.inc(end - start)
                return None
            current = await archive_store.open_log(conn, task_try_id, container)
        return -(current.size_bytes + 1) if current.complete else current.size_bytes

    def _compress(self, path: Path, start: int, size: int, partial: bool) -> Pending | None:
        """The next chunk from ``start``, compressing in a worker thread; None when there is none to take."""
        if start >= size or (not partial and size - start < self.chunk_bytes):
            return None
        end = min(size, start + self.chunk_bytes)
        return asyncio.ensure_future(asyncio.to_thread(_compress_range, path, start, end))

    async def _resume(self, task_try_id: int, container: str, ended: asyncio.Event) -> int | None:
        """Where the archive ends (None: it is complete already); waits out a database outage."""
        delay = self.retry_base
        while True:
            try:
                async with self._index() as conn:
                    state = await archive_store.open_log(conn, task_try_id, container)
                return None if state.complete else state.size_bytes
            except DatabaseError as exc:
                log.warning("cannot read the log archive's index yet; will retry",
                            extra={"task_try_id": task_try_id, "error": str(exc)[:300], "retry_in": delay})
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.retry_cap)

    async def _complete(self, task_try_id: int, container: str, path: Path) -> None:
        size = _size(path)
        async with self._index() as conn:
            if not await archive_store.complete_log(conn, task_try_id, container, size_bytes=size):
                state = await archive_store.open_log(conn, task_try_id, container)
                if not state.complete and state.size_bytes < size:
                    raise StorageNotCaughtUp(f"archive ends at {state.size_bytes} of {size} bytes")

    @contextlib.asynccontextmanager
    async def _index(self) -> AsyncIterator[Connection]:
        """A transaction on the archive's index, at most :data:`INDEX_PARALLEL` at once per archiver."""
        async with self._index_gate, self.db.transaction() as conn:
            yield conn

    def _failed(self, exc: Exception, task_try_id: int, container: str, delay: float) -> None:
        reason = "refused" if isinstance(exc, StorageRefused) else "unavailable"
        if isinstance(exc, StorageError):
            ARCHIVE_FAILURES.labels(reason=reason).inc()
        log.warning("archiving a log failed; will retry", extra={
            "task_try_id": task_try_id, "container": container, "bucket": self.store.url,
            "reason": reason, "error": str(exc)[:500], "retry_in": delay})


class _WholeLogIndex:
    """Indexes the short logs of an archiver together: those ended within :data:`WHOLE_GATHER`
    seconds of the first go in one transaction (a chain of short tries, one after the other,
    shared its index writes ten to one; a thousand tries ending at once, a thousand to a few)."""

    def __init__(self, transaction: Callable[[], contextlib.AbstractAsyncContextManager[Connection]]) -> None:
        #: The archiver's index transaction (at most INDEX_PARALLEL at once, shared with its chunks).
        self._transaction = transaction
        self._waiting: dict[tuple[int, str], tuple[archive_store.WholeLog, asyncio.Future[bool]]] = {}
        self._writer: asyncio.Task[None] | None = None

    async def index(self, whole: archive_store.WholeLog) -> bool:
        """True once ``whole`` is indexed; False if another writer opened its archive first (or this
        one is indexing the same log already); raises the database's error for the whole batch."""
        key = (whole.task_try_id, whole.container)
        if key in self._waiting:
            return False
        done: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[key] = (whole, done)
        if self._writer is None:
            self._writer = asyncio.ensure_future(self._write())
        return await done

    async def _write(self) -> None:
        await asyncio.sleep(WHOLE_GATHER)
        batch, self._waiting, self._writer = self._waiting, {}, None
        try:
            async with self._transaction() as conn:
                indexed = await archive_store.archive_whole_logs(conn, [whole for whole, _ in batch.values()])
        except BaseException as exc:
            for _, done in batch.values():
                if not done.done():
                    done.set_exception(exc if isinstance(exc, Exception) else DatabaseError("cancelled"))
            if not isinstance(exc, Exception):
                raise
            return
        for key, (_, done) in batch.items():
            if not done.done():
                done.set_result(key in indexed)


class StorageNotCaughtUp(StorageError):
    """The archive does not reach the end of the output yet (shipped again, then completed)."""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _compress_range(path: Path, start: int, end: int) -> tuple[bytes, int] | None:
    """Bytes ``[start, end)`` of ``path`` as one gzip member, read in pieces; None if they are not there."""
    packer = ChunkCompressor()
    try:
        with path.open("rb") as f:
            f.seek(start)
            while packer.raw_bytes < end - start:
                piece = f.read(min(READ_BYTES, end - start - packer.raw_bytes))
                if not piece:
                    break
                packer.add(piece)
    except OSError:
        return None
    if packer.raw_bytes == 0:
        return None
    return packer.finish(), start + packer.raw_bytes


async def _discard_all(ahead: deque[tuple[int, Pending]]) -> None:
    """Let the chunks being compressed finish and drop them (a worker thread cannot be interrupted)."""
    if ahead:
        await asyncio.wait({pending for _, pending in ahead})
        ahead.clear()


async def _wait(event: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``event`` is set meanwhile."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass
