"""Our own checks of rendered pods, for what schema validation cannot see:

- `--etcd-servers-overrides` syntax (upstream: `group/resource#url;url,...`, core group as a
  leading `/`; the usual mistakes `/registry/events#...` and comma-separated servers are caught);
- ports unique per node, across every static pod and the node's own daemons;
- every probe port declared by the probed container;
- a hostPath mount for every file or folder a flag references (a flag path the container cannot
  see fails at start-up on a real node, and only there).

Each function returns a list of messages (empty = fine); the caller turns them into Findings.
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["check_overrides", "flag_values", "hostpath_problems", "port_conflicts", "probe_problems", "pod_ports"]

_RESOURCE = re.compile(r"^(?:[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?/[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def flag_values(command: Iterable[str]) -> dict[str, str]:
    out = {}
    for arg in command:
        if arg.startswith("--"):
            name, _, value = arg[2:].partition("=")
            out[name] = value
    return out


def check_overrides(value: str) -> list[str]:
    problems = []
    seen: set[str] = set()
    for entry in value.split(","):
        resource, sep, servers = entry.partition("#")
        if not sep or not servers:
            problems.append(f"entry {entry!r} is not 'group/resource#url;url' (servers are separated by ';', entries by ',')")
            continue
        if resource.startswith("/registry/") or not _RESOURCE.match(resource):
            problems.append(f"{resource!r} is not 'group/resource' (core resources are '/pods', grouped ones 'coordination.k8s.io/leases')")
        if resource in seen:
            problems.append(f"{resource!r} is overridden twice")
        seen.add(resource)
        for url in servers.split(";"):
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname or parts.port is None or parts.path not in ("", "/"):
                problems.append(f"{resource}: server {url!r} is not scheme://host:port")
    return problems


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod.get("spec", {}).get("containers") or [])


def pod_ports(pod: dict[str, Any]) -> list[tuple[int, str]]:
    return [(int(p["containerPort"]), p.get("protocol", "TCP")) for c in _containers(pod) for p in c.get("ports") or []]


def port_conflicts(owners: dict[str, list[tuple[int, str]]]) -> list[str]:
    """owners: who -> [(port, protocol)]; every (port, protocol) must have one owner on a node."""
    seen: dict[tuple[int, str], str] = {}
    problems = []
    for who in sorted(owners):
        for key in owners[who]:
            if key in seen and seen[key] != who:
                problems.append(f"port {key[0]}/{key[1]} is used by both {seen[key]} and {who}")
            seen.setdefault(key, who)
    return problems


def probe_problems(pod: dict[str, Any]) -> list[str]:
    problems = []
    for c in _containers(pod):
        declared = {p["containerPort"] for p in c.get("ports") or []} | {p.get("name") for p in c.get("ports") or []}
        for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
            probe = c.get(kind)
            if not probe:
                continue
            action = probe.get("httpGet") or probe.get("tcpSocket")
            if action is None:
                continue
            if action.get("port") not in declared:
                problems.append(f"container {c['name']}: {kind} port {action.get('port')!r} is not a declared containerPort")
    return problems


def _paths_in(value: str) -> list[str]:
    """Absolute file paths in a flag value (comma lists included; URLs and overrides skipped)."""
    return [p for p in value.split(",") if p.startswith("/") and "#" not in p and "://" not in p]


def _covers(mount: str, path: str) -> bool:
    return path == mount or path.startswith(mount.rstrip("/") + "/")


def hostpath_problems(pod: dict[str, Any]) -> list[str]:
    problems = []
    volumes = {v["name"]: v for v in pod.get("spec", {}).get("volumes") or []}
    for c in _containers(pod):
        mounts = [m["mountPath"] for m in c.get("volumeMounts") or [] if "hostPath" in volumes.get(m["name"], {})]
        for name, value in sorted(flag_values(c.get("command") or []).items()):
            for path in _paths_in(value):
                if not any(_covers(m, path) for m in mounts):
                    problems.append(f"container {c['name']}: --{name} references {path}, which no hostPath mount covers")
        for m in c.get("volumeMounts") or []:
            if m["name"] not in volumes:
                problems.append(f"container {c['name']}: volumeMount {m['name']!r} has no volume")
    return problems
