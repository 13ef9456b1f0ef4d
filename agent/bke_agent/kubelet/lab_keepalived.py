"""The real keepalived in a real-control-plane lab whose masters are in network namespaces
(bke.lab.netns), from the rendered keepalived pod and keepalived.conf.

Why it needs a namespace: VRRP moves the VIP between interfaces; on one kernel with every node a
127.x address there is one loopback interface, so keepalived stays simulated there. In a
namespace the node has an interface of its own on the lab's bridge, and Debian's keepalived runs
the rendered file: VRRP adverts to the other masters (unicast peers as rendered), the VIP added
to this node's interface with a gratuitous ARP, the check script run every `interval`.

The pod's image entrypoint (osixia/keepalived) is not run; a copy of the config in the pod's run
directory changes only what a shared machine needs:

- the check script's path moves into the node's tree (`script "/etc/keepalived/check_apiserver.sh"`
  names the node's file; the script itself asks haproxy on 127.0.0.1, which inside the namespace
  is the node's own loopback, as on a real host);
- `interface` names the namespace's interface (NETNS_IFNAME) when the spec names another.

Its pid files go to the run directory too: the default /run/keepalived.pid is one per kernel.
"""
from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from pathlib import Path, PurePosixPath

from .pods import PodPlan

__all__ = ["NETNS_IFNAME", "keepalived_plan", "localize_keepalived_config"]

NETNS_IFNAME = "eth0"  # the interface in every lab namespace (bke.lab.netns.IFNAME)
_SCRIPT = re.compile(r'(?m)^(\s*script\s+)"(/[^"\s]+)')
_INTERFACE = re.compile(r"(?m)^(\s*interface\s+)(\S+)")


def localize_keepalived_config(text: str, root: Path, ifname: str = NETNS_IFNAME) -> str:
    text = _SCRIPT.sub(lambda m: f'{m[1]}"{root / PurePosixPath(m[2]).relative_to("/")}', text)
    return _INTERFACE.sub(lambda m: m[1] + ifname, text)


def keepalived_plan(plan: PodPlan, root: Path, run_dir: Path) -> tuple[Path, PodPlan] | str:
    """(keepalived binary, the pod's plan with its command line) or why it cannot run."""
    binary = shutil.which("keepalived", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))
    if binary is None:
        return "no keepalived on this machine (Debian: apt-get install keepalived): a lab in network namespaces runs it"
    conf = next((v.local_path for v in plan.local.volumes if v.host_path.endswith("keepalived.conf")), None)
    if conf is None or not conf.is_file():
        return "the keepalived pod mounts no keepalived.conf that exists on the node"
    run_dir.mkdir(parents=True, exist_ok=True)
    local = run_dir / "keepalived.conf"
    local.touch(mode=0o600)  # it holds the VRRP password, as the rendered file does
    local.chmod(0o600)
    local.write_text(localize_keepalived_config(conf.read_text(), root))
    # the VRRP subsystem only, in the foreground, logging to the pod's log
    argv = ("--dont-fork", "--log-console", "--log-detail", "--vrrp", f"--use-file={local}",
            f"--pid={run_dir / 'keepalived.pid'}", f"--vrrp_pid={run_dir / 'vrrp.pid'}",
            f"--checkers_pid={run_dir / 'checkers.pid'}")
    return Path(binary), replace(plan, local=replace(plan.local, argv=argv))
