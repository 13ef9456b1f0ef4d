"""The SSH adapter (asyncssh): connect with a verified host key and a public key, run, upload.

Why asyncssh and these options: one event loop drives hundreds of nodes, and every decision that
matters is explicit rather than inherited from the operator's ``~/.ssh/config``:

* host key: asyncssh's own known_hosts handling is replaced by :func:`bke.adapters.ssh.hostkeys.decide_host_key`
  (``known_hosts`` is given as an empty trust set, so every plain key reaches
  ``validate_host_public_key``); certificate algorithms are not offered, so the server always shows
  a plain key we can name by fingerprint. With known_hosts, the algorithms of the keys listed for
  the host are offered first (as OpenSSH does), so the negotiated key is one we know;
* authentication: public key only (``preferred_auth="publickey"``, no password, no
  keyboard-interactive, no GSS, no host-based); ``--identity`` alone when given, else the ssh-agent
  and ``~/.ssh/id_*``; ``disable_trivial_auth`` refuses a server that lets us in without any check;
* no ``~/.ssh/config`` (``config=None``): a ProxyJump or ``StrictHostKeyChecking no`` there must not
  silently change what this command does.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import asyncssh

from .errors import HostKeyRefused, SshAuthRefused, SshUnreachable, UploadFailed
from .hostkeys import (
    Expectation,
    HostKeyDecision,
    HostKeyPolicy,
    KnownHostsPolicy,
    PinnedPolicy,
    SeenKey,
    decide_host_key,
)

__all__ = [
    "RunResult",
    "SshOptions",
    "SshSession",
    "SshTarget",
    "expectation_for",
    "load_identity",
    "open_session",
    "policy_problems",
]

log = logging.getLogger(__name__)

# Plain host-key algorithms, OpenSSH's order of preference (ed25519 first), no certificates.
PLAIN_HOST_KEY_ALGS = (
    "ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
    "rsa-sha2-512", "rsa-sha2-256",
)


@dataclass(frozen=True)
class SshTarget:
    node: str
    host: str  # the address from the spec
    port: int = 22
    username: str = "root"

    @property
    def label(self) -> str:
        return f"{self.node} ({self.host}:{self.port})"


@dataclass(frozen=True)
class SshOptions:
    identity: asyncssh.SSHKey | None = None  # from load_identity(); None: ssh-agent and ~/.ssh/id_*
    connect_timeout_s: float = 15.0
    login_timeout_s: float = 30.0


@dataclass(frozen=True)
class RunResult:
    exit_status: int | None  # None when the command was killed by a signal
    stdout: str
    stderr: str


def load_identity(path: Path) -> asyncssh.SSHKey:
    """Read an unencrypted private key, or ValueError saying why (never the key itself)."""
    try:
        return asyncssh.read_private_key(path)
    except asyncssh.KeyEncryptionError:
        raise ValueError(f"{path}: the key is encrypted; load it into ssh-agent and omit --identity") from None
    except (OSError, asyncssh.KeyImportError) as exc:
        raise ValueError(f"{path}: not a readable private key ({type(exc).__name__})") from None


def _known_hosts(path: Path) -> asyncssh.SSHKnownHosts:
    """Parsed once per file version: thousands of nodes share one parse, an edited file is re-read."""
    st = path.stat()
    return _parse_known_hosts(path, st.st_mtime_ns, st.st_size)


@lru_cache(maxsize=8)
def _parse_known_hosts(path: Path, mtime_ns: int, size: int) -> asyncssh.SSHKnownHosts:
    return asyncssh.read_known_hosts(str(path))


def policy_problems(policy: HostKeyPolicy, nodes: Sequence[str]) -> list[str]:
    """What makes ``policy`` unusable for ``nodes`` before connecting (empty when it is usable)."""
    if isinstance(policy, PinnedPolicy):
        missing = [n for n in nodes if policy.for_node(n) is None]
        return [f"no --host-key-fingerprint for node {n}" for n in missing]
    try:
        _known_hosts(policy.path)
    except OSError as exc:
        return [f"{policy.path}: {exc.strerror or exc}"]
    except (ValueError, asyncssh.KeyImportError) as exc:
        return [f"{policy.path}: not a known_hosts file ({exc})"]
    return []


def expectation_for(policy: HostKeyPolicy, target: SshTarget) -> tuple[Expectation, tuple[str, ...]]:
    """The fingerprints this target's key may have, and the host-key algorithms to offer."""
    if isinstance(policy, KnownHostsPolicy):
        # Entries under the node's name or its address both apply (OpenSSH's CheckHostIP view).
        port = None if target.port == 22 else target.port
        trusted, _cas, revoked, *_ = _known_hosts(policy.path).match(target.node, target.host, port)
        algs = tuple(dict.fromkeys(a for k in trusted for a in _plain_algs(k)))
        return Expectation(
            f"known_hosts {policy.path}",
            frozenset(k.get_fingerprint("sha256") for k in trusted),
            frozenset(k.get_fingerprint("sha256") for k in revoked),
        ), algs or PLAIN_HOST_KEY_ALGS
    pin = policy.for_node(target.node)
    return Expectation("the pinned fingerprint", frozenset({pin}) if pin else frozenset()), PLAIN_HOST_KEY_ALGS


