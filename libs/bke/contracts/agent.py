"""The command model between the dispatcher and the node agents (`bke-agent`).

A command is for one node: an id, ordered typed steps, and room for the later security
work (issuer + signature on commands, the agent's identity on results). Commands and
steps are idempotent: an agent that already completed a command id answers with the
stored result (`replayed=True`) and runs nothing. Files that carry private keys travel
`sealed` to the receiving agent's X25519 key; nothing on the bus holds them in clear.

Subjects (hostnames may hold dots, which NATS reads as token separators, so a node's
token is `node_token(hostname)`):
    bke.v1.agent.<cluster>.<node>.command     dispatcher -> agent   (durable per agent)
    bke.v1.agent.<cluster>.<node>.result      agent -> dispatcher
    bke.v1.agent.<cluster>.<node>.registered  agent -> dispatcher   (public keys, at start)
    bke.v1.agent.<cluster>.<node>.heartbeat   agent -> dispatcher   (core NATS, not stored)
"""
from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from .base import Message

__all__ = [
    "AGENT_PREFIX",
    "AgentCommand",
    "AgentHeartbeat",
    "AgentRegistered",
    "CheckHost",
    "CommandResult",
    "FetchFile",
    "RemoveFile",
    "RestartStaticPod",
    "RunProgram",
    "Step",
    "StepResult",
    "SystemdUnit",
    "TlsFiles",
    "WaitHealth",
    "WriteFile",
    "agent_subject",
    "node_token",
    "token_node",
    "OUTPUT_LIMIT",
]

AGENT_PREFIX = "bke.v1.agent"
HEARTBEAT_PREFIX = "bke.v1.heartbeat"  # outside the agent stream: heartbeats are not kept
OUTPUT_LIMIT = 4096  # bytes of stdout/stderr kept per step


def node_token(hostname: str) -> str:
    """Hostnames are DNS-1123 (no '_'), so '.' -> '_' is reversible."""
    return hostname.replace(".", "_")


def token_node(token: str) -> str:
    return token.replace("_", ".")


def agent_subject(cluster: str, hostname: str, kind: str) -> str:
    if kind == "heartbeat":
        return f"{HEARTBEAT_PREFIX}.{cluster}.{node_token(hostname)}"
    return f"{AGENT_PREFIX}.{cluster}.{node_token(hostname)}.{kind}"


class _Step(Message):
    id: str = Field(min_length=1, max_length=128)
    timeout_s: float = Field(60.0, gt=0, le=3600)
    retries: int = Field(0, ge=0, le=20)
    backoff_s: float = Field(1.0, ge=0, le=300)


class WriteFile(_Step):
    """Write `content_b64` (clear) or `sealed_b64` (sealed to this agent) at an absolute path.
    Skipped when the file already has these bytes, mode and owner."""

    type: Literal["write_file"] = "write_file"
    path: str
    mode: int = Field(0o644, ge=0, le=0o7777)
    owner: str = "root"
    group: str = "root"
    content_b64: str | None = None
    sealed_b64: str | None = None
    sha256: str  # of the clear bytes: lets the agent skip an identical file without opening it


class RemoveFile(_Step):
    type: Literal["remove_file"] = "remove_file"
    path: str


class RunProgram(_Step):
    """argv is a list, never a shell string: no user input reaches a shell."""

    type: Literal["run"] = "run"
    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = {}
    ok_exit_codes: list[int] = [0]


class SystemdUnit(_Step):
    type: Literal["systemd"] = "systemd"
    unit: str
    action: Literal["daemon-reload", "enable", "disable", "start", "stop", "restart", "enable-now"]


class RestartStaticPod(_Step):
    """Restart one static pod so that it reads its files again (a kubelet never restarts a
    static pod because a file it mounts changed). `manifest` is the pod's file under the
    kubelet's static pod directory; `health_url`, if given, is how the agent knows the old
    pod is gone before it puts the manifest back (the kubelet notices both changes)."""

    type: Literal["restart_static_pod"] = "restart_static_pod"
    manifest: str = Field(pattern=r"^/etc/kubernetes/manifests/[A-Za-z0-9][A-Za-z0-9._-]*\.yaml$")
    health_url: str | None = None


class TlsFiles(Message):
    ca: str
    cert: str
    key: str


class WaitHealth(_Step):
    """Poll a local health endpoint until it answers `expect_status` (and `expect_body`)."""

    type: Literal["wait_health"] = "wait_health"
    url: str
    tls: TlsFiles | None = None
    expect_status: int = 200
    expect_body: str | None = None


class FetchFile(_Step):
    """Download a binary from the cluster's httpRepo and verify its checksum."""

    type: Literal["fetch"] = "fetch"
    url: str
    path: str
    sha256: str
    mode: int = 0o755


class CheckHost(_Step):
    """Preflight checks of the node (like kubeadm's): each name is one check."""

    type: Literal["check_host"] = "check_host"
    checks: list[Literal["os", "swap-off", "ports-free", "disk", "time", "kernel-modules"]]
    ports: list[int] = []


Step = Annotated[
    Union[WriteFile, RemoveFile, RunProgram, SystemdUnit, WaitHealth, FetchFile, CheckHost, RestartStaticPod],
    Field(discriminator="type"),
]


class AgentCommand(Message):
    command_id: str = Field(min_length=1, max_length=256)
    cluster: str
    node: str
    phase: str
    issued_at: str
    steps: list[Step]
    issuer: str = "dispatcher"
    signature: str | None = None  # reserved: signed commands (later security work)


class StepResult(Message):
    id: str
    status: Literal["Succeeded", "Failed", "Skipped"]
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    attempts: int = 1
    duration_s: float = 0.0


class CommandResult(Message):
    command_id: str
    cluster: str
    node: str
    agent_id: str  # identity: fingerprint of the agent's public key
    status: Literal["Succeeded", "Failed"]
    steps: list[StepResult]
    started_at: str
    finished_at: str
    replayed: bool = False  # True: the stored result of an already completed command


class AgentRegistered(Message):
    cluster: str
    node: str
    agent_id: str
    seal_public_key_b64: str  # X25519, raw 32 bytes, base64
    backend: Literal["host", "lab"]
    version: str
    at: str
    # "sha256:<hex>" of the cluster CA the node already holds (bke.secrets.fingerprint), None if
    # none: the certs service never seals a bundle of another CA to it (state lost or replaced)
    ca_fingerprint: str | None = None


class AgentHeartbeat(Message):
    cluster: str
    node: str
    agent_id: str
    at: str
    running_command: str | None = None
