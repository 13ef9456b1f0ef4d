"""uvicorn inside the service's own event loop, on a socket bound here: a port already taken
fails the service's start at once (and port 0 takes a free one, whose number `port` tells).

uvicorn's `serve` installs its own SIGINT/SIGTERM handlers; the service's process already
has FastStream's, which stop the bus side gracefully, so this server takes none and is stopped
by the service's own stop.
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import Any, Iterator

import uvicorn

from bke.adapters.tasks import cancel_and_wait

__all__ = ["HttpServer"]

log = logging.getLogger("bke.adapters.http")
STOP_TIMEOUT_S = 5.0
START_TIMEOUT_S = 10.0


class _Server(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # the process's signals belong to the service (see the module docstring)


class HttpServer:
    def __init__(self, app: Any, host: str, port: int, name: str):
        self.app, self.host, self.name = app, host, name
        self.requested_port = port
        self.port: int | None = None
        self._server: _Server | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    async def start(self) -> None:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((self.host, self.requested_port))
        except OSError:
            sock.close()
            raise
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_config=None, access_log=False, lifespan="off",
                                timeout_graceful_shutdown=1)
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]), name=f"{self.name}:http")
        # serve() has started once `started` is set; a failure ends the task instead. uvicorn
        # exposes no event for its start: polled, with a deadline.
        deadline = asyncio.get_running_loop().time() + START_TIMEOUT_S
        while not self._server.started and not self._task.done():
            if asyncio.get_running_loop().time() > deadline:
                await self.stop()
                raise TimeoutError(f"{self.name}: the HTTP server did not start within {START_TIMEOUT_S:.0f}s")
            await asyncio.sleep(0.01)
        if self._task.done():
            self._task.result()
        log.info("http on %s", self.url, extra={"service": self.name, "url": self.url})

    async def stop(self) -> None:
        if self._server is None or self._task is None:
            return
        self._server.should_exit = True
        done, _ = await asyncio.wait({self._task}, timeout=STOP_TIMEOUT_S)
        if not done:
            await cancel_and_wait([self._task], timeout=STOP_TIMEOUT_S)
        self._server = self._task = None
