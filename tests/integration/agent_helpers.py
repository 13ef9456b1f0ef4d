"""Test material for the agent's lab tests: a small PKI written into a node tree, and static
pod manifests shaped like the renderer's (command + flags, hostPath volumes, httpGet probes)."""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from bke.adapters.bus.streams import ensure_streams
from bke.contracts.agent_steps import TlsFiles
from bke.adapters.runtime import pid_cwd, port_is_free, stop_pid
from bke_agent import LabLayout

@pytest.fixture
async def js(nats_client: NatsClient) -> AsyncIterator[JetStreamContext]:
    js = nats_client.jetstream()
    await ensure_streams(js)
    yield js


@pytest.fixture
async def cluster(js: JetStreamContext) -> AsyncIterator[str]:
    """A cluster name of its own per test; its agents' consumers are deleted afterwards
    (a server with thousands of leftover consumers takes long to shut down)."""
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    for info in await js.consumers_info("BKE_AGENT"):
        if info.name.startswith(f"agent__{name}__"):
            await js.delete_consumer("BKE_AGENT", info.name)


NOW = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
PKI = "/etc/kubernetes/pki/etcd"
# how a probe of a test's apiserver on a port of its own verifies it: the agent knows no CA for
# such a port (bke.core.host_actions.endpoints), so the step names this PKI's
PROBE_TLS = TlsFiles(ca=f"{PKI}/ca.crt", cert=f"{PKI}/healthcheck-client.crt", key=f"{PKI}/healthcheck-client.key")


def free_node_ip(ports: int = 4, fixed: tuple[int, ...] = ()) -> tuple[str, list[int]]:
    """A 127.x address and `ports` ports free on it (the lab gives each node its own address);
    `fixed`: these ports instead (etcd's 2379-2381, which a health probe may ask: bke.core.host_actions)."""
    rng = random.Random()
    for _ in range(100):
        ip = f"127.{rng.randint(100, 250)}.{rng.randint(1, 250)}.{rng.randint(2, 250)}"
        chosen = list(fixed) or rng.sample(range(20000, 60000), ports)
        if all(port_is_free(ip, p) for p in chosen):
            return ip, chosen
    raise RuntimeError("no free loopback address")


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def issue_pki(root: Path, ip: str, key_mode: int = 0o600) -> None:
    """ca.crt, server, peer and healthcheck-client pairs under <root>/etc/kubernetes/pki/etcd."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("etcd-ca")).issuer_name(_name("etcd-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(NOW).not_valid_after(NOW + dt.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    out = root / PKI.lstrip("/")
    out.mkdir(parents=True, exist_ok=True)
    (out / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    usages = {"server": [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
              "peer": [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
              "healthcheck-client": [ExtendedKeyUsageOID.CLIENT_AUTH]}
    for name, eku in usages.items():
        key = ec.generate_private_key(ec.SECP256R1())
        san = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(ip)),
                                           x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(NOW).not_valid_after(NOW + dt.timedelta(days=30))
                .add_extension(san, critical=False).add_extension(x509.ExtendedKeyUsage(eku), critical=False)
                .sign(ca_key, hashes.SHA256()))
        (out / f"{name}.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        (out / f"{name}.key").write_bytes(_pem_key(key))
        (out / f"{name}.key").chmod(key_mode)


def _probe(port: int, path: str, scheme: str = "HTTP", host: str = "127.0.0.1") -> dict[str, Any]:
    return {"httpGet": {"host": host, "path": path, "port": port, "scheme": scheme},
            "initialDelaySeconds": 10, "periodSeconds": 10, "failureThreshold": 8}


def etcd_manifest(ip: str, client: int, peer: int, metrics: int, name: str = "etcd") -> dict[str, Any]:
    """A single-member etcd static pod in the renderer's shape (kubeadm's loopback listeners)."""
    flags = {
        "advertise-client-urls": f"https://{ip}:{client}",
        "cert-file": f"{PKI}/server.crt", "key-file": f"{PKI}/server.key",
        "client-cert-auth": "true", "trusted-ca-file": f"{PKI}/ca.crt",
        "peer-cert-file": f"{PKI}/peer.crt", "peer-key-file": f"{PKI}/peer.key",
        "peer-client-cert-auth": "true", "peer-trusted-ca-file": f"{PKI}/ca.crt",
        "data-dir": "/var/lib/etcd", "name": "m1",
        "initial-advertise-peer-urls": f"https://{ip}:{peer}",
        "initial-cluster": f"m1=https://{ip}:{peer}", "initial-cluster-state": "new",
        "listen-client-urls": f"https://127.0.0.1:{client},https://{ip}:{client}",
        "listen-peer-urls": f"https://{ip}:{peer}",
        "listen-metrics-urls": f"http://127.0.0.1:{metrics}",
        "log-level": "warn",
    }
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "kube-system"},
        "spec": {
            "hostNetwork": True,
            "containers": [{
                "name": "etcd", "image": "registry.k8s.io/etcd:3.5.21-0",
                "command": ["etcd", *(f"--{k}={v}" for k, v in flags.items())],
                "livenessProbe": _probe(metrics, "/health?exclude=NOSPACE&serializable=true"),
                "startupProbe": _probe(metrics, "/health?serializable=false"),
                "volumeMounts": [{"mountPath": PKI, "name": "etcd-certs", "readOnly": True},
                                 {"mountPath": "/var/lib/etcd", "name": "etcd-data"}],
            }],
            "volumes": [{"name": "etcd-certs", "hostPath": {"path": PKI, "type": "DirectoryOrCreate"}},
                        {"name": "etcd-data", "hostPath": {"path": "/var/lib/etcd", "type": "DirectoryOrCreate"}}],
        },
    }


def apiserver_manifest(ip: str, port: int, extra_flags: tuple[str, ...] = ()) -> dict[str, Any]:
    """A kube-apiserver-like pod (no binary here: simulated) serving HTTPS on `port`."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kube-apiserver", "namespace": "kube-system"},
        "spec": {
            "hostNetwork": True,
            "containers": [{
                "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.33.2",
                "command": ["kube-apiserver", f"--advertise-address={ip}", f"--secure-port={port}",
                            f"--client-ca-file={PKI}/ca.crt",
                            f"--tls-cert-file={PKI}/server.crt", f"--tls-private-key-file={PKI}/server.key",
                            *extra_flags],
                "livenessProbe": _probe(port, "/livez", "HTTPS", ip),
                "readinessProbe": _probe(port, "/readyz", "HTTPS", "127.0.0.1"),
                "volumeMounts": [{"mountPath": "/etc/kubernetes/pki", "name": "k8s-certs", "readOnly": True}],
            }],
            "volumes": [{"name": "k8s-certs", "hostPath": {"path": "/etc/kubernetes/pki", "type": "DirectoryOrCreate"}}],
        },
    }


def write_manifest(root: Path, file: str, manifest: dict[str, Any]) -> None:
    d = root / "etc/kubernetes/manifests"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{file}.tmp"  # hidden while written, as a renderer would
    tmp.write_text(json.dumps(manifest))
    tmp.replace(d / file)


def stop_leftover_pods(root: Path) -> list[int]:
    """Stop (by PID, after checking the PID's cwd) any real pod process still recorded as ours."""
    layout, stopped = LabLayout(root), []
    for f in layout.pods.glob("*.json") if layout.pods.is_dir() else []:
        doc = json.loads(f.read_text())
        pid = doc.get("pid")
        if isinstance(pid, int) and pid_cwd(pid) == layout.run_dir(doc["name"]).resolve():
            stop_pid(pid)
            stopped.append(pid)
    return stopped
