"""A tiny HTTP(S) server for a simulated pod's health endpoints, on the node's own address.

Why not a framework: it answers one GET with a status and a short body, and dozens of them
run in one agent process; asyncio streams do that in a few lines. HTTPS uses the pod's own
serving certificate when its flags name one (so a mismatched cert/key fails the pod as it
would fail the real component), else a self-signed certificate made once per node.
"""
from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import socket
import ssl
from collections.abc import Callable
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from ..fsutil import write_atomic
from ..lab_netns import socket_in_netns

__all__ = ["HealthServer", "self_signed_pair", "server_context"]

Answer = Callable[[str], tuple[int, str]]  # path -> (status, body)
REASONS = {200: "OK", 404: "Not Found", 500: "Internal Server Error"}
READ_TIMEOUT_S = 5.0


def self_signed_pair(tls_dir: Path, ip: str) -> tuple[Path, Path]:
    """`selfsigned.crt/.key` for `ip` in `tls_dir`, made on first use (key 0600)."""
    crt, key_file = tls_dir / "selfsigned.crt", tls_dir / "selfsigned.key"
    if crt.is_file() and key_file.is_file():
        return crt, key_file
    tls_dir.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"bke-lab {ip}")])
    now = dt.datetime.now(dt.timezone.utc)
    sans = [x509.IPAddress(ipaddress.ip_address(a)) for a in dict.fromkeys((ip, "127.0.0.1"))]
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.SubjectAlternativeName([*sans, x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    write_atomic(key_file, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                             serialization.NoEncryption()), 0o600, fsync=False)
    write_atomic(crt, cert.public_bytes(serialization.Encoding.PEM), 0o644, fsync=False)
    return crt, key_file


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx


class HealthServer:
    """Answers every GET on (host, port) through `answer(path)`."""

    def __init__(self, host: str, port: int, answer: Answer, tls: ssl.SSLContext | None = None, netns: str = "") -> None:
        self.host, self.port, self.answer, self.tls = host, port, answer, tls
        self.netns = netns  # the node's network namespace, where its address is (bke_agent.lab_netns)
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        if not self.netns:
            self._server = await asyncio.start_server(self._serve, self.host, self.port, ssl=self.tls,
                                                      reuse_address=True)
            return
        sock = socket_in_netns(self.netns)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(100)
            sock.setblocking(False)
        except OSError:
            sock.close()
            raise
        self._server = await asyncio.start_server(self._serve, sock=sock, ssl=self.tls)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            path = parts[1] if len(parts) >= 2 else "/"
            status, body = self.answer(path)
            data = body.encode()
            writer.write(f"HTTP/1.1 {status} {REASONS.get(status, 'OK')}\r\nContent-Type: text/plain\r\n"
                         f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode() + data)
            await writer.drain()
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ssl.SSLError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
