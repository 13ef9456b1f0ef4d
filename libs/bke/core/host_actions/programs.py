"""The arguments a program the agent runs may be given, for the programs whose options run
other programs.

Why: `modprobe -C <file>` reads a configuration whose `install` lines run any command as root,
and so does `MODPROBE_OPTIONS` in its environment; `sysctl -w kernel.core_pattern='|prog'` (or
`kernel.modprobe=`) makes the kernel run a program as root. BKE's senders load modules by name
(`modprobe -a <names>`) and apply BKE's own sysctl file (`sysctl -p /etc/sysctl.d/99-bke.conf`),
so that is all these programs are given. (The host agent also drops MODPROBE_OPTIONS from the
environment it passes on: agent/bke_agent/backends/programs.py.)
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from bke.core.node_kernel import SYSCTL_FILE

__all__ = ["MODULE_NAME", "PROGRAM_ARGS", "program_args_refusal"]

MODULE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,63}$")  # a kernel module's name, never an option


def _modprobe(args: Sequence[str], env: Mapping[str, str]) -> str | None:
    names = list(args[1:] if args[:1] == ["-a"] else args)  # -a: every argument is a module to load
    if not names or not all(MODULE_NAME.match(n) for n in names):
        return f"modprobe takes module names only ('-a' and names), not {' '.join(args)!r}"
    if "MODPROBE_OPTIONS" in env:
        return "modprobe runs without MODPROBE_OPTIONS"
    return None


def _sysctl(args: Sequence[str], env: Mapping[str, str]) -> str | None:
    if list(args) != ["-p", SYSCTL_FILE]:
        return f"sysctl only applies BKE's own file ('-p {SYSCTL_FILE}'), not {' '.join(args)!r}"
    return None


PROGRAM_ARGS: dict[str, Callable[[Sequence[str], Mapping[str, str]], str | None]] = {
    "modprobe": _modprobe,
    "sysctl": _sysctl,
}


def program_args_refusal(argv: Sequence[str], env: Mapping[str, str]) -> str | None:
    """Why a program may not run with these arguments (None if it may, or if its arguments are
    not limited here)."""
    check = PROGRAM_ARGS.get(argv[0].rpartition("/")[2]) if argv else None
    return check(argv[1:], env) if check is not None else None
