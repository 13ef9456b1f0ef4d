"""THE one place that turns a rendered static pod into a process runnable on a shared machine.

The renderer writes files exactly as a real node needs them: host paths such as
/etc/kubernetes/pki/etcd/server.crt and kubeadm-style loopback listeners such as
`--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.5:2379` and
`--listen-metrics-urls=http://127.0.0.1:2381`. When many "nodes" share one kernel (tests, the
lab), every node's files live in its own tree (`DIR/<hostname>/...`, as `bke certs issue` and
`bke render` write them) and every node has its own 127.x address. Two mappings and one table make the
command line runnable there, and nothing else is changed:

1. host paths -> the node tree: a path inside a container mount is mapped through the pod's
   hostPath volume to `node_root/<host path>`;
2. loopback listeners -> the node's own address: `127.0.0.1`, `localhost` and `[::1]` in URLs
   become `node_ip`, so members of different nodes do not collide on one port. A URL list that
   then names the same URL twice is de-duplicated (etcd refuses to bind one address twice).

Probe targets get the same treatment, so `health_url` is where the kubelet would look on a real
node, moved onto the node's address.

3. what else must change for several nodes' components to share one kernel is the table
   `SHARED_MACHINE_FLAGS` below, one row per flag with its reason. Nothing in it is right for a
   real host, which is why it lives here and not in the templates.

    >>> local = localize_pod(yaml.safe_load(manifest), Path("out/etcd1"), "127.0.20.11")
    >>> start_etcd(local.argv, log_path)            # local.binary == "etcd"
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

__all__ = ["LocalPod", "LocalVolume", "NotRunnable", "SHARED_MACHINE_FLAGS", "SharedMachineFlag", "localize_pod",
           "shared_machine_argv", "shared_machine_markdown"]

_LOOPBACK = re.compile(r"://(?:127\.0\.0\.1|localhost|\[::1\])(?=[:/]|$)")
_PROBE_LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]", ""}


@dataclass(frozen=True)
class SharedMachineFlag:
    component: str  # the static pod's metadata.name
    flag: str
    value: str  # "{ip}": the node's own address
    when: str  # "absent": added when the manifest does not set it; "loopback": replaces a loopback value
    why: str


# What the lab changes so that many nodes' control planes share one machine, and why.
SHARED_MACHINE_FLAGS: tuple[SharedMachineFlag, ...] = (
    SharedMachineFlag(
        "kube-apiserver", "--bind-address", "{ip}", "absent",
        "the default 0.0.0.0 takes port 6443 on every address, so a second apiserver on the same kernel "
        "cannot start; each listens on its node's own address instead"),
    SharedMachineFlag(
        "kube-apiserver", "--endpoint-reconciler-type", "none", "absent",
        "a lab node's advertise address is a loopback one, which the `kubernetes` Endpoints may not hold "
        "(the apiserver refuses it from 1.37, kubernetes#138102); with `none` the apiserver does not write "
        "that object, and nothing in the lab routes the `kubernetes` Service (no kube-proxy dataplane runs: "
        "the components reach the apiserver through their kubeconfigs, not the Service)"),
    SharedMachineFlag(
        "kube-controller-manager", "--bind-address", "{ip}", "loopback",
        "127.0.0.1:10257 is one socket per kernel: the controller-managers of two masters would collide"),
    SharedMachineFlag(
        "kube-scheduler", "--bind-address", "{ip}", "loopback",
        "127.0.0.1:10259 is one socket per kernel: the schedulers of two masters would collide"),
)
_LOOPBACK_VALUES = {"127.0.0.1", "localhost", "::1", "[::1]"}


def shared_machine_argv(component: str, argv: list[str], node_ip: str) -> list[str]:
    """`argv` with the rows of SHARED_MACHINE_FLAGS for `component` applied."""
    out = list(argv)
    for row in SHARED_MACHINE_FLAGS:
        if row.component != component:
            continue
        value = row.value.replace("{ip}", node_ip)
        at = next((i for i, a in enumerate(out) if a == row.flag or a.startswith(row.flag + "=")), None)
        if row.when == "absent" and at is None:
            out.append(f"{row.flag}={value}")
        elif row.when == "loopback" and at is not None and out[at].partition("=")[2] in _LOOPBACK_VALUES:
            out[at] = f"{row.flag}={value}"
    return out


def shared_machine_markdown() -> str:
    """SHARED_MACHINE_FLAGS as the table docs/real-control-plane.md shows (a test holds the two)."""
    rows = ["| component | flag | lab value | when | why |", "|---|---|---|---|---|"]
    for r in SHARED_MACHINE_FLAGS:
        when = "not set by the spec" if r.when == "absent" else "rendered as a loopback address"
        rows.append(f"| {r.component} | `{r.flag}` | `{r.value.replace('{ip}', '<node ip>')}` | {when} | {r.why} |")
    return "\n".join(rows) + "\n"


class NotRunnable(ValueError):
    """The manifest has no command line to run (e.g. it relies on the image's entrypoint)."""


@dataclass(frozen=True)
class LocalVolume:
    name: str
    host_path: str  # as rendered, on a real node
    local_path: Path  # inside the node tree
    type: str  # hostPath type: DirectoryOrCreate, FileOrCreate, ...


@dataclass(frozen=True)
class LocalPod:
    name: str  # metadata.name of the static pod
    binary: str  # the container command's argv[0], e.g. "etcd"
    argv: tuple[str, ...]  # the arguments after the binary, localized
    health_url: str | None  # startup probe (else liveness) as a URL on node_ip
    ready_url: str | None  # readiness probe as a URL on node_ip
    volumes: tuple[LocalVolume, ...]


@dataclass(frozen=True)
class _Mount:
    mount_path: str
    host_path: str


def _host(node_ip: str) -> str:
    return f"[{node_ip}]" if ipaddress.ip_address(node_ip).version == 6 else node_ip


def _local(node_root: Path, host_path: str) -> Path:
    return node_root / PurePosixPath(host_path).relative_to("/")


def _map_piece(piece: str, mounts: list[_Mount], node_root: Path, node_ip: str) -> str:
    if "://" in piece:
        return _LOOPBACK.sub(f"://{_host(node_ip)}", piece)
    if piece.startswith("/") and "#" not in piece:
        for m in mounts:  # longest mount path first
            root = m.mount_path.rstrip("/")
            if piece == root or piece.startswith(root + "/"):
                return str(_local(node_root, m.host_path.rstrip("/") + piece[len(root):]))
    return piece


def _localize_value(value: str, mounts: list[_Mount], node_root: Path, node_ip: str) -> str:
    """Map every comma-separated piece of one flag value; drop duplicates, keep order."""
    pieces = [_map_piece(p, mounts, node_root, node_ip) for p in value.split(",")]
    return ",".join(dict.fromkeys(pieces))


def _mounts(pod: Mapping[str, Any], container: Mapping[str, Any]) -> list[_Mount]:
    volumes = {v["name"]: v for v in pod["spec"].get("volumes") or []}
    out = []
    for m in container.get("volumeMounts") or []:
        hp = volumes.get(m["name"], {}).get("hostPath")
        if hp:
            out.append(_Mount(m["mountPath"], hp["path"]))
    return sorted(out, key=lambda m: len(m.mount_path), reverse=True)


def _probe_url(container: Mapping[str, Any], kind: str, node_ip: str) -> str | None:
    action = (container.get(kind) or {}).get("httpGet")
    if not action:
        return None
    port = action["port"]
    if isinstance(port, str):  # a named port
        port = next(p["containerPort"] for p in container.get("ports") or [] if p.get("name") == port)
    host = action.get("host", "")
    host = _host(node_ip) if host in _PROBE_LOOPBACK else _host(host.strip("[]"))
    return f"{action.get('scheme', 'HTTP').lower()}://{host}:{port}{action.get('path', '/')}"


def localize_pod(manifest: Mapping[str, Any], node_root: Path, node_ip: str) -> LocalPod:
    """The runnable form of a static pod's (single) container on a shared machine.

    `manifest` is the parsed YAML of a rendered static pod; `node_root` the node's tree
    (`DIR/<hostname>`); `node_ip` the node's own address (its 127.x address in the lab).
    """
    container = manifest["spec"]["containers"][0]
    command = list(container.get("command") or []) + list(container.get("args") or [])
    if not container.get("command"):
        raise NotRunnable(f"pod {manifest['metadata']['name']}: no command (the image's entrypoint runs it)")
    mounts = _mounts(manifest, container)
    argv = []
    for arg in command[1:]:
        if arg.startswith("--") and "=" in arg:
            name, _, value = arg.partition("=")
            argv.append(f"{name}={_localize_value(value, mounts, node_root, node_ip)}")
        else:
            argv.append(_localize_value(arg, mounts, node_root, node_ip))
    argv = shared_machine_argv(manifest["metadata"]["name"], argv, node_ip)
    volumes = tuple(
        LocalVolume(v["name"], v["hostPath"]["path"], _local(node_root, v["hostPath"]["path"]), v["hostPath"].get("type", ""))
        for v in manifest["spec"].get("volumes") or [] if "hostPath" in v
    )
    return LocalPod(
        name=manifest["metadata"]["name"],
        binary=command[0],
        argv=tuple(argv),
        health_url=_probe_url(container, "startupProbe", node_ip) or _probe_url(container, "livenessProbe", node_ip),
        ready_url=_probe_url(container, "readinessProbe", node_ip),
        volumes=volumes,
    )
