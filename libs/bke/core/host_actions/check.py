"""Whether a command's kind agrees with its id (origins.py) and it stays inside what its kind
may do (table.py): its step types, what they write, remove, run and drive, its programs'
arguments (programs.py) and its probes' endpoints (endpoints.py). Checked by the agent on the
whole command before any step runs: a command that fails it is refused as a whole, as an
unsigned one is (nothing of it ran).

What is read from the signed command only: its id, paths, modes, argv, units, URLs, TLS paths.
File contents are not (most are sealed to the agent): the agent opens them and checks every
kubeconfig of the command next, still before any step runs (kubeconfigs.py;
agent/bke_agent/contents.py).
"""
from __future__ import annotations

import posixpath

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import (
    EtcdMemberAdd,
    EtcdMemberPromote,
    EtcdMemberRemove,
    EtcdSnapshot,
    FetchFile,
    ParkStaticPod,
    RemoveFile,
    ReplaceFiles,
    RestartStaticPod,
    RunProgram,
    Step,
    SystemdUnit,
    TlsFiles,
    UpdateAgent,
    WaitHealth,
    WriteFile,
)
from .endpoints import health_url_refusal, tls_refusal
from .kubeconfigs import is_kubeconfig_path
from .origins import origin_refusal
from .programs import program_args_refusal
from .table import AGENT_TARGET, DAEMON_RELOAD, LIMITED_BY_TARGETS, allowed, command_kind, file_class, kinds_allowed

__all__ = ["command_refusal", "step_refusal"]


def _denied(kind: str, action: str, target: str, what: str) -> str:
    who = kinds_allowed(action, target)
    return (f"{kind or '(no kind)'} commands may not {what} "
            f"({'only ' + ', '.join(who) + ' commands may' if who else 'no command may'}; bke.core.host_actions.HOST_ACTIONS)")


def _normal(path: str) -> str | None:
    # in its normal form only: the classes match the path as written, the backends write where
    # it leads (`/etc/kubernetes//manifests/x.conf` would be a manifest read as a kubeconfig's path)
    if not path.startswith("/") or "\x00" in path or posixpath.normpath(path) != path or path.startswith("//"):
        return f"{path!r}: not an absolute path in its normal form (no '..', '.', '//' or trailing '/')"
    return None


def _write(kind: str, path: str, mode: int, download: bool = False) -> str | None:
    if why := _normal(path):
        return why
    if download and is_kubeconfig_path(path):
        return f"{path}: a kubeconfig is never downloaded"
    cls = file_class(path, bool(mode & 0o111))
    return None if allowed(kind, cls, path) else _denied(kind, cls, path, f"write {path} (a {cls} file)")


def _service(kind: str, unit: str) -> str | None:
    return None if allowed(kind, "service", unit) else _denied(kind, "service", unit, f"drive unit {unit}")


def _probe(url: str | None, tls: TlsFiles | None, node_ip: str | None) -> str | None:
    return (health_url_refusal(url, node_ip) if url is not None else None) or tls_refusal(tls)


def _files(kind: str, step: ReplaceFiles, node_ip: str | None) -> str | None:
    for f in step.files:
        if why := _write(kind, f.path, f.mode, download=f.url is not None):
            return why
    for unit in step.restart_units:
        if why := _service(kind, unit):
            return why
    for probe in step.probes:
        if why := _probe(probe.url, probe.tls, node_ip):
            return why
    return None


def _remove(kind: str, path: str) -> str | None:
    if why := _normal(path):
        return why
    action = f"remove:{file_class(path)}"
    return None if allowed(kind, action, path) else _denied(kind, action, path, f"remove {path} (a {action[7:]} file)")


def _program(kind: str, step: RunProgram) -> str | None:
    name = step.argv[0].rpartition("/")[2]
    if not allowed(kind, "program", name):
        return _denied(kind, "program", name, f"run {name}")
    return program_args_refusal(step.argv, step.env)


def _what_it_does(kind: str, step: Step, node_ip: str | None) -> str | None:
    """The limits of what `step` writes, runs, drives, removes and probes."""
    if isinstance(step, WriteFile):
        return _write(kind, step.path, step.mode)
    if isinstance(step, FetchFile):
        return _write(kind, step.path, step.mode, download=True)
    if isinstance(step, ReplaceFiles):
        return _files(kind, step, node_ip)
    if isinstance(step, RunProgram):
        return _program(kind, step)
    if isinstance(step, SystemdUnit):
        return _service(kind, DAEMON_RELOAD if step.action == "daemon-reload" else step.unit)
    if isinstance(step, UpdateAgent):
        return None if allowed(kind, "agent", AGENT_TARGET) else _denied(kind, "agent", AGENT_TARGET, "replace the agent")
    if isinstance(step, RemoveFile):
        return _remove(kind, step.path)
    if isinstance(step, WaitHealth):
        return _probe(step.url, step.tls, node_ip)
    if isinstance(step, RestartStaticPod):
        return _probe(step.health_url, None, node_ip)
    if isinstance(step, ParkStaticPod):
        return _probe(step.port_url, None, node_ip)
    if isinstance(step, (EtcdSnapshot, EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove)):
        return tls_refusal(step.tls)
    return None


def step_refusal(kind: str, step: Step, node_ip: str | None = None) -> str | None:
    """Why a command of `kind` may not carry `step` (None if it may): its type first (a type
    that writes, runs or drives is limited by its targets, any other by a "step" row), then
    what it does."""
    if step.type not in LIMITED_BY_TARGETS and not allowed(kind, "step", step.type):
        return _denied(kind, "step", step.type, f"carry a {step.type} step")
    return _what_it_does(kind, step, node_ip)


def command_refusal(cmd: AgentCommand, node_ip: str | None = None) -> str | None:
    """Why the agent refuses `cmd` as a whole (None if its id names the operation that sends its
    kind, and every step is within its kind's rows). `node_ip`: the node's own address, which a
    probe may ask besides loopback."""
    if why := origin_refusal(cmd.command_id, cmd.phase, cmd.cluster, cmd.node):
        return why
    kind = command_kind(cmd.phase)
    for step in cmd.steps:
        if why := step_refusal(kind, step, node_ip):
            return f"step {step.id}: {why}"
    return None
