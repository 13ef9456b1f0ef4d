"""The bundled CPython over a real SSH session: a node whose python3 cannot run the agent gets the
bundle's interpreter, verified with sha256sum and unpacked by tar, and ends with a working venv.

The server is asyncssh's on loopback (as in test_ssh_bootstrap.py). Commands run in a real `sh`
on this machine, with the node's /opt moved under a temp root (the only rewrite: ` /opt/` in the
command line). The archive is a python-build-standalone `install_only_stripped` layout in miniature whose
bin/python3.11 execs this machine's real Python 3.11, so `-m venv` really runs. The steps run
are the table's, in order, from `stage` to `venv` (the rest is covered by test_ssh_bootstrap.py).
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import asyncssh
import httpx
import pytest
from bke.core.artefacts import agent_artefacts
from bke.adapters.bundle import make_server
from bke.core.pythons import STANDALONE
from bke.adapters.ssh import (
    BootstrapParams,
    PinnedPolicy,
    SshOptions,
    SshTarget,
    bootstrap_node,
    bootstrap_steps,
    open_session,
    standalone_source,
)
from tests.bundle_helpers import fake_standalone_python

pytestmark = pytest.mark.integration

REAL_PYTHON = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
# What an old distribution python3 answers to the bootstrap's check (sys.exit(message): status 1).
OLD_PYTHON3 = "#!/bin/sh\necho 'bke-agent needs Python 3.11, 3.12, 3.13 or 3.14; this node has Python 3.9' >&2\nexit 1\n"


@dataclass
class ShellNode:
    root: Path
    commands: list[str]

    async def handle(self, process: asyncssh.SSHServerProcess) -> None:
        command = (process.command or "").replace(" /opt/", f" {self.root}/opt/")
        self.commands.append(command)
        proc = await asyncio.create_subprocess_exec("sh", "-c", command, cwd=self.root,
                                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, err = await proc.communicate()
        process.stdout.write(out.decode())
        process.stderr.write(err.decode())
        process.exit(proc.returncode if proc.returncode is not None else 255)


@dataclass
class Node:
    sim: ShellNode
    port: int
    host_key: asyncssh.SSHKey
    client_key: asyncssh.SSHKey

    async def run(self, params: BootstrapParams):  # type: ignore[no-untyped-def]
        steps = bootstrap_steps(params)
        upto = [s.name for s in steps].index("venv") + 1
        target = SshTarget("n1", "127.0.0.1", self.port, "root")
        async with open_session(target, PinnedPolicy(self.host_key.get_fingerprint("sha256")),
                                SshOptions(identity=self.client_key)) as session:
            return await bootstrap_node(session, steps[:upto], "n1", f"127.0.0.1:{self.port}"), steps[:upto]


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    root = tmp_path / "node"
    root.mkdir()
    sim = ShellNode(root, [])

    class Server(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            return True

        def public_key_auth_supported(self) -> bool:
            return True

        def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
            return key.public_data == client_key.public_data

    acceptor = await asyncssh.create_server(
        Server, "127.0.0.1", 0, server_host_keys=[host_key], process_factory=sim.handle,
        sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=os.fsencode(root)), allow_scp=False,
        encoding="utf-8")
    try:
        yield Node(sim, acceptor.get_port(), host_key, client_key)
    finally:
        acceptor.close()
        await acceptor.wait_closed()


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A bundle directory holding the archive and its .sha256 where `bke bundle build` puts them."""
    out = tmp_path / "bundle"
    art = agent_artefacts("amd64")[0]
    data = fake_standalone_python(REAL_PYTHON, STANDALONE.minor)
    (out / art.path).parent.mkdir(parents=True)
    (out / art.path).write_bytes(data)
    (out / f"{art.path}.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    return out


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    wheel = tmp_path / "dist" / "bke-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"PK\x03\x04 not really a wheel")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("asyncssh==2.24.1\n")
    old = tmp_path / "old-python3"
    old.write_text(OLD_PYTHON3)
    old.chmod(0o755)
    return wheel, reqs, old


def _params(files, **kw) -> BootstrapParams:  # type: ignore[no-untyped-def]
    wheel, reqs, old = files
    return BootstrapParams("prod", "n1", "nats://10.0.0.9:4222", wheel, reqs, python=kw.pop("python", str(old)), **kw)


def _venv_python(root: Path) -> tuple[int, str]:
    run = subprocess.run([str(root / "opt/bke-agent/bin/python"), "-c",
                          "import sys, venv; print('%d.%d' % sys.version_info[:2], sys.prefix != sys.base_prefix)"],
                         capture_output=True, text=True, timeout=30)
    return run.returncode, run.stdout.strip()


async def test_an_unsupported_python3_gets_the_uploaded_bundled_cpython_and_a_working_venv(node, bundle, files):
    source = standalone_source(str(bundle), "amd64", lambda url: pytest.fail("no URL is read"))
    outcome, steps = await node.run(_params(files, standalone=source))
    assert outcome.ok, outcome.message
    root = node.sim.root
    assert [s.name for s in steps] == ["stage", "choose-python", "verify-python", "install-python", "venv"]
    assert (root / ".bke-bootstrap/python").read_text().strip() == f"{root}/opt/bke-python/bin/python3.11"
    assert (root / "opt/bke-python/.bke-sha256").read_text().strip() == source.sha256
    assert (root / "opt/bke-python/bin/python3").is_symlink()  # the archive's layout, unpacked whole
    assert _venv_python(root) == (0, f"{STANDALONE.minor} True")

    # a re-run finds the build of this digest in place: nothing is unpacked again, the venv stays
    (root / "opt/bke-python/marker").write_text("kept")
    outcome, _ = await node.run(_params(files, standalone=source))
    assert outcome.ok, outcome.message
    assert (root / "opt/bke-python/marker").exists()
    assert _venv_python(root)[0] == 0


async def test_bundled_is_fetched_from_the_httprepo_and_checked(node, bundle, files):
    server = make_server(bundle, "127.0.0.1:0")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        repo = f"http://127.0.0.1:{server.server_address[1]}"
        source = standalone_source(repo, "amd64", lambda url: httpx.get(url).text)
        assert source.url is not None and source.url.startswith(repo + "/python/")
        # --python bundled: even a supported node python3 is passed over
        outcome, steps = await node.run(_params(files, python=REAL_PYTHON, python_mode="bundled", standalone=source))
        assert outcome.ok, outcome.message
        assert "fetch-python" in [s.name for s in steps]
        assert _venv_python(node.sim.root) == (0, f"{STANDALONE.minor} True")
        # once unpacked, a re-run needs no fetch (the file is gone from the repo: a fetch would fail)
        (bundle / agent_artefacts("amd64")[0].path).unlink()
        outcome, _ = await node.run(_params(files, python=REAL_PYTHON, python_mode="bundled", standalone=source))
        assert outcome.ok, outcome.message
    finally:
        server.shutdown()
        server.server_close()


async def test_a_tampered_archive_is_refused_on_the_node_and_nothing_is_unpacked(node, bundle, files):
    server = make_server(bundle, "127.0.0.1:0")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        repo = f"http://127.0.0.1:{server.server_address[1]}"
        source = standalone_source(repo, "amd64", lambda url: httpx.get(url).text)
        path = bundle / agent_artefacts("amd64")[0].path
        path.write_bytes(path.read_bytes() + b"tampered")  # the repo's archive changed after the digest was read
        outcome, _ = await node.run(_params(files, standalone=source))
        assert outcome.status == "failed" and outcome.step == "verify-python"
        assert "its sha256 is not" in outcome.message and source.sha256 in outcome.message
        assert not (node.sim.root / "opt/bke-python").exists()
    finally:
        server.shutdown()
        server.server_close()


async def test_auto_keeps_a_supported_node_python(node, bundle, files):
    source = standalone_source(str(bundle), "amd64", lambda url: pytest.fail("no URL is read"))
    outcome, _ = await node.run(_params(files, python=REAL_PYTHON, standalone=source))
    assert outcome.ok, outcome.message
    root = node.sim.root
    assert (root / ".bke-bootstrap/python").read_text().strip() == REAL_PYTHON
    assert not (root / "opt/bke-python").exists()  # fetched nothing, unpacked nothing
    assert _venv_python(root) == (0, f"{STANDALONE.minor} True")
