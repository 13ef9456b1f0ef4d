"""deploy/images/healthcheck.py, the images' HEALTHCHECK, run as the image runs it: healthy only
on a 200 from the service's port, and (the agent) only while another process holds the lock."""
from __future__ import annotations

import fcntl
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "images" / "healthcheck.py"


class _Probe(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server hook's name
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Probe)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _check(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=30,
                          env=env or {})


def test_http_healthy_only_on_200(port: int) -> None:
    env = {"BKE_HTTP_PORT": str(port)}
    assert _check("http", "/healthz", env=env).returncode == 0
    failed = _check("http", "/readyz", env=env)
    assert failed.returncode == 1 and "HTTP 503" in failed.stderr
    assert _check("http", "/healthz", env={"BKE_HTTP_PORT": "x"}).returncode == 1


def test_http_nothing_listening() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]  # bound, never listening: refused
        done = _check("http", "/healthz", env={"BKE_HTTP_PORT": str(free)})
    assert done.returncode == 1 and "unhealthy" in done.stderr


def test_lock_healthy_while_held(tmp_path: Path) -> None:
    lock = tmp_path / "agent.lock"
    assert "has not started" in _check("lock", str(lock)).stderr
    with open(lock, "wb") as f:
        assert _check("lock", str(lock)).returncode == 1  # exists, nobody holds it
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert _check("lock", str(lock)).returncode == 0


def test_usage_error() -> None:
    assert _check("tcp", "1").returncode == 2
