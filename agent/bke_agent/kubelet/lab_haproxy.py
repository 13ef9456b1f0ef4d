"""The real haproxy in a real-control-plane lab, from the rendered haproxy pod and config.

Why a copy of the config: haproxy reads its listeners from its file, not its command line, so the
loopback rule every lab pod follows (bke.nodemap: a loopback listener moves onto the node's own
address) is applied to a copy in the pod's run directory: `bind 127.0.0.1:8404` (the monitor
endpoint the pod's probe asks) becomes `bind <node ip>:8404`. The frontend that serves the
control-plane endpoint binds every address (`bind *:<port>`) and is left as rendered: haproxy
sets SO_REUSEPORT on Linux, so the masters' haproxies share that port on one kernel, as the
kernel balances new connections among them; on real hosts keepalived gives the VIP to one of
them (keepalived itself stays simulated in the lab: VRRP needs an interface per host).

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

__all__ = ["haproxy_plan", "localize_haproxy_config"]

_LOOPBACK_BIND = re.compile(r"(?m)^(\s*bind\s+)(?:127\.0\.0\.1|localhost)(?=:)")
_MAXCONN = re.compile(r"(?m)^(\s*maxconn\s+)(\d+)")
FD_HEADROOM = 100  # descriptors haproxy keeps for its listeners, logs and checks


def _fd_limit() -> int:
    return resource.getrlimit(resource.RLIMIT_NOFILE)[1]


def localize_haproxy_config(text: str, ip: str, fd_limit: int | None = None) -> str:
    text = _LOOPBACK_BIND.sub(lambda m: m[1] + ip, text)
    cap = max(1, ((fd_limit or _fd_limit()) - FD_HEADROOM) // 2)
    return _MAXCONN.sub(lambda m: m[1] + str(min(int(m[2]), cap)), text)


def haproxy_plan(plan: PodPlan, run_dir: Path, ip: str) -> tuple[Path, PodPlan] | str:
    """(haproxy binary, the pod's plan with its command line) or why it cannot run."""
    binary = shutil.which("haproxy")
    if binary is None:
        return "no haproxy on this machine (Debian: apt-get install haproxy): a real-control-plane lab runs it"
    conf = next((v.local_path for v in plan.local.volumes if v.host_path.endswith("haproxy.cfg")), None)
    if conf is None or not conf.is_file():
        return "the haproxy pod mounts no haproxy.cfg that exists on the node"
    run_dir.mkdir(parents=True, exist_ok=True)
    local = run_dir / "haproxy.cfg"
    local.write_text(localize_haproxy_config(conf.read_text(), ip))
    # -W: master-worker, -db: stay in the foreground (what the image's entrypoint adds)
    argv = ("-W", "-db", "-f", str(local))
    return Path(binary), replace(plan, local=replace(plan.local, argv=argv))
