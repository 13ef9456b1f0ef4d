"""The command model between the dispatcher and the node agents (`bke-agent`).

A command is for one node: an id, ordered typed steps, and the dispatcher's Ed25519 signature
over its canonical bytes (`signing_bytes`), valid from `issued_at` to `expires_at`, and bound to
the receiving agent's key and the cluster's incarnation; an agent runs nothing else
(bke.core.secrets.signing, bke.core.secrets.binding; agent/bke_agent/verify.py). Commands and
steps are idempotent: an agent that already completed a command id answers with the
stored result (`replayed=True`) and runs nothing. Files that carry private keys travel
`sealed` to the receiving agent's X25519 key; nothing on the bus holds them in clear.

Subjects (hostnames may hold dots, which NATS reads as token separators, so a node's
token is `node_token(hostname)`):
    bke.v1.agent.<cluster>.<node>.command     dispatcher -> agent   (durable per agent; the
                                                                   upgrader's go through it)
    bke.v1.agent.<cluster>.<node>.result      agent -> dispatcher   (every answer, with the
                                                                   command's operation echoed)
    bke.v1.agent.<cluster>.<node>.upgrader-result
                                              agent -> dispatcher   (deprecated: where agents of
                                                                   the previous release answer
                                                                   the upgrader's commands)
    bke.v1.agent.<cluster>.<node>.registered  agent -> dispatcher   (public keys, at start)
    bke.v1.agent.<cluster>.<node>.refused     agent -> dispatcher   (a command it would not run)
    bke.v1.heartbeat.<cluster>.<node>         agent -> dispatcher   (core NATS, not stored)
    bke.v1.agents.provision                   operator -> certs     (request: record an agent's key)
    bke.v1.agents.accepted                    certs -> dispatcher   (a registration with the provisioned key)
    bke.v1.agents.refused                     certs -> dispatcher   (a registration BKE did not provision)
"""
from __future__ import annotations

import json

from typing import Literal

from pydantic import Field

from .agent_steps import Step
from .base import Message
from .channel import Channel
from .operation_ref import OperationRef
from .statuses import FinishedStatus, StepResultStatus

__all__ = [
    "CHANNELS",
    "AGENT_VERSION",
    "subject_node",
    "AGENT_PREFIX",
    "UPGRADER_RESULT",
    "AGENTS_PROVISION",
    "AGENTS_REFUSED",
    "AGENTS_COMMAND_KEY",
    "AGENTS_ACCEPTED",
    "AgentAccepted",
    "CommandKey",
    "GetCommandKey",
    "CLOCK_SKEW_S",
    "COMMAND_VALIDITY_S",
    "AgentProvisioned",
    "AgentRefused",
    "CommandRefused",
    "ProvisionAgent",
    "AgentCommand",
    "AgentHeartbeat",
    "AgentRegistered",
    "AgentRuntime",
    "RESTART_EXIT_CODE",
    "CommandResult",
    "StepResult",
    "agent_subject",
    "node_token",
    "token_node",
    "OUTPUT_LIMIT",
]

AGENT_PREFIX = "bke.v1.agent"
# Deprecated, read until bke.v2: the subject kind where an agent of the previous release answers
# a command the upgrader issued. Every answer now goes to `result`, and the dispatcher, which
# hears both, routes it by the operation it echoes (bke.contracts.operation_ref).
UPGRADER_RESULT = "upgrader-result"
HEARTBEAT_PREFIX = "bke.v1.heartbeat"  # outside the agent stream: heartbeats are not kept
OUTPUT_LIMIT = 4096  # bytes of stdout/stderr kept per step
# A command is valid for as long as the agent stream keeps it (BKE_AGENT max age, 7 days: one
# that waited there while its agent was down still runs). The agent journal keeps each result
# until a day after its command expired (agent/bke_agent/journal.py): a captured command
# replayed while valid is answered from the journal without running; after that it is refused
# as stale.
COMMAND_VALIDITY_S = 7 * 86400
CLOCK_SKEW_S = 300  # how far a node's clock may be behind the dispatcher's ("not yet valid")
AGENTS_PROVISION = "bke.v1.agents.provision"
AGENTS_REFUSED = "bke.v1.agents.refused"
AGENTS_COMMAND_KEY = "bke.v1.agents.command-key"
AGENTS_ACCEPTED = "bke.v1.agents.accepted"


