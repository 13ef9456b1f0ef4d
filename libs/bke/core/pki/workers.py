"""A small process pool with one pipe per worker, scheduled by its caller.

Why not ``concurrent.futures.ProcessPoolExecutor``: its work and results pass through helper
threads in the calling process. When the caller signs certificates itself between handing out
chunks (see ``issuance._run``), it holds the GIL and those threads wait up to the interpreter's
switch interval (5 ms) for each hand-over; measured at 5,000 nodes, workers sat idle between
chunks and work could not be taken back once queued. Here the caller writes each job straight
into a worker's pipe and reads results when it chooses: no threads, no hidden queue.

A worker first runs ``warm_up(*args, until=...)`` (``until()`` turns true as soon as its first job
is waiting), then serves jobs until it reads ``None`` or its pipe closes. A job's exception is sent
back and re-raised in the caller; a worker that dies raises :class:`WorkerLost` there.
"""
from __future__ import annotations

import multiprocessing
import pickle
import queue
import threading
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from .errors import WorkerLost

__all__ = ["WorkerPool"]

_JOIN_SECONDS = 5.0


def _serve(conn: Connection, job: Callable[[Any], Any], warm_up: Callable[..., None], args: tuple) -> None:
    warm_up(*args, until=conn.poll)
    # Replies are written by a thread: a reply (~1 MB for a big chunk) is larger than the pipe's
    # buffer, and the caller reads only between its own chunks; this way the worker goes on
    # with its next job instead of blocking in the write.
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    writer = threading.Thread(target=_write_all, args=(conn, outbox), daemon=True)
    writer.start()
    try:
        while True:
            try:
                work = conn.recv()
            except EOFError:  # the caller is gone
                return
            if work is None:
                return
            try:
                reply = _pickled((True, job(work)))
            except BaseException as exc:  # noqa: BLE001 - the caller decides; this loop must go on
                reply = _pickled((False, exc))
            outbox.put(reply)
    finally:
        outbox.put(None)
        writer.join()


def _pickled(reply: tuple[bool, Any]) -> bytes:
    try:
        return pickle.dumps(reply, pickle.HIGHEST_PROTOCOL)
    except Exception:  # an exception that does not pickle: send what it said
        return pickle.dumps((False, RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")))


def _write_all(conn: Connection, outbox: queue.SimpleQueue[bytes | None]) -> None:
    while (data := outbox.get()) is not None:
        try:
            conn.send_bytes(data)
        except OSError:  # the caller is gone
            return


class WorkerPool:
    """``size`` processes from ``ctx``; ``send`` a job to a worker, ``replies`` to collect."""

    def __init__(self, size: int, ctx: multiprocessing.context.BaseContext, job: Callable[[Any], Any],
                 warm_up: Callable[..., None], args: tuple = ()) -> None:
        self._conns: list[Connection] = []
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self.busy = [0] * size  # jobs sent and not answered, per worker
        try:
            for _ in range(size):
                mine, theirs = ctx.Pipe()
                proc = ctx.Process(target=_serve, args=(theirs, job, warm_up, args), daemon=True)  # type: ignore[attr-defined]
                proc.start()
                theirs.close()
                self._conns.append(mine)
                self._procs.append(proc)
        except BaseException:
            self.close()
            raise

    @property
    def size(self) -> int:
        return len(self._conns)

    def send(self, worker: int, work: Any) -> None:
        self._conns[worker].send(work)
        self.busy[worker] += 1

    def replies(self, block: bool) -> Iterator[tuple[int, Any]]:
        """(worker, result) for each reply ready now; with ``block``, wait for at least one
        (there must be work outstanding). Raises a job's exception, or WorkerLost."""
        waiting = [c for c, n in zip(self._conns, self.busy) if n]
        for conn in wait(waiting, None if block else 0):
            worker = self._conns.index(conn)  # type: ignore[arg-type]
            try:
                ok, value = pickle.loads(conn.recv_bytes())  # type: ignore[union-attr]
            except (EOFError, OSError):
                raise WorkerLost(f"certificate worker {worker} (pid {self._procs[worker].pid}) died") from None
            self.busy[worker] -= 1
            if not ok:
                raise value
            yield worker, value

    def drain(self) -> None:
        """Read and drop every outstanding reply (after a failure, so the pool can be reused);
        a worker that died counts as drained."""
        while any(self.busy):
            for conn in wait([c for c, n in zip(self._conns, self.busy) if n]):
                worker = self._conns.index(conn)  # type: ignore[arg-type]
                try:
                    conn.recv_bytes()  # type: ignore[union-attr]
                    self.busy[worker] -= 1
                except (EOFError, OSError):
                    self.busy[worker] = 0

    def close(self) -> None:
        """Ask every idle worker to stop, then reap them. One still busy (the caller is leaving
        on an error) is killed: its result is not wanted, and it could block writing it."""
        for conn, busy, proc in zip(self._conns, self.busy, self._procs):
            try:
                conn.send(None)
            except OSError:
                pass
            if busy:
                proc.kill()
        for proc in self._procs:
            proc.join(_JOIN_SECONDS)
            if proc.is_alive():
                proc.kill()
                proc.join()
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
