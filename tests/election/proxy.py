"""A fault-injecting TCP proxy: forwards until partitioned, then silently stops (sockets stay open).

Models a blackholed network path between one replica and PostgreSQL: nothing is closed, nothing
is refused, bytes simply stop flowing in both directions (new connections are accepted and then
left hanging too). ``heal()`` resumes forwarding of everything buffered meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

from leoflow.standalone.embedded import free_port


class PartitionProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._open = threading.Event()
        self._open.set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="partition-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._flowing: asyncio.Event | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def __enter__(self) -> PartitionProxy:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    async def _close(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for writer in list(self._writers):
            with contextlib.suppress(Exception):
                await writer.wait_closed()
        await self._server.wait_closed()

    def partition(self) -> None:
        assert self._flowing is not None
        self._loop.call_soon_threadsafe(self._flowing.clear)

    def heal(self) -> None:
        assert self._flowing is not None
        self._loop.call_soon_threadsafe(self._flowing.set)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)  # type: ignore[arg-type]
        self._writers.add(writer)
        try:
            await self._flowing.wait()
            try:
                up_reader, up_writer = await asyncio.open_connection(*self.target)
            except OSError:
                writer.close()
                return
            self._writers.add(up_writer)
            await asyncio.gather(self._pump(reader, up_writer), self._pump(up_reader, writer),
                                 return_exceptions=True)
        finally:
            self._tasks.discard(task)  # type: ignore[arg-type]

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self._flowing is not None
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self._flowing.wait()
                writer.write(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                writer.close()