def node_token(hostname: str) -> str:
    """Hostnames are DNS-1123 (no '_'), so '.' -> '_' is reversible."""
    return hostname.replace(".", "_")


def token_node(token: str) -> str:
    return token.replace("_", ".")


# How an agent asks its launcher to start it again, into the venv its record selects (an
# UpdateAgent step): EX_TEMPFAIL, "try again". Any other exit ends the launcher with that code.
RESTART_EXIT_CODE = 75

# The agent version this BKE ships: what every agent must report before an upgrade touches its node.
AGENT_VERSION = "0.1.0"


def subject_node(subject: str) -> tuple[str, str] | None:
    """(cluster, node) of `bke.v1.agent.<cluster>.<node>.<kind>`, None for any other subject."""
    head = AGENT_PREFIX + "."
    if not subject.startswith(head):
        return None
    parts = subject[len(head):].split(".")
    return (parts[0], token_node(parts[1])) if len(parts) == 3 else None


def agent_subject(cluster: str, hostname: str, kind: str) -> str:
    if kind == "heartbeat":
        return f"{HEARTBEAT_PREFIX}.{cluster}.{node_token(hostname)}"
    return f"{AGENT_PREFIX}.{cluster}.{node_token(hostname)}.{kind}"


class AgentCommand(Message):
    """Signed by the dispatcher (`signature_b64` over `signing_bytes()`, key `key_id`); valid
    from `issued_at` to `expires_at` (ISO 8601, UTC).

    Bound to its receiver (bke.core.secrets.binding): `agent_id` is the fingerprint of the receiving
    agent's provisioned key, `incarnation` the cluster's, both signed. Left out of the body when
    unset (an unbound command, for an agent of the previous release, which forbids unknown
    fields), as `kernel_below` is."""

    command_id: str = Field(min_length=1, max_length=256)
    cluster: str
    node: str
    phase: str
    issued_at: str
    steps: list[Step]
    issuer: str = "dispatcher"
    expires_at: str = ""
    key_id: str = ""
    agent_id: str | None = Field(None, min_length=1, max_length=128, exclude_if=lambda v: v is None)
    incarnation: str | None = Field(None, pattern=r"^(\d{8}T\d{12}Z-[0-9a-f]{16})?$",
                                    exclude_if=lambda v: v is None)
    # the operation it is part of (bke.contracts.operation_ref), signed with the rest; left out
    # for an agent that reads none (bke.core.secrets.binding, OPERATION_REFS)
    operation: OperationRef | None = Field(None, exclude_if=lambda v: v is None)
    signature_b64: str = ""

    def signing_bytes(self) -> bytes:
        """The canonical bytes that are signed: deterministic JSON (sorted keys, no spaces) of
        the wire form without the signature. Any changed field changes these bytes."""
        doc = self.model_dump(mode="json", by_alias=True, exclude={"signature_b64"})
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


class StepResult(Message):
    id: str
    status: StepResultStatus
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    attempts: int = 1
    duration_s: float = 0.0


