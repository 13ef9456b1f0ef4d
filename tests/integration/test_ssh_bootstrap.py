"""`bke agent bootstrap` against a real SSH server on loopback.

The server is asyncssh's: a real SSH handshake (key exchange, host key, public-key auth, exec and
SFTP channels) on a free 127.0.0.1 port, with a generated host key and one authorized client key.
It also offers password and keyboard-interactive auth, and records any attempt, so the tests can
show BKE never tries them. Commands run in a restricted handler over a temp root standing for the
node: ``mkdir``/``install``/``rm`` run for real with absolute paths moved under the root (so the
file modes are real), ``python3 -c`` runs for real, and venv/pip/systemctl/bke-agent are recorded
and answered. A variant against the system ``sshd`` runs when ``/usr/sbin/sshd`` exists.
"""
from __future__ import annotations

import asyncio
import getpass
import os
import shlex
import socket
import stat
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh
import pytest
import yaml
from bke.core.spec.synth import synth_docs
from bke.adapters.ssh import (
    BootstrapParams,
    HostKeyRefused,
    KnownHostsPolicy,
    PinnedPolicy,
    SshOptions,
    SshTarget,
    bootstrap_nodes,
    bootstrap_steps,
    open_session,
    remote_command,
)
from bke.contracts.agent import AGENTS_COMMAND_KEY, AGENTS_PROVISION, AgentProvisioned, CommandKey, ProvisionAgent
from bke_agent import AgentIdentity
from bke_cli.main import main
from tests.trust_helpers import OTHER_SIGNER, SIGNER

pytestmark = pytest.mark.integration

PUBLIC_KEY = AgentIdentity.ephemeral().public_line  # what `bke-agent init` prints
NATS = "nats://agent:s3cret@10.0.0.9:4222"
HOSTILE = ["; touch PWNED", "$(touch PWNED)", "`touch PWNED`", "a'b\"c", "x\ny && touch PWNED", "* ?", "", "\\"]
REAL = {"mkdir", "install", "rm"}


@dataclass
class NodeSim:
    """The node: a temp root, and a record of everything the client did."""

    root: Path
    commands: list[list[str]] = field(default_factory=list)
    sudo: list[bool] = field(default_factory=list)
    auth: list[tuple[str, str]] = field(default_factory=list)
    connections: int = 0
    staged_modes: dict[str, int] = field(default_factory=dict)
    init_env: list[str] = field(default_factory=list)
    fail_on: str | None = None
    real_shell: bool = False

    async def handle(self, process: asyncssh.SSHServerProcess) -> None:
        code, out, err = await self.execute(process.command or "")
        process.stdout.write(out)
        process.stderr.write(err)
        process.exit(code)

    async def execute(self, command: str) -> tuple[int, str, str]:
        if self.real_shell:
            return await _spawn(["sh", "-c", command], self.root)
        argv = shlex.split(command)  # what a POSIX login shell would pass on
        sudo = argv[:3] == ["sudo", "-n", "--"]
        argv = argv[3:] if sudo else argv
        self.commands.append(argv)
        self.sudo.append(sudo)
        if self.fail_on and " ".join(argv).startswith(self.fail_on):
            return 1, "", "Job for bke-agent.service failed.\n"
        if argv[0] in REAL:
            return await _spawn([a if not a.startswith("/") else f"{self.root}{a}" for a in argv], self.root)
        if argv[:2] == ["python3", "-c"]:
            return await _spawn([sys.executable, "-c", argv[2]], self.root)
        if argv[:3] == ["python3", "-m", "venv"]:
            (self.root / argv[3].lstrip("/") / "bin").mkdir(parents=True, exist_ok=True)  # venv is idempotent
            (self.root / argv[3].lstrip("/") / "bin" / "python").touch()
            return 0, "", ""
        if argv[:4] == ["/opt/bke-agent/bin/python", "-m", "pip", "install"]:
            return self._pip(argv[4:])
        if argv[0] == "systemctl":
            return 0, "", ""
        if argv[0] == "env" and argv[-2:] == ["/opt/bke-agent/bin/bke-agent", "init"]:
            self.init_env = argv[1:-2]
            return 0, PUBLIC_KEY + "\n", ""
        return 127, "", f"{argv[0]}: not allowed here\n"

    def _pip(self, args: list[str]) -> tuple[int, str, str]:
        if not (self.root / "opt/bke-agent/bin/python").exists():
            return 1, "", "no venv\n"
        for a in args:
            if a.startswith(".bke-bootstrap/"):
                path = self.root / a
                if not path.is_file():
                    return 1, "", f"ERROR: {a} does not exist\n"
                self.staged_modes[a] = stat.S_IMODE(path.stat().st_mode)
                self.staged_modes[".bke-bootstrap"] = stat.S_IMODE(path.parent.stat().st_mode)
        return 0, "", ""


