"""Log archive benchmark: archive throughput against the storage client alone, the archiver's memory,
and the first byte of a ranged read of a large archived log through the API.

Against a real S3-compatible server (moto's, its own process on loopback) and a private embedded
PostgreSQL (or ``--database-url``):

1. **A log** of ``--mb`` MB (default 256; the issue's target is measured with ``--mb 1024``) of
   realistic task output (timestamps, counters, hex ids: compressible as logs are) is written
   to a file.
2. **The client alone**: the same bytes uploaded to the same server by the storage client
   (``ObjectStore.put``), in the archiver's chunk size, one after another, uncompressed.
3. **The archiver**: :class:`leoflow.executor.log_archive.LogArchiver` ships the file as a try
   that has ended (compress, put, index each chunk in PostgreSQL) — the leader's code path. The
   process's RSS is sampled every 10 ms while it runs; growth is peak minus the RSS before.
4. **Ranged read**: the app (the API every replica serves) answers ``GET …/logs?tail=65536``
   (the last 64 KiB) ``--reads`` times; the time to the first byte and to the last is recorded,
   and the CPU seconds this process (client and server) spent per read, which, unlike the wall
   clock, does not grow with the host's load. The try also has its 1 MiB tail in PostgreSQL, as a
   real one has.
5. **Many tries at once** (``--tries``, default 1,000, of ``--try-mb`` MB each): every try's
   output is written at full speed, each to its own file, while one archiver follows them all as
   the local executor does (one ``follow_file`` per try, the default flush interval, the default
   database pool); each try ends when its file is written. Recorded: seconds from each try's end
   to its log being complete in the index (the target: all within 10 s), and the CPU seconds.

Prints one JSON object as the last line and saves ``bench/log_archive.png`` (or ``--png``).
Targets (the issue): archive throughput >= 80 % of the client alone; RSS growth < 50 MB; first
byte of the last 64 KiB of a 1 GB log < 200 ms; 1,000 concurrent tries x 1 MB all archived within
10 s of their end.

    python bench/log_archive.py               # 256 MB
    python bench/log_archive.py --mb 1024     # the target's 1 GB
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psutil  # noqa: E402
from sqlalchemy import text  # noqa: E402

from bench.private_database import benchmark_database  # noqa: E402
from leoflow.api.app import create_app  # noqa: E402
from leoflow.db.connection.database import Database  # noqa: E402
from leoflow.db.connection.engine import make_async_engine  # noqa: E402
from leoflow.executor.log_archive import LogArchiver  # noqa: E402
from leoflow.settings import load_settings  # noqa: E402
from leoflow.storage.log_chunks import CHUNK_BYTES  # noqa: E402
from leoflow.storage.objects import ObjectStore  # noqa: E402
from tests.api.live import serve  # noqa: E402
from tests.executor.world import seed_tries, set_term  # noqa: E402
from tests.harness.s3_server import S3Server, aws_environment  # noqa: E402

TOKEN = "bench-read-token-0123456789"


def write_log(path: Path, megabytes: int) -> int:
    """``megabytes`` MB of log lines like a busy task's (compressible, not trivially)."""
    target = megabytes * 1_000_000
    with path.open("wb") as f:
        written, i = 0, 0
        while written < target:
            block = "".join(
                f"2026-11-29T08:{(i + k) // 60 % 60:02d}:{(i + k) % 60:02d}.{(i + k) % 1000:03d}Z INFO "
                f"stage=transform partition={(i + k) % 977} rows={(i + k) * 7919 % 100_000} "
                f"id={os.urandom(6).hex()} status=ok\n" for k in range(2000)).encode()
            f.write(block)
            written += len(block)
            i += 2000
    return path.stat().st_size


class RssSampler:
    """Samples this process's resident memory every 10 ms in a thread."""

    def __init__(self) -> None:
        self.proc = psutil.Process()
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.started = time.monotonic()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - self.started, self.proc.memory_info().rss))
            time.sleep(0.01)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def client_alone(store: ObjectStore, path: Path) -> float:
    """Seconds to upload ``path`` in archiver-sized objects with the storage client alone."""
    started = time.monotonic()
    with path.open("rb") as f:
        n = 0
        while piece := f.read(CHUNK_BYTES):
            await store.put(f"alone/{n:08d}", piece)
            n += 1
    return time.monotonic() - started


