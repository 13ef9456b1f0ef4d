"""What each kind of command may do to a node, as a table: the files it may write by class
(units, binaries, static pod manifests, scripts, kernel settings, configuration), the programs
it may run, the units it may drive, and whether it may replace the agent itself.

Why by kind: a path allow-list (the agent's HOST_WRITE_TABLE) says where BKE ever writes, not
which work writes there. Every one of a unit, a binary, a static pod manifest or the keepalived
script runs as root, so a certificate rotation or a health round that could write one would be
a root shell for whoever makes it sign. The same holds for what a step does without writing: a
reset wipes the node, a restore replaces etcd's data, a removal takes a manifest or a key away.
So every step type is limited too: the ones that write, run or drive something by their targets
(the file, program, unit and agent rows), every other one by a "step" row naming its type, and
a removed file by its class and path ("remove:<class>" rows). A command's kind is its phase as the senders name it
(`command_kind`): the install phases (`node-env`, `certs`, ... also a join's), `rotate@<id>`,
`reset@<id>`, `remove@<id>` (the `@<id>` dropped), the upgrader's `upgrade:<step>` and
`etcd-restore:<stage>`. A kind without a row may write, run and drive nothing.

A written file's class is the first row of FILE_CLASSES its path matches; a file written with an
execute bit that no row names is a script. What a kind may write or run is the union of its rows
in HOST_ACTIONS. tests/unit/core/test_host_actions_senders.py builds every sender's commands (the
dispatcher's phase table, rotations, resets and removals, the upgrader's steps and restores)
and fails if one of them would be refused, or if a row is used by no sender.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from bke.core.node_kernel import MODULES_FILE, OLD_KERNEL_MODULES_FILE, SYSCTL_FILE

__all__ = [
    "AGENT_TARGET",
    "INSTALL_KINDS",
    "LIMITED_BY_TARGETS",
    "DAEMON_RELOAD",
    "FILE_CLASSES",
    "HOST_ACTIONS",
    "HostAction",
    "allowed",
    "command_kind",
    "file_class",
    "kinds_allowed",
    "target_matches",
]

# A written file's class: the first row whose pattern its path matches. In every pattern of this
# module a `*` stays within one path component, except a final `/*`: anything below that
# directory. "config" (certificates, kubeconfigs, runtime configuration) is the rest.
FILE_CLASSES: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("unit", ("/etc/systemd/*",), "systemd runs what a unit names, as root"),
    ("binary", ("/usr/local/bin/*", "/usr/local/sbin/*", "/usr/bin/*", "/usr/sbin/*", "/bin/*", "/sbin/*",
                "/opt/cni/bin/*"), "programs: the kubelet, containerd and the CNI plugins run them as root"),
    ("manifest", ("/etc/kubernetes/manifests/*",), "the kubelet runs a static pod as written (privileged, host paths)"),
    ("script", ("/etc/keepalived/*", "/etc/haproxy/*"),
     "the load balancer's check script, and the configurations that name what keepalived and haproxy run"),
    ("kernel", ("/etc/sysctl.d/*", "/etc/modules-load.d/*", "/etc/modprobe.d/*"),
     "kernel settings applied at boot (kernel.core_pattern or kernel.modprobe run a program as root)"),
)
CONFIG = "config"
SCRIPT = "script"
DAEMON_RELOAD = "daemon-reload"  # the target of `systemctl daemon-reload` (no unit)
AGENT_TARGET = "bke-agent"  # the target of an UpdateAgent step: the agent's own release
# The step types limited by what they write, remove, run or drive (the rows of those actions);
# every other type by a "step" row naming it (a type with no such row: no command carries it).
LIMITED_BY_TARGETS = frozenset({"write_file", "fetch", "replace_files", "remove_file", "run", "systemd", "update_agent"})
# The install's phases that send commands (bke_dispatcher.phases.PHASES; a join sends the same):
# tests/unit/core/test_host_actions_senders.py holds the two equal.
INSTALL_KINDS = ("node-env", "certs", "load-balancer", "etcd", "control-plane-init", "control-plane-join", "workers",
                 "health")


@dataclass(frozen=True)
class HostAction:
    """One row: `kinds` may do `action` to `targets` (path patterns for a file class, program
    names for "program", unit names for "service", AGENT_TARGET for "agent")."""

    kinds: tuple[str, ...]
    action: str
    targets: tuple[str, ...]
    why: str


_RUNTIME = ("node-env", "upgrade:masters-runtime", "upgrade:workers")  # install, and the upgrade's runtime steps
_LB = ("load-balancer", "upgrade:load-balancer")
_K8S = "/etc/kubernetes"
_MANIFESTS = f"{_K8S}/manifests"
_LB_FILES = ("/etc/keepalived/keepalived.conf", "/etc/keepalived/check_apiserver.sh", "/etc/haproxy/haproxy.cfg")
_LB_PODS = (f"{_MANIFESTS}/haproxy.yaml", f"{_MANIFESTS}/keepalived.yaml")
_CONTROL_PLANE = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
_UPGRADE_PODS = tuple(f"upgrade:{c}" for c in _CONTROL_PLANE)
# the components' health probes: the install phases that start something, the health rounds, and
# the upgrade's and restore's steps that replace or start a component (bke.core.node_steps.health_steps)
_PROBING = ("load-balancer", "etcd", "control-plane-init", "control-plane-join", "health", "rotate",
            "upgrade:etcd", *_UPGRADE_PODS, "upgrade:load-balancer", "upgrade:masters-runtime", "upgrade:workers",
            "upgrade:post-checks", "upgrade:etcd-health", "upgrade:cleanup", "etcd-restore:start-members",
            "etcd-restore:start-apiservers")

HOST_ACTIONS: tuple[HostAction, ...] = (
    HostAction(_RUNTIME, "unit", ("/etc/systemd/system/kubelet.service", "/etc/systemd/system/containerd.service"),
               "the runtime's units, written at install and replaced by an upgrade's runtime step"),
    HostAction(_RUNTIME, "binary", ("/usr/local/bin/containerd", "/usr/local/bin/containerd-shim-runc-v2",
                                    "/usr/local/sbin/runc", "/usr/bin/kubelet", "/usr/bin/kubectl", "/usr/local/bin/crictl",
                                    "/opt/cni/bin/*"),
               "the node's artefacts from the httpRepo (bke.core.artefacts), each checked against its sha256"),
    HostAction(_RUNTIME, "kernel", (MODULES_FILE, OLD_KERNEL_MODULES_FILE, SYSCTL_FILE),
               "BKE's own modules and sysctl files (bke.core.node_kernel)"),
    HostAction(_RUNTIME, CONFIG, ("/etc/containerd/*", "/var/lib/kubelet/config.yaml", "/etc/crictl.yaml"),
               "containerd's and the kubelet's configuration, crictl's"),
    HostAction(("node-env",), "program", ("modprobe", "sysctl", "swapoff"),
               "load the modules, apply the sysctl file, turn swap off (bke.core.node_steps.kernel_steps, swap_steps)"),
    HostAction(("node-env",), "service", (DAEMON_RELOAD, "containerd.service", "kubelet.service", "swap.target"),
               "start the runtime, mask swap"),
    HostAction(("upgrade:masters-runtime", "upgrade:workers"), "service", ("containerd.service", "kubelet.service"),
               "restart the runtime after its files were replaced"),
    HostAction(("workers", "rotate", "upgrade:cleanup"), "service", ("kubelet.service",),
               "restart the kubelet: on its credentials, renewed certificates, a standalone configuration"),
    HostAction(("certs", "rotate"), CONFIG, (f"{_K8S}/pki/*", f"{_K8S}/*.conf"),
               "the node's certificates, keys and kubeconfigs (sealed to the agent)"),
    HostAction(_LB, "manifest", _LB_PODS, "the load balancer's static pods"),
    HostAction(_LB, SCRIPT, _LB_FILES, "keepalived's configuration and check script, haproxy's configuration"),
    HostAction(("etcd", "upgrade:etcd"), "manifest", (f"{_MANIFESTS}/etcd*.yaml",), "the etcd members' static pods"),
    HostAction(("upgrade:etcd",), CONFIG, (f"{_K8S}/pki/etcd*/*",), "a member's renewed certificates"),
    HostAction(("control-plane-init", "control-plane-join"), "manifest",
               tuple(f"{_MANIFESTS}/{c}.yaml" for c in _CONTROL_PLANE), "the control plane's static pods"),
    HostAction(("upgrade:kube-apiserver",), "manifest", (f"{_MANIFESTS}/kube-apiserver.yaml",), "its static pod"),
    HostAction(("upgrade:kube-apiserver",), CONFIG, (f"{_K8S}/pki/apiserver*", f"{_K8S}/pki/front-proxy-client.*"),
               "its renewed certificates"),
    HostAction(("upgrade:kube-controller-manager",), "manifest", (f"{_MANIFESTS}/kube-controller-manager.yaml",),
               "its static pod"),
    HostAction(("upgrade:kube-controller-manager",), CONFIG, (f"{_K8S}/controller-manager.conf",), "its renewed kubeconfig"),
    HostAction(("upgrade:kube-scheduler",), "manifest", (f"{_MANIFESTS}/kube-scheduler.yaml",), "its static pod"),
    HostAction(("upgrade:kube-scheduler",), CONFIG, (f"{_K8S}/scheduler.conf",), "its renewed kubeconfig"),
    HostAction(("upgrade:masters-runtime",), CONFIG, (f"{_K8S}/admin.conf",), "the renewed admin.conf"),
    HostAction(("upgrade:agents",), "agent", (AGENT_TARGET,), "the agent's new release (wheels checked by sha256)"),
    # removals, by class and path
    HostAction(("upgrade:load-balancer",), "remove:manifest", _LB_PODS,
               "a master that stops being one: its load balancer's pods stop"),
    HostAction(("upgrade:load-balancer",), "remove:script", _LB_FILES,
               "then their configuration goes (keepalived.conf holds the VRRP password)"),
    *(HostAction((f"upgrade:{c}",), "remove:manifest", (f"{_MANIFESTS}/{c}.yaml",),
                 "the component moved off this master: its static pod stops") for c in _CONTROL_PLANE),
    HostAction(("upgrade:cleanup",), "remove:config", (f"{_K8S}/pki/*", f"{_K8S}/*.conf", "/etc/crictl.yaml"),
               "the certificates, keys, kubeconfigs and rendered files a node no longer needs (least privilege)"),
    HostAction(("upgrade:cleanup",), "remove:kernel", (SYSCTL_FILE,),
               "the pod network's sysctls of a kubelet that stopped registering"),
    # what the other step types do, by type (each is a "step" row's target)
    HostAction(("node-env", "upgrade:agents"), "step", ("check_host",),
               "look at the node (preflight, swap off, disk): reads only"),
    HostAction(_PROBING, "step", ("wait_health",),
               "wait until a component answers healthy (its endpoint and TLS files: bke.core.host_actions.endpoints)"),
    HostAction(("rotate",), "step", ("restart_static_pod",), "a static pod takes its renewed certificates"),
    HostAction(("reset", "upgrade:etcd-snapshots"), "step", ("etcd_snapshot",),
               "a member's snapshot, before a reset or an upgrade (sealed to the snapshot key)"),
    HostAction(("upgrade:etcd-member-add",), "step", ("etcd_member_add",), "a new member joins as a learner"),
    HostAction(("upgrade:etcd-member-promote",), "step", ("etcd_member_promote",), "the learner becomes a voter"),
    HostAction(("upgrade:etcd-member-remove",), "step", ("etcd_member_remove",), "a member leaves its cluster"),
    HostAction(("upgrade:cleanup",), "step", ("leave_etcd_member",),
               "a node that stopped being a member: its pod stops, its data goes"),
    HostAction(("etcd-restore:stop-apiservers", "etcd-restore:stop-members", "etcd-restore:start-members",
                "etcd-restore:start-apiservers"), "step", ("park_static_pod",),
               "an etcd restore stops and starts the apiservers and members by their manifests"),
    HostAction(("etcd-restore:restore-members",), "step", ("restore_etcd_member",),
               "an etcd restore's new data directory, from the snapshot sealed to the node"),
    HostAction(("reset", "remove"), "step", ("reset_node",), "a reset or a removal wipes what BKE put on the node"),
    HostAction(("command-key",), "step", ("trust_command_key",),
               "the agent's command keyring: the next key, or the end of the old one"),
)


def command_kind(phase: str) -> str:
    """A command's kind: its phase without the `@<request id>` an operation's phase carries."""
    return phase.partition("@")[0]


def _translate(pattern: str) -> str:
    """A pattern as a regular expression: `*` within a component, a final `/*` anything below."""
    below = pattern.endswith("/*")
    head = pattern[:-2] if below else pattern
    return "".join("[^/]*" if c == "*" else re.escape(c) for c in head) + ("/.+" if below else "")


def _compiled(patterns: tuple[str, ...] | list[str]) -> re.Pattern[str]:
    return re.compile("(?:" + "|".join(_translate(p) for p in patterns) + r")\Z" if patterns else r"(?!)")


_CLASSES = tuple((name, _compiled(patterns)) for name, patterns, _ in FILE_CLASSES)


@lru_cache(maxsize=4096)
def file_class(path: str, executable: bool = False) -> str:
    """The class of a file written at `path` (with an execute bit when `executable`)."""
    for name, pattern in _CLASSES:
        if pattern.match(path):
            return name
    return SCRIPT if executable else CONFIG


@lru_cache(maxsize=1024)
def _targets(kind: str, action: str) -> re.Pattern[str] | None:
    """One compiled pattern for everything `kind` may do as `action` (None: nothing)."""
    found = [t for row in HOST_ACTIONS if row.action == action and kind in row.kinds for t in row.targets]
    return _compiled(found) if found else None


def allowed(kind: str, action: str, target: str) -> bool:
    pattern = _targets(kind, action)
    return pattern is not None and pattern.match(target) is not None


def target_matches(target: str, patterns: tuple[str, ...]) -> bool:
    """Whether `target` is one of `patterns` (this module's pattern rules)."""
    return _compiled(patterns).match(target) is not None


def kinds_allowed(action: str, target: str) -> list[str]:
    """The kinds that may do `action` to `target` (for a refusal's message)."""
    return sorted({k for row in HOST_ACTIONS if row.action == action and target_matches(target, row.targets)
                   for k in row.kinds})