async def _spawn(argv: list[str], cwd: Path) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(*argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class _Server(asyncssh.SSHServer):
    def __init__(self, sim: NodeSim, authorized: asyncssh.SSHKey):
        self.sim, self.authorized = sim, authorized

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.sim.connections += 1

    def begin_auth(self, username: str) -> bool:
        self.sim.auth.append(("begin", username))
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        self.sim.auth.append(("publickey", username))
        return key.public_data == self.authorized.public_data

    def password_auth_supported(self) -> bool:
        return True

    def validate_password(self, username: str, password: str) -> bool:
        self.sim.auth.append(("password", username))
        return False

    def kbdint_auth_supported(self) -> bool:
        return True

    def get_kbdint_challenge(self, username: str, lang: str, submethods: str) -> bool:
        self.sim.auth.append(("kbdint", username))
        return False


@dataclass
class Node:
    sim: NodeSim
    port: int
    host_key: asyncssh.SSHKey
    identity: Path
    client_key: asyncssh.SSHKey

    @property
    def fingerprint(self) -> str:
        return self.host_key.get_fingerprint("sha256")

    def target(self, username: str = "root") -> SshTarget:
        return SshTarget("n1", "127.0.0.1", self.port, username)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    identity = tmp_path / "id_ed25519"
    client_key.write_private_key(identity)
    identity.chmod(0o600)
    root = tmp_path / "node"
    (root / "etc/systemd/system").mkdir(parents=True)  # a systemd host has it
    sim = NodeSim(root)
    acceptor = await asyncssh.create_server(
        lambda: _Server(sim, client_key), "127.0.0.1", 0, server_host_keys=[host_key],
        process_factory=sim.handle, sftp_factory=lambda chan: asyncssh.SFTPServer(chan, chroot=os.fsencode(root)),
        allow_scp=False, encoding="utf-8",
    )
    try:
        yield Node(sim, acceptor.get_port(), host_key, identity, client_key)
    finally:
        acceptor.close()
        await acceptor.wait_closed()


@pytest.fixture
def local_files(tmp_path: Path) -> tuple[Path, Path]:
    wheel = tmp_path / "dist" / "bke-0.1.0-py3-none-any.whl"
    wheel.parent.mkdir()
    wheel.write_bytes(b"PK\x03\x04 not really a wheel")
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("asyncssh==2.24.1\n")
    return wheel, reqs


async def _bootstrap(node: Node, policy, local_files, username: str = "root", identity: Path | None = None):
    wheel, reqs = local_files
    params = BootstrapParams("prod", "n1", NATS, wheel, reqs, username=username)
    options = SshOptions(identity=asyncssh.read_private_key(identity or node.identity))
    target = node.target(username)
    [outcome] = await bootstrap_nodes(
        [("n1", f"127.0.0.1:{node.port}")], lambda n: bootstrap_steps(params),
        lambda n: open_session(target, policy, options))
    return outcome, bootstrap_steps(params)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_key_auth_and_pinned_fingerprint_bootstrap_the_node(node, local_files):
    outcome, steps = await _bootstrap(node, PinnedPolicy(node.fingerprint), local_files)
    assert outcome.ok, outcome.message
    assert outcome.public_key == PUBLIC_KEY
    sim, root = node.sim, node.sim.root
    assert sim.commands == [list(s.argv) for s in steps]  # every command, in table order, argv intact
    assert not any(sim.sudo)
    assert {m for m, _ in sim.auth} == {"begin", "publickey"}  # no password, no keyboard-interactive
    assert (root / "etc/bke-agent/env").read_text().splitlines()[1] == f"BKE_NATS_URL={NATS}"
    assert _mode(root / "etc/bke-agent/env") == 0o600
    assert _mode(root / "etc/bke-agent") == 0o700
    assert _mode(root / "etc/systemd/system/bke-agent.service") == 0o644
    assert "ExecStart=/opt/bke-agent/bin/bke-agent-launch" in (root / "etc/systemd/system/bke-agent.service").read_text()
    assert sim.staged_modes == {
        ".bke-bootstrap": 0o700, ".bke-bootstrap/requirements.txt": 0o600,
        ".bke-bootstrap/bke-0.1.0-py3-none-any.whl": 0o600,
    }
    assert sim.init_env == ["BKE_AGENT_BACKEND=host", "BKE_AGENT_CLUSTER=prod", "BKE_AGENT_NODE=n1"]
    assert not (root / ".bke-bootstrap").exists()  # cleaned up


async def test_known_hosts_entry_is_accepted_and_a_second_run_is_idempotent(node, local_files, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text(f"[127.0.0.1]:{node.port} {node.host_key.export_public_key('openssh').decode()}")
    first, _ = await _bootstrap(node, KnownHostsPolicy(kh), local_files)
    second, _ = await _bootstrap(node, KnownHostsPolicy(kh), local_files)
    assert first.ok and second.ok, (first.message, second.message)


async def test_wrong_pinned_fingerprint_is_refused_before_anything_is_sent(node, local_files):
    wrong = asyncssh.generate_private_key("ssh-ed25519").get_fingerprint("sha256")
    outcome, _ = await _bootstrap(node, PinnedPolicy(wrong), local_files)
    assert (outcome.status, outcome.step) == ("refused", "connect")
    assert "does not match" in outcome.message and node.fingerprint in outcome.message and wrong in outcome.message
    assert f"n1 (127.0.0.1:{node.port})" in outcome.message
    assert node.sim.connections == 1  # it did reach the server...
    assert node.sim.auth == [] and node.sim.commands == []  # ...and stopped at the key exchange


async def test_unknown_host_in_an_empty_known_hosts_is_refused(node, local_files, tmp_path):
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    outcome, _ = await _bootstrap(node, KnownHostsPolicy(kh), local_files)
    assert outcome.status == "refused" and "unknown" in outcome.message
    assert f"ssh-ed25519 {node.fingerprint}" in outcome.message
    assert node.sim.auth == [] and node.sim.commands == []


async def test_an_unauthorized_key_is_refused_and_no_password_is_ever_tried(node, local_files, tmp_path):
    other = tmp_path / "id_other"
    asyncssh.generate_private_key("ssh-ed25519").write_private_key(other)
    outcome, _ = await _bootstrap(node, PinnedPolicy(node.fingerprint), local_files, identity=other)
    assert (outcome.status, outcome.step) == ("refused", "authenticate")
    assert "password authentication is never tried" in outcome.message
    methods = {m for m, _ in node.sim.auth}
    assert "publickey" in methods and not methods & {"password", "kbdint"}
    assert node.sim.commands == []


async def test_non_root_user_gets_sudo_on_privileged_steps(node, local_files):
    outcome, steps = await _bootstrap(node, PinnedPolicy(node.fingerprint), local_files, username="deploy")
    assert outcome.ok, outcome.message
    assert node.sim.sudo == [s.privileged for s in steps]
    assert ("begin", "deploy") in node.sim.auth


async def test_a_failing_step_stops_the_node_with_its_stderr(node, local_files):
    node.sim.fail_on = "systemctl restart"
    outcome, _ = await _bootstrap(node, PinnedPolicy(node.fingerprint), local_files)
    assert (outcome.status, outcome.step) == ("failed", "restart")
    assert "Job for bke-agent.service failed." in outcome.message
    assert node.sim.commands[-1] == ["systemctl", "restart", "bke-agent.service"]  # init, cleanup not run


async def test_hostile_arguments_survive_a_real_remote_shell(node):
    node.sim.real_shell = True
    options = SshOptions(identity=node.client_key)
    async with open_session(node.target(), PinnedPolicy(node.fingerprint), options) as session:
        done = await session.run(remote_command(["printf", "%s\\0", *HOSTILE]), 10)
    assert done.exit_status == 0
    assert done.stdout.split("\0")[:-1] == HOSTILE
    assert not (node.sim.root / "PWNED").exists()


async def test_the_cli_end_to_end(node, local_files, tmp_path, capsys, nats_url, nats_client):
    """Over SSH, and through the bus: the agents are given the dispatcher's public key (in the env
    file), checked against the operator's pin, and each agent's key is recorded through the
    provisioning channel before it starts."""
    asked, recorded = [], []

    async def command_key(msg) -> None:
        asked.append(msg.subject)
        await msg.respond(CommandKey(public_line=SIGNER.verify_key.public_line, key_id=SIGNER.key_id).to_bytes())

    async def provision(msg) -> None:
        req = ProvisionAgent.model_validate_json(msg.data)
        recorded.append((req.node, req.seal_public_key_b64, len(node.sim.commands)))
        await msg.respond(AgentProvisioned(cluster=req.cluster, node=req.node, ok=True).to_bytes())

    subs = [await nats_client.subscribe(AGENTS_COMMAND_KEY, cb=command_key),
            await nats_client.subscribe(AGENTS_PROVISION, cb=provision)]
    await nats_client.flush()
    bus = nats_url.replace("nats://", "nats://agent:s3cret@")  # the server has no users: creds are ignored
    docs = synth_docs(1, masters=1, name="prod")
    docs[0]["spec"]["controlPlaneEndpoint"]["host"] = "127.0.0.1"
    docs[1]["spec"].update(hostname="n1", ip="127.0.0.1", port=node.port, role=["master/node", "etcd"])
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump_all(docs))
    wheel, reqs = local_files
    args = ["agent", "bootstrap", str(spec), "--nats", bus, "--identity", str(node.identity),
            "--wheel", str(wheel), "--requirements", str(reqs), "-o", "json"]
    pinned = [*args, "--command-key-fingerprint", SIGNER.verify_key.fingerprint]
    # The CLI runs its own event loop: give it a thread while this loop keeps serving SSH.
    code = await asyncio.to_thread(main, [*pinned, "--host-key-fingerprint", node.fingerprint])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f'"public_key": "{PUBLIC_KEY}"' in out and "s3cret" not in out + err
    assert asked and [r[:2] for r in recorded] == [("n1", PUBLIC_KEY.split()[1])]
    started = next(i for i, c in enumerate(node.sim.commands) if c[:2] == ["systemctl", "restart"])
    assert recorded[0][2] <= started  # recorded before the agent was started
    env_file = node.sim.root / "etc/bke-agent/env"
    assert f"BKE_AGENT_COMMAND_KEY={SIGNER.verify_key.public_line.split()[1]}" in env_file.read_text().splitlines()
    wrong = asyncssh.generate_private_key("ssh-ed25519").get_fingerprint("sha256")
    code = await asyncio.to_thread(main, [*pinned, "--host-key-fingerprint", f"n1={wrong}"])
    out, err = capsys.readouterr()
    assert code == 1
    assert any(line.startswith("ERROR node n1") and node.fingerprint in line for line in err.splitlines())
    host = ["--host-key-fingerprint", node.fingerprint]

    # the bus answers a key that is not the pinned one: refused, naming both, and no node contacted
    connections, asked_before = node.sim.connections, len(asked)
    code = await asyncio.to_thread(main, [*args, *host, "--command-key-fingerprint", OTHER_SIGNER.verify_key.fingerprint])
    out, err = capsys.readouterr()
    assert code == 1, err
    [line] = [ln for ln in err.splitlines() if ln.startswith("ERROR ")]
    assert SIGNER.verify_key.fingerprint in line and OTHER_SIGNER.verify_key.fingerprint in line, line
    assert "no node was given either" in line
    assert len(asked) == asked_before + 1 and node.sim.connections == connections and len(recorded) == 1

    # no pin at all: refused before the bus is asked
    code = await asyncio.to_thread(main, [*args, *host])
    out, err = capsys.readouterr()
    assert code == 2 and "refusing to give the agents a command-signing key the bus answered, unverified" in err
    assert len(asked) == asked_before + 1 and node.sim.connections == connections

    # the pin from a file (what `bke state init --command-key-out` and a lab write): the right one works
    pub = tmp_path / "command-key.pub"
    pub.write_text(SIGNER.verify_key.public_line + "\n")
    code = await asyncio.to_thread(main, [*args, *host, "--command-key-file", str(pub)])
    out, err = capsys.readouterr()
    assert code == 0, err
    pub.write_text(OTHER_SIGNER.verify_key.public_line + "\n")
    code = await asyncio.to_thread(main, [*args, *host, "--command-key-file", str(pub)])
    out, err = capsys.readouterr()
    assert code == 1 and f"({pub})" in err and OTHER_SIGNER.verify_key.fingerprint in err

    # the operator says to trust the answer: it works, and says which key it trusted
    code = await asyncio.to_thread(main, [*args, *host, "--command-key-unsafe-skip-verification"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"WARNING the agents are given the command-signing key the bus answered, {SIGNER.verify_key.fingerprint}, " \
           "unverified" in err
    for sub in subs:
        await sub.unsubscribe()


SSHD = Path("/usr/sbin/sshd")


@pytest.mark.skipif(not SSHD.exists(), reason="no /usr/sbin/sshd on this machine; the asyncssh server covers the SSH path")
async def test_system_sshd_key_auth_host_key_and_quoting(tmp_path):  # pragma: no cover - needs OpenSSH server
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    (tmp_path / "host_key").write_bytes(host_key.export_private_key())
    (tmp_path / "host_key").chmod(0o600)
    (tmp_path / "authorized_keys").write_bytes(client_key.export_public_key())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp_path}/host_key\n"
        f"AuthorizedKeysFile {tmp_path}/authorized_keys\nPidFile {tmp_path}/sshd.pid\nStrictModes no\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nPermitRootLogin prohibit-password\n"
    )
    proc = await asyncio.create_subprocess_exec(str(SSHD), "-D", "-e", "-f", str(tmp_path / "sshd_config"),
                                                stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        while b"Server listening" not in (line := await asyncio.wait_for(proc.stderr.readline(), 30)):
            assert line, "sshd exited before listening"
        target = SshTarget("n1", "127.0.0.1", port, getpass.getuser())
        options = SshOptions(identity=client_key)
        async with open_session(target, PinnedPolicy(host_key.get_fingerprint("sha256")), options) as session:
            done = await session.run(remote_command(["printf", "%s\\0", *HOSTILE]), 10)
        assert done.stdout.split("\0")[:-1] == HOSTILE
        with pytest.raises(HostKeyRefused):
            wrong = asyncssh.generate_private_key("ssh-ed25519").get_fingerprint("sha256")
            async with open_session(target, PinnedPolicy(wrong), options):
                pass
    finally:
        proc.terminate()  # our own sshd, by its PID
        await proc.wait()
