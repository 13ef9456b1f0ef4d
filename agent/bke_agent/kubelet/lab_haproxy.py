"""The real haproxy in a real-control-plane lab, from the rendered haproxy pod and config.

Why a copy of the config: haproxy reads its listeners from its file, not its command line, so the
rules every lab pod follows are applied to a copy in the pod's run directory:

- a loopback listener moves onto the node's own address (as bke.core.nodemap does for flags):
  `bind 127.0.0.1:8404`, the monitor endpoint the pod's probe asks, becomes `bind <node ip>:8404`;
- a listener on every address (`bind *:36443`, the control-plane endpoint's frontend) binds the
  VIP instead, the address keepalived.conf's `virtual_ipaddress` names. On a real host `*` covers
  the VIP once keepalived puts it on the interface; on one shared kernel `*` would also take the
  endpoint port of every other lab. keepalived itself stays simulated (VRRP needs an interface
  per host): haproxy sets SO_REUSEPORT on Linux, so the masters' haproxies share the VIP's port
  and the kernel spreads new connections among them, where on real hosts one master holds it.
  A lab whose masters have network namespaces (bke.lab.netns) keeps `*` as rendered: there
  keepalived runs for real (lab_keepalived) and one master holds the VIP.

The copy also lowers a `maxconn` that the process's file descriptor limit cannot hold: haproxy
needs about two descriptors per connection and refuses to start when it cannot raise its limit
that far (this sandbox has no CAP_SYS_RESOURCE and a hard limit of 20,000, while the rendered
65,536 connections need 131,104). A real host's systemd or container runtime raises the limit.
"""
from __future__ import annotations

import re
import resource
import shutil
from dataclasses import replace
from pathlib import Path

from .pods import PodPlan

__all__ = ["haproxy_plan", "keepalived_vip", "localize_haproxy_config"]

_LOOPBACK_BIND = re.compile(r"(?m)^(\s*bind\s+)(?:127\.0\.0\.1|localhost)(?=:)")
_MAXCONN = re.compile(r"(?m)^(\s*maxconn\s+)(\d+)")
FD_HEADROOM = 100  # descriptors haproxy keeps for its listeners, logs and checks


def _fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


_ANY_BIND = re.compile(r"(?m)^(\s*bind\s+)(?:\*|0\.0\.0\.0|::|\[::\])(?=:)")
_VIP = re.compile(r"virtual_ipaddress\s*\{\s*([0-9a-fA-F:.]+)")


def keepalived_vip(conf: str) -> str:
    """The first address of keepalived.conf's `virtual_ipaddress` block ("" if none)."""
    m = _VIP.search(conf)
    return m[1] if m else ""


def localize_haproxy_config(text: str, ip: str, vip: str = "", fd_limit: int | None = None, netns: bool = False) -> str:
    """`netns`: the node has a network namespace of its own, where `*` is the node's addresses
    (the VIP among them while keepalived holds it), as on a real host: left as rendered."""
    text = _LOOPBACK_BIND.sub(lambda m: m[1] + ip, text)
    if not netns:
        text = _ANY_BIND.sub(lambda m: m[1] + (vip or ip), text)
    cap = max(1, ((fd_limit or _fd_limit()) - FD_HEADROOM) // 2)
    return _MAXCONN.sub(lambda m: m[1] + str(min(int(m[2]), cap)), text)


def haproxy_plan(plan: PodPlan, root: Path, run_dir: Path, ip: str, netns: str = "") -> tuple[Path, PodPlan] | str:
    """(haproxy binary, the pod's plan with its command line) or why it cannot run."""
    binary = shutil.which("haproxy")
    if binary is None:
        return "no haproxy on this machine (Debian: apt-get install haproxy): a real-control-plane lab runs it"
    conf = next((v.local_path for v in plan.local.volumes if v.host_path.endswith("haproxy.cfg")), None)
    if conf is None or not conf.is_file():
        return "the haproxy pod mounts no haproxy.cfg that exists on the node"
    try:
        vip = keepalived_vip((root / "etc/keepalived/keepalived.conf").read_text())
    except OSError:
        vip = ""  # no keepalived on this node: the endpoint is the node itself
    run_dir.mkdir(parents=True, exist_ok=True)
    local = run_dir / "haproxy.cfg"
    local.write_text(localize_haproxy_config(conf.read_text(), ip, vip, netns=bool(netns)))
    # -W: master-worker, -db: stay in the foreground (what the image's entrypoint adds)
    argv = ("-W", "-db", "-f", str(local))
    return Path(binary), replace(plan, local=replace(plan.local, argv=argv))
