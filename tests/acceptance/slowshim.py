"""A test shim in front of a real engine that makes it `factor` times slower.

A TCP relay on 127.0.0.1 (ephemeral port): bytes from the client go upstream at once; every
piece of the answer that arrives `t` seconds after the client's latest bytes is handed on at
`factor * t` — so TTFT, every inter-chunk gap, TPOT and E2E stretch by the same factor, and
the answer itself is unchanged. What a real engine cannot be made to do on demand: be slower.
"""

from __future__ import annotations

import asyncio
import threading
import time


class SlowShim:
    def __init__(self, upstream_host: str, upstream_port: int, factor: float = 1.5) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.factor = factor
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> SlowShim:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("slow shim did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

    async def _shutdown(self) -> None:
        """Every relay task ended inside the loop: a coroutine left to the garbage collector
        after the loop is closed raises in its finalizer, at whatever moment the collector
        runs (once inside pytest's own source parsing, which it crashed)."""
        tasks = [t for t in asyncio.all_tasks(self.loop) if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(
            asyncio.start_server(self._client, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self.loop.run_forever()
        finally:
            server.close()
            self.loop.run_until_complete(server.wait_closed())
            self.loop.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.close()
            return
        start = [time.monotonic()]  # the client's latest bytes (a request's start)

        async def upward() -> None:
            while data := await reader.read(65536):
                start[0] = time.monotonic()
                up_writer.write(data)
                await up_writer.drain()
            up_writer.close()

        async def downward() -> None:
            while data := await up_reader.read(65536):
                arrived = time.monotonic()
                due = start[0] + self.factor * (arrived - start[0])
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()
            writer.close()

        try:
            await asyncio.gather(upward(), downward())
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()
            up_writer.close()
