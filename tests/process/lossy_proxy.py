"""A TCP proxy that delays what it forwards and stalls a fraction of it: latency and packet loss
between a worker host and PostgreSQL on a kernel without ``netem`` (``tc qdisc … netem`` answers
"Specified qdisc kind is unknown" there).

A proxy sees byte streams, not packets, so it cannot lose a packet the way ``netem loss 5%``
does. What a lost segment does to a TCP connection is make the bytes behind it wait for its
retransmission (an RTO: 200 ms at least on Linux, longer after repeated losses) while nothing is
lost, duplicated or reordered. So the proxy approximates it that way:

- every chunk it reads is delivered ``added_rtt / 2`` later, in each direction: a round trip
  takes ``added_rtt`` longer, as ``netem delay`` of that much on one end of the link would make
  it;
- a random ``loss`` fraction of the chunks is held back a further 200–1000 ms, an RTO-like wait,
  and every chunk behind a held one in its direction waits for it (in-order delivery, as TCP's).

The unit is the proxy's read, not a 1,448-byte segment: a large result read in one chunk is
stalled as a whole 5 % of the time, where netem would stall it with a chance of 1 − 0.95ⁿ for
its n packets. For the small statements and answers of a worker (claims, heartbeats, outcomes)
a read is a packet or two, and the two agree.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from collections.abc import Coroutine
from typing import Any

#: Reads of up to this many bytes are forwarded as one chunk.
CHUNK = 64 * 1024


class LossyProxy:
    """Forwards connections made to ``listen_host`` (on :attr:`port`, picked at start) to
    ``target``, healthy until :meth:`degrade` and again after :meth:`heal`.

    It runs an event loop on a thread of its own, so that the test's thread can wait and
    measure meanwhile; :meth:`close` ends every connection and the thread.
    """

    def __init__(self, listen_host: str, target: tuple[str, int], *, seed: int = 0) -> None:
        self.listen_host = listen_host
        self.target = target
        self.port = 0
        self._random = random.Random(seed)  # the loop's thread alone draws from it
        # One tuple, replaced whole: the test's thread sets it, the loop's reads it per chunk.
        self._fault: tuple[float, float, tuple[float, float]] = (0.0, 0.0, (0.0, 0.0))
        #: Chunks forwarded, chunks stalled, connections accepted (read by the test for its figures).
        self.chunks = 0
        self.stalled = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="lossy-proxy", daemon=True)
        self._ready = threading.Event()
        self._failed: BaseException | None = None
        self._server: asyncio.Server | None = None
        self._streams: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # the pipes and their deliveries
        self._handlers: set[asyncio.Task[Any]] = set()  # one per connection

    # ---- the test's side -----------------------------------------------------------------------

    def start(self) -> LossyProxy:
        """Listen, and return once connections are accepted. Raises what binding raised."""
        self._thread.start()
        if not self._ready.wait(10):
            raise TimeoutError("the proxy did not start within 10s")
        if self._failed is not None:
            raise self._failed
        return self

    def degrade(self, added_rtt: float, loss: float, stall: tuple[float, float] = (0.2, 1.0)) -> None:
        """From now on, each round trip takes ``added_rtt`` seconds longer, and a ``loss``
        fraction of the chunks waits a further ``stall`` (a uniform draw in that range)."""
        self._fault = (added_rtt / 2, loss, stall)

    def heal(self) -> None:
        """Forward as fast as possible again (chunks already held keep their delivery time)."""
        self._fault = (0.0, 0.0, (0.0, 0.0))

    def close(self) -> None:
        """Drop every connection, stop listening and end the thread."""
        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(timeout=10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._loop.is_closed() and not self._loop.is_running():
            self._loop.close()

    # ---- the loop's side -----------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, self.listen_host, 0)
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
        except BaseException as exc:  # handed to start(), which raises it on the test's thread
            self._failed = exc
            self._ready.set()
            self._loop.close()
            return
        self._ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for stream in list(self._streams):
            stream.transport.abort()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._handlers:
            await asyncio.wait(self._handlers, timeout=5)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._streams.add(client)
        this = asyncio.current_task()
        assert this is not None  # the server runs each connection's handler as a task
        # Not cancelled at close (asyncio's streams of Python 3.11 fail on a cancelled handler):
        # its pipes are, and it then ends on its own.
        self._handlers.add(this)
        upstream: asyncio.StreamWriter | None = None
        pipes: list[asyncio.Task[None]] = []
        try:
            upstream_reader, upstream = await asyncio.open_connection(*self.target)
            self._streams.add(upstream)
            pipes = [
                self._task(self._pipe(client_reader, upstream)),
                self._task(self._pipe(upstream_reader, client)),
            ]
            # The first direction to fail ends both, as a broken path would.
            await asyncio.wait(pipes, return_when=asyncio.FIRST_EXCEPTION)
        except OSError:
            pass  # PostgreSQL refused the connection: the client sees it closed
        finally:
            for stream in (client, upstream):
                if stream is not None:
                    self._streams.discard(stream)
                    stream.transport.abort()
            for pipe in pipes:
                pipe.cancel()
            self._handlers.discard(this)

    def _task(self, work: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task of this proxy: cancelled at close, and its failure (a reset connection) is
        taken as the end of its stream, not reported as never retrieved."""
        task = self._loop.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._forget)
        return task

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a connection reset is how a stream may end

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Forward one direction: each chunk is released at its own time, never before the one
        read ahead of it (TCP delivers in order), and written once released."""
        released: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        delivery = self._task(self._deliver(released, writer))
        latest = 0.0
        try:
            while data := await reader.read(CHUNK):
                one_way, loss, (shortest, longest) = self._fault
                at = self._loop.time() + one_way
                if loss and self._random.random() < loss:
                    self.stalled += 1
                    at += self._random.uniform(shortest, longest)
                latest = max(latest, at)
                self.chunks += 1
                released.put_nowait((latest, data))
            released.put_nowait(None)  # the end of the stream follows the last chunk
            await delivery
        finally:
            delivery.cancel()  # a no-op once delivered

    @staticmethod
    async def _deliver(
        released: asyncio.Queue[tuple[float, bytes] | None], writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        while (item := await released.get()) is not None:
            at, data = item
            if (wait := at - loop.time()) > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
