"""Which programs the host backend runs for a `RunProgram` step, and how they are found.

Why an allow-list, not a deny-list: a signed command is the dispatcher's (verify.py), but a
mistake or a compromised dispatcher must still not get a root shell on every node. A program
runs only if its name is in `HOST_PROGRAMS` (each entry says which work needs it) and it is
found in one of the fixed `PROGRAM_DIRS` (never via the agent's PATH, never a relative path);
an absolute argv[0] must be exactly such a file. Shells and interpreters are never in the table
(`NEVER` names them so that a refusal says why). The step's `env` may not change how a program
is loaded or found (`FORBIDDEN_ENV`: `LD_*`, `PATH`, shell start-up files, MODPROBE_OPTIONS...).
Which command kinds may run which of them, and with which arguments (modprobe: module names
only; sysctl: BKE's own file), is bke.core.host_actions', checked on the command before it runs.

The install's node-env phase runs modprobe, sysctl and swapoff (files, units, downloads and
health checks are their own step types); the rest of the table is what day-2 work on a node needs.
"""
from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from ..errors import PermanentStepError

__all__ = ["DROPPED_ENV", "FORBIDDEN_ENV", "HOST_PROGRAMS", "NEVER", "PROGRAM_DIRS", "resolve_program"]

HOST_PROGRAMS: Mapping[str, str] = {
    "modprobe": "load the kernel modules Kubernetes networking needs (br_netfilter, overlay)",
    "sysctl": "apply the kernel parameters of /etc/sysctl.d (ip_forward, bridge-nf-call-iptables)",
    "swapoff": "turn swap off (node-env; swap.target is masked so that it stays off)",
    "crictl": "ask containerd about images, pod sandboxes and containers (pre-pulls, clean-up; ReplaceFiles: is the new static pod running, does it keep exiting and what did it say last)",
    "etcdctl": "etcd member operations (promote a learner, remove a member) during day-2 work",
    "etcdutl": "`bke etcd restore`: restore a member's data dir from a snapshot (etcd's disaster recovery)",
    "kubectl": "node-local kubectl, placed by the node-env phase (/usr/bin/kubectl)",
}

# Where a named program is looked up, in order: where packages and BKE's downloads put them.
PROGRAM_DIRS: tuple[str, ...] = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")

NEVER = frozenset({
    "sh", "bash", "dash", "zsh", "ksh", "csh", "tcsh", "fish", "busybox", "env", "sudo", "su", "doas", "nohup",
    "setsid", "xargs", "find", "awk", "gawk", "perl", "ruby", "node", "lua", "php", "python", "python3",
})
FORBIDDEN_ENV = re.compile(r"^(LD_.*|PATH|IFS|ENV|BASH_ENV|BASH_FUNC_.*|SHELLOPTS|PS4|PYTHON.*|PERL5.*|NODE_OPTIONS|GCONV_PATH"
                           r"|MODPROBE_OPTIONS)$")
# Left out of the environment the agent passes on to every program it runs (a host's own
# environment could hold it): modprobe would read its options, `-C <file>` among them
DROPPED_ENV = ("MODPROBE_OPTIONS",)


def _never(name: str) -> bool:
    return name in NEVER or re.fullmatch(r"python[0-9.]*|perl[0-9.]*", name) is not None


def resolve_program(argv: Sequence[str], env: Mapping[str, str], programs: Mapping[str, str] = HOST_PROGRAMS,
                    dirs: Sequence[str] = PROGRAM_DIRS) -> list[str]:
    """argv with argv[0] replaced by the program's absolute path, or PermanentStepError saying why not."""
    first = argv[0] if argv else ""
    name = PurePosixPath(first).name
    if "\x00" in first or not name:
        raise PermanentStepError(f"{first!r} is not a program name")
    if _never(name):
        raise PermanentStepError(f"{first}: shells and interpreters are never run by the agent")
    if name not in programs:
        raise PermanentStepError(f"{first}: not a program this agent runs (allowed: {', '.join(sorted(programs))})")
    if "/" in first and not (first.startswith("/") and str(PurePosixPath(first).parent) in dirs):
        raise PermanentStepError(f"{first}: a program is named, or given by its path in {', '.join(dirs)}")
    bad = sorted(k for k in env if FORBIDDEN_ENV.match(k))
    if bad:
        raise PermanentStepError(f"env {', '.join(bad)}: may not be set by a step (it changes what runs)")
    candidates = [first] if first.startswith("/") else [f"{d}/{name}" for d in dirs]
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return [path, *argv[1:]]
    raise PermanentStepError(f"program not found: {first} (looked in {', '.join(dirs)})", exit_code=127)
