"""Make a planned lab network so (`bke.lab.netns.LabNetwork`) with iproute2, and take it down.

Every operation is an `ensure_*`: a run killed half way (a namespace left, a veth without its
peer, a bridge without its address) is completed by the next one, and taking the network down
ignores what is already gone. Only root with CAP_NET_ADMIN can do it; `netns_unavailable` says
why not before anything is made.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from bke.adapters.runtime.processes import port_is_free
from bke.core.plan import Plan

from .netns import LabNetwork, NetnsHost, in_lab_range, plan_lab_network

__all__ = ["NETNS_DIR", "NETWORK_FILE", "NetworkSetupError", "ensure_lab_network", "ensure_workdir_network", "netns_unavailable",
           "port_free_or_namespaced", "recorded_network", "remove_lab_network", "remove_workdir_network"]

NETNS_DIR = Path("/run/netns")
IP_TIMEOUT_S = 20.0


class NetworkSetupError(RuntimeError):
    """iproute2 refused a step; retrying does not help (the message has its stderr)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise NetworkSetupError(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def _link_exists(name: str, netns: str = "") -> bool:
    return _ip(*(("-n", netns) if netns else ()), "link", "show", "dev", name, check=False).returncode == 0


def netns_unavailable() -> str:
    """"" when this host lets the lab make namespaces, veths and a bridge, else why not."""
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2) on this machine"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    probe = f"bke-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` is not permitted here: {made.stderr.strip()}"
    try:
        veth = _ip("-n", probe, "link", "add", "bkeprobe0", "type", "veth", "peer", "name", "bkeprobe1", check=False)
        if veth.returncode != 0:
            return f"veth pairs are not permitted here: {veth.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return ""


def _ensure_bridge(net: LabNetwork) -> None:
    if not _link_exists(net.bridge):
        _ip("link", "add", "name", net.bridge, "type", "bridge")
    _ip("link", "set", net.bridge, "up")
    _ip("addr", "replace", f"{net.gateway}/{net.prefix}", "dev", net.bridge)
    for address in net.root_addresses:
        _ip("addr", "replace", f"{address}/32", "dev", net.bridge)


def _ensure_host(net: LabNetwork, host: NetnsHost) -> None:
    if not (NETNS_DIR / host.netns).exists():
        _ip("netns", "add", host.netns)
    ns = ("-n", host.netns)
    _ip(*ns, "link", "set", "lo", "up")  # the rendered loopback listeners (haproxy's check) live here
    if not _link_exists(host.ifname, host.netns):
        for stale in (host.root_veth, host.peer_veth):  # half made by a killed run
            if _link_exists(stale):
                _ip("link", "del", stale)
        _ip("link", "add", host.root_veth, "type", "veth", "peer", "name", host.peer_veth)
        _ip("link", "set", host.peer_veth, "netns", host.netns)
        _ip(*ns, "link", "set", host.peer_veth, "name", host.ifname)
    _ip("link", "set", host.root_veth, "master", net.bridge, "up")
    _ip(*ns, "addr", "replace", f"{host.ip}/{net.prefix}", "dev", host.ifname)
    _ip(*ns, "link", "set", host.ifname, "up")
    _ip(*ns, "route", "replace", "default", "via", net.gateway)  # workers' /32s on the bridge


def ensure_lab_network(net: LabNetwork) -> None:
    _ensure_bridge(net)
    for host in net.hosts:
        _ensure_host(net, host)


def remove_lab_network(net: LabNetwork) -> None:
    """Namespaces (their veth ends go with them), leftover veths, then the bridge."""
    for host in net.hosts:
        if (NETNS_DIR / host.netns).exists():
            _ip("netns", "del", host.netns, check=False)
        if _link_exists(host.root_veth):
            _ip("link", "del", host.root_veth, check=False)
    if _link_exists(net.bridge):
        _ip("link", "del", net.bridge, check=False)


NETWORK_FILE = "network.json"  # in the lab's work directory: what `bke lab down` takes down


def ensure_workdir_network(workdir: Path, plan: Plan) -> LabNetwork | None:
    """The lab network of this plan made (None: a loopback lab, nothing to make), and recorded in
    the work directory so that `bke lab down` removes exactly it."""
    net = plan_lab_network(plan, workdir)
    if net is None:
        return None
    why = netns_unavailable()
    if why:
        raise NetworkSetupError(f"nodes: addresses in 198.18.0.0/15 put the control plane in network namespaces, "
                                f"which this host does not allow ({why}); use 127.x addresses")
    record = workdir / NETWORK_FILE
    record.write_text(json.dumps(net.to_json(), indent=1))
    ensure_lab_network(net)
    return net


def recorded_network(workdir: Path) -> LabNetwork | None:
    try:
        return LabNetwork.from_json(json.loads((workdir / NETWORK_FILE).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_workdir_network(workdir: Path) -> bool:
    """Take down the network the work directory records; False when it records none."""
    net = recorded_network(workdir)
    if net is None:
        return False
    remove_lab_network(net)
    (workdir / NETWORK_FILE).unlink(missing_ok=True)
    return True


def port_free_or_namespaced(host: str, port: int) -> bool:
    """bke.lab.preflight's port check: an address of 198.18.0.0/15 is a namespace's, which the lab
    makes (another lab's claim on it is refused by the registry), not this namespace's."""
    return in_lab_range(host) or port_is_free(host, port)
