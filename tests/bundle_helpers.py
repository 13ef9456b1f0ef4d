"""Fake upstreams on loopback for `bke bundle build` tests: the same files, archives and checksum
files as each upstream publishes them (bke.adapters.bundle.upstreams documents the real layouts), at the
same URL paths under http://127.0.0.1:PORT/<upstream host>/..., plus a fake image registry."""
from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from bke.adapters.bundle import UPSTREAMS, Upstream, bundle_artefacts, downloads

__all__ = ["CALICO_YAML", "FakeRegistry", "FakeUpstream", "fake_binary", "fake_standalone_python"]

# A small calico manifest of valid kube objects: what the addons phase looks for is a DaemonSet
# kube-system/calico-node whose container is named calico-node.
CALICO_YAML = """\
apiVersion: v1
kind: ServiceAccount
metadata: {name: calico-node, namespace: kube-system}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: calico-node, namespace: kube-system, labels: {k8s-app: calico-node}}
spec:
  selector: {matchLabels: {k8s-app: calico-node}}
  template:
    metadata: {labels: {k8s-app: calico-node}}
    spec:
      serviceAccountName: calico-node
      hostNetwork: true
      initContainers:
        - name: install-cni
          image: docker.io/calico/cni:v{version}
      containers:
        - name: calico-node
          image: docker.io/calico/node:v{version}
          env:
            - {name: CALICO_IPV4POOL_CIDR, value: "192.168.0.0/16"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: calico-kube-controllers, namespace: kube-system}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: calico-kube-controllers}}
  template:
    metadata: {labels: {k8s-app: calico-kube-controllers}}
    spec:
      containers:
        - name: calico-kube-controllers
          image: docker.io/calico/kube-controllers:v{version}
"""


def fake_binary(project: str, version: str, arch: str | None, file: str) -> bytes:
    """A tiny runnable stand-in, different for every (project, version, arch, file)."""
    return f"#!/bin/sh\n# fake {project} {version} {arch} {file}\nexit 0\n".encode()


def _tar(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return buf.getvalue()


def fake_standalone_python(real: str, minor: str = "3.11") -> bytes:
    """A python-build-standalone `install_only_stripped` archive in miniature: one top folder `python/` with
    bin/python<minor> (here a wrapper exec'ing the real interpreter `real`) and the python3 link."""
    wrapper = f'#!/bin/sh\nexec {real} "$@"\n'.encode()
    return _tar({f"python/bin/python{minor}": wrapper, "python/lib/README": b"fake standalone CPython\n"},
                {"python/bin/python3": f"python{minor}"})


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class _Files(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    headers_for: dict[str, dict[str, str]] = {}
    bearer: str = ""  # when set: /v2/ answers 401 with a Bearer challenge unless given this token

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        self._answer(body=True)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(body=False)

    def _answer(self, body: bool) -> None:
        path = self.path.split("?", 1)[0]
        if self.bearer and path.startswith("/v2/") and self.headers.get("Authorization") != f"Bearer {self.bearer}":
            base = f"http://{self.headers.get('Host')}"
            self.send_response(401)
            self.send_header("WWW-Authenticate", f'Bearer realm="{base}/token",service="fake",scope="pull"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = self.files.get(path)
        if self.bearer and "/manifests/" in path:  # the registry: every tag exists, its digest from its path
            self.headers_for[path] = {"Docker-Content-Digest": FakeRegistry.digest(path)}
            data = b"{}"
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        for k, v in self.headers_for.get(path, {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if body:
            self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


class _Server:
    def __init__(self, files: dict[str, bytes], headers: dict[str, dict[str, str]] | None = None,
                 bearer: str = "") -> None:
        handler = type("Handler", (_Files,), {"files": files, "headers_for": headers or {}, "bearer": bearer})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeUpstream(_Server):
    """Every upstream file a cluster's bundle needs, at upstream's own paths under `base`."""

    def __init__(self, cluster, arches=("amd64", "arm64")) -> None:  # type: ignore[no-untyped-def]
        self.files: dict[str, bytes] = {}
        super().__init__(self.files)
        self.table: dict[str, Upstream] = {p: replace(u, url=u.url.replace("https://", self.base + "/"))
                                           for p, u in UPSTREAMS.items()}
        self.expected: dict[str, bytes] = {}  # tree path -> bytes
        for d in downloads(bundle_artefacts(cluster, arches), self.table):
            a0 = d.artefacts[0]
            if d.upstream.project == "calico":
                data = CALICO_YAML.replace("{version}", a0.version).encode()
                self.expected[a0.path] = data
            elif d.upstream.project == "python":  # kept whole: the tree file is the archive
                data = fake_standalone_python(f"/fake/{a0.arch}/python3")
                self.expected[a0.path] = data
            elif d.upstream.member is None:
                data = fake_binary(a0.project, a0.version, a0.arch, a0.file)
                self.expected[a0.path] = data
            else:
                members = {}
                for a in d.artefacts:
                    self.expected[a.path] = fake_binary(a.project, a.version, a.arch, a.file)
                    members[d.upstream.member_name(a.file) or a.file] = self.expected[a.path]
                members[(d.upstream.member_name("ctr") or "ctr")] = b"not wanted"  # an extra member, left out
                data = _tar(members)
            self._put(d.url, data)
            if d.sums_url:
                self._add_sum(d.sums_url, d.name, data)

    def _put(self, url: str, data: bytes) -> None:
        self.files[url.removeprefix(self.base)] = data

    def _add_sum(self, sums_url: str, name: str, data: bytes) -> None:
        key = sums_url.removeprefix(self.base)
        if sums_url.endswith(("runc.sha256sum", "/SHA256SUMS")):  # one file for every arch, sha256sum's format
            self.files[key] = self.files.get(key, b"") + f"{_sha(data)}  {name}\n".encode()
        elif sums_url.endswith(".sha256sum"):
            self.files[key] = f"{_sha(data)}  {name}\n".encode()
        else:  # dl.k8s.io style: the bare digest
            self.files[key] = f"{_sha(data)}\n".encode()

    def tamper(self, tree_suffix: str) -> str:
        """Change the bytes of the first upstream file whose URL ends with `tree_suffix` (its
        checksum file stays as published); returns that URL path."""
        key = next(k for k in self.files if k.endswith(tree_suffix))
        self.files[key] = self.files[key] + b"\n# tampered\n"
        return key


class FakeRegistry(_Server):
    """A registry answering HEAD /v2/<name>/manifests/<tag> with a Docker-Content-Digest, behind
    an anonymous Bearer token challenge like Docker Hub's."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.headers: dict[str, dict[str, str]] = {}
        super().__init__(self.files, self.headers, bearer="anonymous")
        self.files["/token"] = b'{"token": "anonymous"}'

    @staticmethod
    def digest(url_path: str) -> str:
        """The digest this registry reports for /v2/<name>/manifests/<tag>."""
        return "sha256:" + _sha(url_path.encode())
