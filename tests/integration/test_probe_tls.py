"""HTTPS health probes verify the server against the CA the node holds for that port, by the
name the step asked: a real local HTTPS server whose certificate the cluster CA signed answers;
one signed by another CA is refused, and a node without the CA file does not ask at all. Both
backends (the host's, and the lab's, which moves a loopback URL onto the node's address), and
the lab kubelet's readiness check of a real pod."""
from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bke.contracts.agent_steps import WaitHealth
from bke_agent import HostBackend, LabBackend
from bke_agent.errors import StepError
from bke_agent.kubelet.running import serving_verify

from .agent_helpers import free_node_ip

NOW = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
CA_PATH = "etc/kubernetes/pki/ca.crt"


def _cert(cn: str, key: ec.EllipticCurvePrivateKey, issuer: x509.Name, signer: ec.EllipticCurvePrivateKey,
          ca: bool, ips: tuple[str, ...] = ()) -> x509.Certificate:
    b = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)]))
         .issuer_name(issuer).public_key(key.public_key()).serial_number(x509.random_serial_number())
         .not_valid_before(NOW).not_valid_after(NOW + dt.timedelta(days=1))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ips:
        b = b.add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
                            critical=False)
    return b.sign(signer, hashes.SHA256())


def _ca(cn: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    return _cert(cn, key, name, key, True), key


def _serving(tmp: Path, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], ips: tuple[str, ...]) -> ssl.SSLContext:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = _cert("kube-apiserver", key, ca[0].subject, ca[1], False, ips)
    (tmp / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "server.key").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(tmp / "server.crt", tmp / "server.key")
    return ctx


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
    except (OSError, asyncio.IncompleteReadError, ssl.SSLError):
        pass  # a client that refused our certificate hangs up in the handshake
    finally:
        writer.close()


@pytest.fixture
def node(tmp_path: Path) -> tuple[Path, str, tuple[x509.Certificate, ec.EllipticCurvePrivateKey]]:
    """A node's root holding the cluster CA, and an address of its own with 6443 free."""
    ip, _ = free_node_ip(fixed=(6443,))
    cluster_ca = _ca("kubernetes")
    (tmp_path / CA_PATH).parent.mkdir(parents=True)
    (tmp_path / CA_PATH).write_bytes(cluster_ca[0].public_bytes(serialization.Encoding.PEM))
    return tmp_path, ip, cluster_ca


@asynccontextmanager
async def _serve(ctx: ssl.SSLContext, ip: str) -> AsyncIterator[None]:
    server = await asyncio.start_server(_answer, ip, 6443, ssl=ctx)
    try:
        yield
    finally:
        server.close()
        await server.wait_closed()


def _backends(root: Path, ip: str) -> list[tuple[object, str]]:
    # the host asks the URL as written; the lab moves a loopback URL onto the node's address and
    # verifies the name the step asked
    return [(HostBackend(root, env={}), f"https://{ip}:6443/livez"),
            (LabBackend(root, ip, state_dir=root / "var/lib/bke-agent"), "https://127.0.0.1:6443/livez")]


async def test_a_probe_answers_for_a_server_the_cluster_ca_signed(node, tmp_path: Path) -> None:
    root, ip, cluster_ca = node
    async with _serve(_serving(tmp_path, cluster_ca, (ip, "127.0.0.1")), ip):
        for backend, url in _backends(root, ip):
            out = await backend.wait_health(WaitHealth(id="h", url=url, timeout_s=5))  # type: ignore[attr-defined]
            assert out.status == "Succeeded" and "HTTP 200" in out.stdout, backend
        verify = serving_verify(root, f"https://{ip}:6443/readyz")
        assert isinstance(verify, ssl.SSLContext)
        async with httpx.AsyncClient(verify=verify, trust_env=False) as client:
            assert (await client.get(f"https://{ip}:6443/readyz")).status_code == 200


async def test_a_server_another_ca_signed_is_refused(node, tmp_path: Path) -> None:
    root, ip, _ = node
    async with _serve(_serving(tmp_path, _ca("kubernetes"), (ip, "127.0.0.1")), ip):  # same name, another CA
        for backend, url in _backends(root, ip):
            with pytest.raises(StepError) as caught:
                await backend.wait_health(WaitHealth(id="h", url=url, timeout_s=1))  # type: ignore[attr-defined]
            assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value.stderr), caught.value.stderr
        async with httpx.AsyncClient(verify=serving_verify(root, f"https://{ip}:6443/readyz"),  # type: ignore[arg-type]
                                     trust_env=False) as client:
            with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                await client.get(f"https://{ip}:6443/readyz")


async def test_a_server_of_the_right_ca_under_another_name_is_refused(node, tmp_path: Path) -> None:
    root, ip, cluster_ca = node
    async with _serve(_serving(tmp_path, cluster_ca, ("10.9.9.9",)), ip):
        backend, url = _backends(root, ip)[0]
        with pytest.raises(StepError) as caught:
            await backend.wait_health(WaitHealth(id="h", url=url, timeout_s=1))  # type: ignore[attr-defined]
        assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value.stderr)


async def test_without_the_ca_file_the_node_does_not_ask(node, tmp_path: Path) -> None:
    root, ip, cluster_ca = node
    (root / CA_PATH).unlink()
    async with _serve(_serving(tmp_path, cluster_ca, (ip, "127.0.0.1")), ip):
        for backend, url in _backends(root, ip):
            with pytest.raises(StepError, match="is not on this node"):
                await backend.wait_health(WaitHealth(id="h", url=url, timeout_s=1))  # type: ignore[attr-defined]
        async with httpx.AsyncClient(verify=serving_verify(root, f"https://{ip}:6443/readyz"),  # type: ignore[arg-type]
                                     trust_env=False) as client:
            with pytest.raises(httpx.ConnectError):
                await client.get(f"https://{ip}:6443/readyz")
    # a component that signs its own certificate: the stand-in only looks whether it accepts connections
    assert serving_verify(root, f"https://{ip}:10257/healthz") is None