class CommandResult(Message):
    """`incarnation`: the cluster incarnation of the command it answers (its signed
    `incarnation`; a replay answered from the journal says the stored command's): a cluster made
    again under its name reuses command ids, and its dispatcher and upgrader drop an answer to
    the deleted cluster's command (bke.core.secrets.binding.result_refusal). None for an unbound
    command, and then left out of the body, as AgentCommand's binding is: only a signer that
    binds reads it."""

    command_id: str
    cluster: str
    node: str
    agent_id: str  # identity: fingerprint of the agent's public key
    status: FinishedStatus
    steps: list[StepResult]
    started_at: str
    finished_at: str
    replayed: bool = False  # True: the stored result of an already completed command
    agent_version: str = ""  # the answering agent's version (the upgrade's agents step checks it)
    incarnation: str | None = Field(None, pattern=r"^(\d{8}T\d{12}Z-[0-9a-f]{16})?$", exclude_if=lambda v: v is None)
    # the command's operation, echoed: the dispatcher routes the result by it (None: an agent of
    # an earlier release, or a command sent without one; left out of the body then)
    operation: OperationRef | None = Field(None, exclude_if=lambda v: v is None)


class AgentRegistered(Message):
    cluster: str
    node: str
    agent_id: str
    seal_public_key_b64: str  # X25519, raw 32 bytes, base64
    backend: Literal["host", "lab"]
    version: str
    at: str
    # "sha256:<hex>" of the cluster CA the node already holds (bke.core.secrets.fingerprint), None if
    # none: the certs service never seals a bundle of another CA to it (state lost or replaced)
    ca_fingerprint: str | None = None


class CommandRefused(Message):
    """Event: the agent would not run a command (bad or missing signature, another node or
    cluster, another agent key or an older incarnation of the cluster, expired, not yet valid).
    Nothing ran; the reason is the agent's own check."""

    cluster: str
    node: str
    agent_id: str
    command_id: str = Field("", max_length=256)  # "" when the bytes were no command at all
    reason: str = Field(max_length=500)
    at: str


class ProvisionAgent(Message):
    """Request (operator only): record the key BKE made for this node's agent. Only a
    registration with this key is ever sealed to."""

    cluster: str = Field(min_length=1, max_length=63)
    node: str = Field(min_length=1, max_length=253)
    agent_id: str = Field(min_length=1, max_length=128)
    seal_public_key_b64: str = Field(min_length=1, max_length=128)
    at: str = ""


class AgentProvisioned(Message):
    """Reply to ProvisionAgent: `ok`, or the reason it was not recorded."""

    cluster: str
    node: str
    ok: bool
    reason: str = ""


class GetCommandKey(Message):
    """Request: the dispatcher's command-signing public key, to provision an agent with."""

    purpose: str = "provision"


class CommandKey(Message):
    """Reply: `publicLine` is what an agent is given (BKE_AGENT_COMMAND_KEY)."""

    public_line: str
    key_id: str


class AgentAccepted(Message):
    """Event: a registration's key is the one provisioned for its node: from now on this agent
    is the node's (the dispatcher believes that node's results only from `agent_id`)."""

    cluster: str
    node: str
    agent_id: str
    at: str


class AgentRefused(Message):
    """Event: a registration was refused (its key is not the one BKE provisioned for the node,
    or none was); nothing was sealed to it."""

    cluster: str
    node: str
    agent_id: str
    reason: str
    at: str


class AgentRuntime(Message):
    """What an agent runs and runs on: its version, and the Python and platform an update's
    wheels must install on. The upgrader gives each node only the wheels whose tags pip would
    accept there (bke_upgrader.wheel_tags: PEP 425 tags, manylinux by glibc version (PEP 600),
    musllinux by musl version (PEP 656)), so a node downloads only what it installs."""

    agent_version: str = Field(pattern=r"^[0-9]+\.[0-9]+\.[0-9]+([.+-][0-9A-Za-z.+-]+)?$", max_length=64)
    python: str = Field(pattern=r"^[0-9]\.[0-9]{1,2}$")  # major.minor of the agent's interpreter
    implementation: str = Field("cpython", pattern=r"^[a-z0-9_]{1,32}$")  # sys.implementation.name
    machine: str = Field(pattern=r"^[A-Za-z0-9_]{1,32}$")  # platform.machine(): x86_64, aarch64, ...
    # the C library the interpreter links: "glibc" / "musl" and its major.minor; "" when not known
    # (then only the wheels tagged for any Linux of that arch, or pure, are compatible)
    libc: Literal["glibc", "musl", ""] = ""
    libc_version: str = Field("", pattern=r"^([0-9]{1,3}\.[0-9]{1,3})?$")
    # the form of command binding the agent checks (bke.core.secrets.binding.COMMAND_BINDING); 0: an
    # agent older than binding, which is sent unbound commands
    command_binding: int = Field(0, ge=0, le=1000)