async def archive(store: ObjectStore, url: str, path: Path) -> tuple[float, int, dict[str, Any]]:
    settings = load_settings({"LEOFLOW_DATABASE_URL": url})
    engine = make_async_engine(settings.database, pool_size=2)
    try:
        await set_term(engine, "default", 1)
        [t] = await seed_tries(engine, 1, dag="etl", run="r1", task_prefix="extract")
        async with engine.begin() as conn:  # the tail a real try keeps in PostgreSQL (1 MiB by default)
            tail = path.read_bytes()[-1024 * 1024:] if path.stat().st_size < 2**24 else _tail(path, 1024 * 1024)
            await conn.execute(text("INSERT INTO task_logs (task_try_id, content, truncated, size_bytes) "
                                    "VALUES (:id, :c, true, :n)"),
                               {"id": t.task_try_id, "c": tail.decode(errors="replace"), "n": len(tail)})
        ended = asyncio.Event()
        ended.set()
        base = psutil.Process().memory_info().rss
        with RssSampler() as rss:
            started = time.monotonic()
            await LogArchiver(store, Database(engine), "default").follow_file(t.task_try_id, "task", path, ended)
            took = time.monotonic() - started
        peak = max(r for _, r in rss.samples)
        return took, t.task_try_id, {"rss_before_mb": round(base / 1e6, 1), "rss_peak_mb": round(peak / 1e6, 1),
                                     "rss_growth_mb": round((peak - base) / 1e6, 1),
                                     "_rss": [(s, r / 1e6) for s, r in rss.samples]}
    finally:
        await engine.dispose()


def _tail(path: Path, n: int) -> bytes:
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - n))
        return f.read()


async def many_tries(store: ObjectStore, url: str, workdir: Path, tries: int, megabytes: float) -> dict[str, Any]:
    """``tries`` tries printing ``megabytes`` MB each at once, archived as the local executor does."""
    settings = load_settings({"LEOFLOW_DATABASE_URL": url})
    engine = make_async_engine(settings.database, pool_size=settings.database.pool_size)
    line = (b"2026-11-29T08:00:00.000Z INFO stage=transform partition=%05d rows=%07d status=ok "
            + b"x" * 20 + b"\n")
    per_try = int(megabytes * 1_000_000)
    try:
        seeded = await seed_tries(engine, tries, dag="many", run="r1", task_prefix="t")
        archiver = LogArchiver(store, Database(engine), "default", flush_interval=settings.log_archive.flush_interval)
        loop = asyncio.get_running_loop()
        ended_at: dict[int, float] = {}
        done_at: dict[int, float] = {}
        events = {t.task_try_id: asyncio.Event() for t in seeded}
        paths = {t.task_try_id: workdir / f"try-{t.task_try_id}.log" for t in seeded}
        for path in paths.values():
            path.touch()

        def end(task_try_id: int) -> None:
            ended_at[task_try_id] = time.monotonic()
            events[task_try_id].set()

        def write_all() -> None:
            """The tries' output, written round-robin in 64 KiB pieces (all of them printing at once)."""
            files = {tid: p.open("ab") for tid, p in paths.items()}
            written = dict.fromkeys(files, 0)
            i = 0
            while files:
                for tid in list(files):
                    piece = b"".join(line % (i % 99_999, (i * 7919) % 9_999_999) for _ in range(600))
                    i += 1
                    piece = piece[:per_try - written[tid]]
                    files[tid].write(piece)
                    written[tid] += len(piece)
                    if written[tid] >= per_try:
                        files.pop(tid).close()
                        loop.call_soon_threadsafe(end, tid)

        async def follow(task_try_id: int) -> None:
            await archiver.follow_file(task_try_id, "task", paths[task_try_id], events[task_try_id])
            done_at[task_try_id] = time.monotonic()

        cpu = time.process_time()
        started = time.monotonic()
        followers = [asyncio.create_task(follow(tid)) for tid in paths]
        await asyncio.to_thread(write_all)
        wrote = time.monotonic() - started
        await asyncio.gather(*followers)
        took = time.monotonic() - started
        async with engine.connect() as conn:
            complete = (await conn.execute(text(
                "SELECT count(*) FROM log_archives WHERE complete AND size_bytes = :n AND task_try_id = ANY(:ids)"),
                {"n": per_try, "ids": list(paths)})).scalar_one()
        lags = sorted(done_at[tid] - ended_at[tid] for tid in paths)
        for path in paths.values():
            path.unlink()
        return {"tries": tries, "bytes_per_try": per_try, "complete": complete, "write_s": round(wrote, 2),
                "all_archived_s": round(took, 2), "lag_s_p50": round(statistics.median(lags), 2),
                "lag_s_p99": round(lags[int(len(lags) * 0.99) - 1], 2), "lag_s_max": round(lags[-1], 2),
                "cpu_s": round(time.process_time() - cpu, 1),
                "flush_interval_s": settings.log_archive.flush_interval, "pool_size": settings.database.pool_size,
                "load": round(os.getloadavg()[0], 1)}
    finally:
        await engine.dispose()