def _plain_algs(key: asyncssh.SSHKey) -> list[str]:
    names = [a.decode() for a in key.sig_algorithms]
    return [a for a in PLAIN_HOST_KEY_ALGS if a in names]


class _VerifyingClient(asyncssh.SSHClient):
    """Keeps the host-key decision so that a refusal can be reported with the fingerprint seen."""

    def __init__(self, target: SshTarget, expected: Expectation):
        self._target = target
        self._expected = expected
        self.decision: HostKeyDecision | None = None

    def validate_host_public_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        seen = SeenKey(key.get_algorithm(), key.get_fingerprint("sha256"))
        self.decision = decide_host_key(self._target.label, seen, self._expected)
        return self.decision.accepted

    def validate_host_ca_key(self, host: str, addr: str, port: int, key: asyncssh.SSHKey) -> bool:
        return False  # certificate algorithms are never offered; refuse if one shows up anyway


class SshSession:
    """One authenticated connection: run a command string, upload bytes with a mode."""

    def __init__(self, conn: asyncssh.SSHClientConnection, target: SshTarget):
        self._conn = conn
        self.target = target
        self._sftp: asyncssh.SFTPClient | None = None

    async def run(self, command: str, timeout_s: float) -> RunResult:
        try:
            done = await self._conn.run(command, check=False, timeout=timeout_s, encoding="utf-8", errors="replace")
        except asyncssh.TimeoutError as exc:
            return RunResult(None, str(exc.stdout or ""), f"timed out after {timeout_s:g}s")
        except (asyncssh.Error, OSError) as exc:
            raise SshUnreachable(f"{self.target.label}: connection lost ({_reason(exc)})") from None
        return RunResult(done.exit_status, str(done.stdout or ""), str(done.stderr or ""))

    async def upload(self, data: bytes, remote_path: str, mode: int) -> None:
        """Create or truncate with ``mode``, set the mode before any byte is written, then write."""
        if self._sftp is None:
            try:
                self._sftp = await self._conn.start_sftp_client()
            except (asyncssh.ChannelOpenError, asyncssh.SFTPError) as exc:
                raise UploadFailed(
                    f"{self.target.label}: no SFTP subsystem ({_reason(exc)}); enable `Subsystem sftp` in "
                    "sshd_config, or prepare the node with `bke agent bootstrap --print-installer`"
                ) from None
        try:
            flags = asyncssh.FXF_WRITE | asyncssh.FXF_CREAT | asyncssh.FXF_TRUNC
            async with self._sftp.open(remote_path, flags, asyncssh.SFTPAttrs(permissions=mode), encoding=None) as f:
                await f.chmod(mode)  # an existing file keeps its old mode through open(); fix it first
                await f.write(data)
        except asyncssh.SFTPError as exc:
            raise UploadFailed(f"{self.target.label}: upload of {remote_path} failed ({exc.reason})") from None
        except (asyncssh.Error, OSError) as exc:
            raise SshUnreachable(f"{self.target.label}: connection lost ({_reason(exc)})") from None

    async def close(self) -> None:
        if self._sftp is not None:
            self._sftp.exit()
        self._conn.close()
        await self._conn.wait_closed()


@contextlib.asynccontextmanager
async def open_session(target: SshTarget, policy: HostKeyPolicy, options: SshOptions) -> AsyncIterator[SshSession]:
    """Connect, verify the host key, authenticate with a public key; raise a classified error."""
    expected, algs = expectation_for(policy, target)
    client = _VerifyingClient(target, expected)
    keys: dict[str, object] = {}
    if options.identity is not None:
        keys = {"client_keys": [options.identity], "agent_path": None}
    try:
        conn = await asyncssh.connect(
            target.host, target.port, username=target.username, client_factory=lambda: client,
            known_hosts=([], [], []), server_host_key_algs=list(algs), x509_trusted_certs=None,
            password=None, password_auth=False, kbdint_auth=False, gss_host=None, host_based_auth=False,
            preferred_auth="publickey", disable_trivial_auth=True, config=None,
            connect_timeout=options.connect_timeout_s, login_timeout=options.login_timeout_s,
            keepalive_interval=30, **keys,
        )
    except asyncssh.HostKeyNotVerifiable as exc:
        d = client.decision
        if d is not None and not d.accepted:
            raise HostKeyRefused(d.message, d.fingerprint) from None
        raise HostKeyRefused(f"host key for {target.label} refused: {exc.reason}") from None
    except asyncssh.KeyExchangeFailed as exc:
        # With known_hosts, only the algorithms of the listed keys are offered: no overlap is a refusal.
        raise HostKeyRefused(
            f"host key for {target.label} refused: the server has no host key of the types offered "
            f"({', '.join(algs)}, from {expected.source}): {exc.reason}"
        ) from None
    except asyncssh.PermissionDenied:
        raise SshAuthRefused(
            f"{target.label}: public-key authentication as {target.username!r} was refused "
            "(password authentication is never tried)"
        ) from None
    except (asyncssh.Error, OSError, TimeoutError) as exc:
        raise SshUnreachable(f"{target.label}: cannot connect ({_reason(exc)})") from None
    session = SshSession(conn, target)
    log.debug("ssh connected", extra={"node": target.node, "operation": "agent-bootstrap"})
    try:
        yield session
    finally:
        await session.close()


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", "") or str(exc) or type(exc).__name__
