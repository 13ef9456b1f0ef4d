"""Whether a command stays inside what its kind may do (table.py), its programs' arguments
(programs.py) and its probes' endpoints (endpoints.py). Checked by the agent on the whole
command before any step runs: a command that fails it is refused as a whole, as an unsigned
one is (nothing of it ran).

What is read from the signed command only: paths, modes, argv, units, URLs, TLS paths. File
contents are not (most are sealed to the agent); a kubeconfig's is checked where the agent
opens it, before it is written (kubeconfigs.py; agent/bke_agent/executor.py).
"""
from __future__ import annotations

import posixpath

from bke.contracts.agent import (
    AgentCommand, EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove, EtcdSnapshot, FetchFile, ReplaceFiles,
    RestartStaticPod, RunProgram, Step, SystemdUnit, TlsFiles, UpdateAgent, WaitHealth, WriteFile,
)
from .endpoints import health_url_refusal, tls_refusal
from .kubeconfigs import is_kubeconfig_path
from .programs import program_args_refusal
from .table import AGENT_TARGET, DAEMON_RELOAD, allowed, command_kind, file_class, kinds_allowed

__all__ = ["command_refusal", "step_refusal"]


def _denied(kind: str, action: str, target: str, what: str) -> str:
    who = kinds_allowed(action, target)
    return (f"{kind or '(no kind)'} commands may not {what} "
            f"({'only ' + ', '.join(who) + ' commands may' if who else 'no command may'}; bke.core.host_actions.HOST_ACTIONS)")


def _write(kind: str, path: str, mode: int, download: bool = False) -> str | None:
    # in its normal form only: the classes match the path as written, the backends write where
    # it leads (`/etc/kubernetes//manifests/x.conf` would be a manifest read as a kubeconfig's path)
    if not path.startswith("/") or "\x00" in path or posixpath.normpath(path) != path or path.startswith("//"):
        return f"{path!r}: not an absolute path in its normal form (no '..', '.', '//' or trailing '/')"
    if download and is_kubeconfig_path(path):
        return f"{path}: a kubeconfig is never downloaded"
    cls = file_class(path, bool(mode & 0o111))
    return None if allowed(kind, cls, path) else _denied(kind, cls, path, f"write {path} (a {cls} file)")


def _service(kind: str, unit: str) -> str | None:
    return None if allowed(kind, "service", unit) else _denied(kind, "service", unit, f"drive unit {unit}")


def _probe(url: str | None, tls: TlsFiles | None, node_ip: str | None) -> str | None:
    return (health_url_refusal(url, node_ip) if url is not None else None) or tls_refusal(tls)


def step_refusal(kind: str, step: Step, node_ip: str | None = None) -> str | None:
    """Why a command of `kind` may not carry `step` (None if it may)."""
    if isinstance(step, WriteFile):
        return _write(kind, step.path, step.mode)
    if isinstance(step, FetchFile):
        return _write(kind, step.path, step.mode, download=True)
    if isinstance(step, ReplaceFiles):
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
    if isinstance(step, RunProgram):
        name = step.argv[0].rpartition("/")[2]
        if not allowed(kind, "program", name):
            return _denied(kind, "program", name, f"run {name}")
        return program_args_refusal(step.argv, step.env)
    if isinstance(step, SystemdUnit):
        return _service(kind, DAEMON_RELOAD if step.action == "daemon-reload" else step.unit)
    if isinstance(step, WaitHealth):
        return _probe(step.url, step.tls, node_ip)
    if isinstance(step, RestartStaticPod):
        return _probe(step.health_url, None, node_ip)
    if isinstance(step, (EtcdSnapshot, EtcdMemberAdd, EtcdMemberPromote, EtcdMemberRemove)):
        return tls_refusal(step.tls)
    if isinstance(step, UpdateAgent):
        return None if allowed(kind, "agent", AGENT_TARGET) else _denied(kind, "agent", AGENT_TARGET, "replace the agent")
    return None


def command_refusal(cmd: AgentCommand, node_ip: str | None = None) -> str | None:
    """Why the agent refuses `cmd` as a whole (None if every step is within its kind's rows).
    `node_ip`: the node's own address, which a probe may ask besides loopback."""
    kind = command_kind(cmd.phase)
    for step in cmd.steps:
        if why := step_refusal(kind, step, node_ip):
            return f"step {step.id}: {why}"
    return None