class AgentHeartbeat(Message):
    """Fields after `running_command` came later and are optional, so that a heartbeat of an
    older agent still reads (the body's form is unchanged: MESSAGE_SCHEMA stays)."""

    cluster: str
    node: str
    agent_id: str
    at: str
    running_command: str | None = None
    # the host's cgroup version as the agent sees it (2: a cgroup2 filesystem at /sys/fs/cgroup;
    # the upgrader's CgroupV2 check); None: not known (an older agent, a lab node)
    cgroup_version: Literal[1, 2] | None = None
    # the agent's version, Python and platform (the upgrade's agents step picks the wheels of an
    # update for it); None: an agent older than this field (the agents step cannot update it)
    runtime: AgentRuntime | None = None


# A node's commands, and what its agent sends back, are kept in two streams of their own
# (bke.adapters.bus.streams says why they are apart); a node's agent may publish only its own
# output subjects (bke.adapters.auth.permissions). Heartbeats are kept in none.
CHANNELS: tuple[Channel, ...] = (
    Channel("bke.v1.agent.{cluster}.{node}.command", AgentCommand, "command", "Steps for one node's agent, signed by the dispatcher (the upgrader's too, sent through it); secret files sealed to that agent.", ("dispatcher",), ("agent",),
            stored="agent-commands"),
    Channel("bke.v1.agent.{cluster}.{node}.result", CommandResult, "event", "The agent ran (or replayed) a command; it echoes the command's operation, by which the dispatcher routes the answer.", ("agent",), ("dispatcher",),
            stored="agent-outputs"),
    Channel("bke.v1.agent.{cluster}.{node}.upgrader-result", CommandResult, "event",
            "Deprecated: where agents of the previous release answer the upgrader's commands; read by the dispatcher like result, until bke.v2.",
            ("agent",), ("dispatcher",), stored="agent-outputs"),
    Channel("bke.v1.agent.{cluster}.{node}.registered", AgentRegistered, "event", "An agent started and announces its public keys (sealed to only if they are the ones provisioned).", ("agent",), ("certs",),
            stored="agent-outputs"),
    Channel("bke.v1.agent.{cluster}.{node}.refused", CommandRefused, "event", "The agent refused a command (unsigned, not the dispatcher's key, another node, expired or not yet valid); nothing ran.", ("agent",), ("dispatcher",),
            stored="agent-outputs"),
    Channel(AGENTS_PROVISION, ProvisionAgent, "request", "Record the key BKE made for a node's agent at provisioning (operator only; queue group certs-provision; core NATS, not stored).", ("cli",), ("certs",), (AgentProvisioned,)),
    Channel(AGENTS_COMMAND_KEY, GetCommandKey, "request", "The dispatcher's command-signing public key, given to agents at provisioning (queue group dispatcher-command-key; core NATS, not stored).", ("cli",), ("dispatcher",), (CommandKey,)),
    Channel(AGENTS_ACCEPTED, AgentAccepted, "event", "A registration's key is the one provisioned for its node: the node's results are believed only from this agent.", ("certs",), ("dispatcher",)),
    Channel(AGENTS_REFUSED, AgentRefused, "event", "A registration's key is not the one provisioned for its node (or none was): nothing was sealed to it.", ("certs",), ("dispatcher",)),
    Channel("bke.v1.heartbeat.{cluster}.{node}", AgentHeartbeat, "event", "Agent liveness (core NATS, not stored).", ("agent",), ("dispatcher",),
            stored=""),
)
