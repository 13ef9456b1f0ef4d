"""Which wheels of an agent release a node installs: pip's rules, for the node's Python and
platform as its agent reports them (AgentRuntime), not this process's.

A wheel installs where one of its tags (PEP 425: python-abi-platform, from its file name) is
among the node's compatible tags; pip takes, per distribution, the highest version and, among
wheels of that version, the one whose best tag comes first in the node's list. The node's list
is what pypa/packaging `tags.sys_tags()` gives on that node (packaging 26.4, pinned in
requirements.txt), built here from the reported facts with packaging's own generators:

- interpreter tags: `tags.cpython_tags(python_version, abis=[cpXY])` (cpXY, then abi3 of this
  and older versions, then none), then `tags.compatible_tags` (py3X-none-<platform>, cpXY-none-any,
  py3-none-any);
- platforms, most specific first, as `tags._linux_platforms` orders them: `linux_<arch>`; for
  glibc X.Y `manylinux_X_m_<arch>` for m from Y down to 17 (down to 5 on x86_64 and i686), each
  legacy alias beside its version (manylinux2014 = 2.17, manylinux2010 = 2.12, manylinux1 = 2.5;
  `_manylinux.platform_tags`, PEP 600); for musl 1.Y `musllinux_1_m_<arch>` for m from Y down to
  0 (`_musllinux.platform_tags`, PEP 656). packaging computes these from the running
  interpreter only, hence the same rules written out for a reported one.

Errors: WheelSetError (a ValueError) names the distributions without any wheel for the node;
the upgrade fails that node's step with it (nothing is sent: the agent would install an
incomplete set, which pip's --no-index install refuses anyway, but only after the downloads).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from packaging.tags import Tag, compatible_tags, cpython_tags, generic_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from bke.contracts.agent import AgentRuntime
from bke.contracts.agent_steps import AgentWheel

__all__ = ["WheelSetError", "node_platforms", "node_tags", "select_wheels"]

_LEGACY_MANYLINUX = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}


class WheelSetError(ValueError):
    """The release has no wheel a node can install for some distribution (the message names them)."""


def _major_minor(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def node_platforms(rt: AgentRuntime) -> list[str]:
    """The node's platform tags, most specific first (packaging `tags._linux_platforms`)."""
    arch = rt.machine
    out = [f"linux_{arch}"]
    if rt.libc == "glibc" and rt.libc_version:
        major, top = _major_minor(rt.libc_version)
        oldest = 5 if arch in ("x86_64", "i686") else 17  # manylinux's oldest glibc per arch
        for minor in range(top, oldest - 1, -1):
            out.append(f"manylinux_{major}_{minor}_{arch}")
            if legacy := _LEGACY_MANYLINUX.get((major, minor)):
                out.append(f"{legacy}_{arch}")
    elif rt.libc == "musl" and rt.libc_version:
        major, top = _major_minor(rt.libc_version)
        out += [f"musllinux_{major}_{minor}_{arch}" for minor in range(top, -1, -1)]
    return out


def node_tags(rt: AgentRuntime) -> list[Tag]:
    """Every tag the node's pip accepts, most preferred first."""
    version = _major_minor(rt.python)
    platforms = node_platforms(rt)
    nodot = f"{version[0]}{version[1]}"
    first: Iterator[Tag]
    if rt.implementation == "cpython":
        interpreter = f"cp{nodot}"
        first = cpython_tags(version, abis=[interpreter], platforms=platforms)
    else:  # packaging's rule for another interpreter: its own short name, no ABI of CPython's
        short = {"pypy": "pp"}.get(rt.implementation, rt.implementation)
        interpreter = f"{short}{nodot}"
        first = generic_tags(interpreter, abis=["none"], platforms=platforms)
    seen: dict[Tag, None] = {}
    for tag in (*first, *compatible_tags(version, interpreter, platforms)):
        seen.setdefault(tag, None)
    return list(seen)


def wheel_file(url: str) -> str:
    return PurePosixPath(unquote(urlsplit(url).path)).name


def select_wheels(wheels: Sequence[AgentWheel], rt: AgentRuntime) -> tuple[AgentWheel, ...]:
    """Per distribution of the release, the one wheel pip would install on the node (in the
    release's order). Raises WheelSetError naming every distribution the node has no wheel of,
    or a file name that is not a wheel's."""
    rank = {tag: i for i, tag in enumerate(node_tags(rt))}
    best: dict[str, tuple[tuple[Version, int], AgentWheel]] = {}
    names: list[str] = []
    for w in wheels:
        try:
            name, version, _build, tags = parse_wheel_filename(wheel_file(w.url))
        except InvalidWheelFilename as exc:
            raise WheelSetError(f"{wheel_file(w.url)}: not a wheel's file name ({exc})") from None
        if name not in names:
            names.append(name)
        ranks = [rank[t] for t in tags if t in rank]
        if not ranks:
            continue
        key = (version, -min(ranks))  # the higher version, then the more specific tag
        if name not in best or key > best[name][0]:
            best[name] = (key, w)
    missing = [n for n in names if n not in best]
    if missing:
        libc = f" {rt.libc} {rt.libc_version}" if rt.libc else ""
        raise WheelSetError(f"no wheel of {', '.join(missing)} installs on {rt.implementation} {rt.python} "
                            f"{rt.machine}{libc}")
    chosen = {id(w) for _, w in best.values()}
    return tuple(w for w in wheels if id(w) in chosen)