def ranged_reads(url: str, archive_url: str, reads: int, size: int) -> dict[str, Any]:
    settings = load_settings({"LEOFLOW_DATABASE_URL": url, "LEOFLOW_API_TOKENS": f"bench:read:{TOKEN}",
                              "LEOFLOW_LOG_ARCHIVE_URL": archive_url, "LEOFLOW_LOG_FORMAT": "text",
                              "LEOFLOW_DB_POOL_SIZE": "4"})
    first, whole, cpu = [], [], []
    with serve(create_app(settings)) as base, httpx.Client(base_url=base, timeout=60) as http:
        path = "/api/v2/dags/etl/runs/r1/tasks/extract0/logs"
        for _ in range(reads):
            started, cpu_before = time.monotonic(), time.process_time()
            with http.stream("GET", path, params={"tail": 65536},
                             headers={"Authorization": f"Bearer {TOKEN}"}) as answer:
                assert answer.status_code == 200, answer.read()
                body = bytearray()
                for piece in answer.iter_bytes():
                    if not body:
                        first.append(time.monotonic() - started)
                    body.extend(piece)
            whole.append(time.monotonic() - started)
            cpu.append(time.process_time() - cpu_before)
            assert len(body) == min(65536, size)
    return {"reads": reads, "first_byte_ms_p50": round(statistics.median(first) * 1000, 1),
            "first_byte_ms_max": round(max(first) * 1000, 1),
            "whole_ms_p50": round(statistics.median(whole) * 1000, 1),
            "cpu_ms_per_read_p50": round(statistics.median(cpu) * 1000, 1), "load": round(os.getloadavg()[0], 1)}


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(tempfile.mkdtemp(prefix="leoflow-bench-archive-"))
    log = workdir / "output.log"
    size = write_log(log, args.mb)
    result: dict[str, Any] = {"benchmark": "log_archive", "cpus": os.cpu_count(), "log_bytes": size,
                              "chunk_bytes": CHUNK_BYTES, "load_before": round(os.getloadavg()[0], 1)}
    with S3Server() as s3, aws_environment(s3.environment()), \
            benchmark_database(args.database_url, prefix="leoflow-bench-archive-db-") as url:
        s3.create_bucket("bench")
        archive_url = "s3://bench/archive"
        store = ObjectStore(archive_url)
        alone = asyncio.run(client_alone(store, log))
        # The server (moto) keeps objects in its memory: the client's copy goes before the archiver's run.
        asyncio.run(store.delete(asyncio.run(store.keys("alone/"))))
        took, _, memory = asyncio.run(archive(store, url, log))
        stored = sum(s3.client().head_object(Bucket="bench", Key=k)["ContentLength"]
                     for k in s3.keys("bench", "archive/logs/"))
        result.update({
            "client_alone_s": round(alone, 2), "client_alone_mb_s": round(size / 1e6 / alone, 1),
            "archiver_s": round(took, 2), "archiver_mb_s": round(size / 1e6 / took, 1),
            "archiver_vs_client": round(alone / took, 3), "stored_bytes": stored,
            "compression_ratio": round(size / stored, 1), **memory,
            "ranged_read_last_64k": ranged_reads(url, archive_url, args.reads, size),
        })
        if args.tries:
            result["many_tries"] = asyncio.run(many_tries(store, url, workdir, args.tries, args.try_mb))
    log.unlink()
    workdir.rmdir()
    result["load_after"] = round(os.getloadavg()[0], 1)
    result["targets"] = {"throughput_ge_80pct": result["archiver_vs_client"] >= 0.8,
                         "rss_growth_lt_50mb": result["rss_growth_mb"] < 50,
                         "first_byte_lt_200ms": result["ranged_read_last_64k"]["first_byte_ms_p50"] < 200}
    if "many_tries" in result:
        many = result["many_tries"]
        result["targets"]["many_tries_within_10s"] = many["complete"] == many["tries"] and many["lag_s_max"] < 10
    return result


def plot(result: dict[str, Any], png: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rss = result.pop("_rss")
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.bar(["client alone", "archiver"], [result["client_alone_mb_s"], result["archiver_mb_s"]],
             color=["tab:grey", "tab:blue"])
    left.set_ylabel("MB/s of log (uncompressed)")
    left.set_title(f"{result['log_bytes'] / 1e6:,.0f} MB log, archiver {result['archiver_vs_client']:.0%} "
                   "of the client")
    right.plot([s for s, _ in rss], [r for _, r in rss])
    right.set_xlabel("seconds")
    right.set_ylabel("RSS (MB)")
    right.set_title(f"RSS while archiving: +{result['rss_growth_mb']} MB")
    fig.tight_layout()
    fig.savefig(png, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", help="use this empty database instead of a private server")
    parser.add_argument("--mb", type=int, default=256, help="size of the log in MB")
    parser.add_argument("--reads", type=int, default=20, help="ranged reads of the last 64 KiB")
    parser.add_argument("--tries", type=int, default=1000, help="concurrent tries of the many-tries row (0: skip)")
    parser.add_argument("--try-mb", type=float, default=1.0, help="MB each of those tries prints")
    parser.add_argument("--png", type=Path, default=ROOT / "bench" / "log_archive.png")
    args = parser.parse_args()
    result = run(args)
    plot(result, args.png)
    result.pop("_rss", None)
    result["png"] = str(args.png)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
