"""The agent's wheelhouse: every wheel bke-agent needs, for every supported Python and both
arches, so that a node installs with `pip install --no-index --find-links <wheelhouse>`.

Why `pip download --only-binary=:all: --platform ... --python-version ...`: the build machine
is not the node; pip picks the manylinux wheels a node of that arch and Python would pick.
Platforms: manylinux2014 (glibc 2.17) and manylinux_2_28 (glibc 2.28), which every listed OS
meets. A pinned package that publishes only an sdist (`SDIST_ONLY`) cannot be downloaded for
another platform; if it is pure Python it is built here once into a py3-none-any wheel (checked)
and offered to the downloads through --find-links.

The tree (under the bundle root): agent/<bke version>/ holds the BKE wheel, requirements.txt
(requirements-agent.txt as shipped) and wheels/ with an index.html of links, which is what pip's
--find-links reads over HTTP from `bke bundle serve` (no directory listing needed).
"""
from __future__ import annotations

import html
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from bke.core.pythons import AGENT_PYTHONS

__all__ = ["PLATFORMS", "SDIST_ONLY", "WheelhouseError", "download_commands", "ensure_wheelhouse", "links_page",
           "local_wheel_commands"]

# manylinux tags per node arch (Go's arch names, as bke.core.artefacts uses them)
PLATFORMS: dict[str, tuple[str, ...]] = {
    "amd64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
    "arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
}
# nkeys 0.2.1 is published as an sdist only (a `pip download --only-binary=:all:` finds
# "versions: none"); it is pure Python, so one py3-none-any wheel built here serves every node.
SDIST_ONLY: tuple[str, ...] = ("nkeys",)
_PURE = re.compile(r"-py3(?:\.py2)?-none-any\.whl$|-py2\.py3-none-any\.whl$")

Runner = Callable[[Sequence[str]], "subprocess.CompletedProcess[str]"]


class WheelhouseError(RuntimeError):
    """pip could not fetch or build a wheel; carries the command and the tail of its output."""


def _requirement_lines(requirements: Path) -> list[str]:
    return [ln.split("#", 1)[0].strip() for ln in requirements.read_text().splitlines() if ln.split("#", 1)[0].strip()]


def _name(line: str) -> str:
    return re.split(r"[\[=<>!~;\s]", line, maxsplit=1)[0].lower().replace("_", "-")


def local_wheel_commands(requirements: Path, dest: Path, pip_args: Sequence[str] = (),
                         python: str = sys.executable) -> list[list[str]]:
    """`pip wheel --no-deps` of each pinned sdist-only package, into `dest`."""
    return [[python, "-m", "pip", "wheel", "--no-deps", "--quiet", *pip_args, "--wheel-dir", str(dest), line]
            for line in _requirement_lines(requirements) if _name(line) in SDIST_ONLY]


def download_commands(requirements: Path, dest: Path, local: Path, arches: Iterable[str],
                      pythons: Iterable[tuple[int, int]] = AGENT_PYTHONS, pip_args: Sequence[str] = (),
                      python: str = sys.executable) -> list[list[str]]:
    """One `pip download` per (Python, arch): binary wheels only, for that platform and Python."""
    out = []
    for major, minor in pythons:
        for arch in arches:
            platforms = [a for p in PLATFORMS[arch] for a in ("--platform", p)]
            out.append([python, "-m", "pip", "download", "--quiet", "--only-binary=:all:", *platforms,
                        "--python-version", f"{major}.{minor}", "--implementation", "cp", *pip_args,
                        "--find-links", str(local), "--dest", str(dest), "-r", str(requirements)])
    return out


def _run(cmd: Sequence[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout_s, check=False)


def links_page(wheels: Iterable[str]) -> str:
    """The page pip's --find-links reads: one link per wheel (PEP 503's simple form)."""
    rows = "".join(f'<a href="{html.escape(w)}">{html.escape(w)}</a><br>\n' for w in sorted(wheels))
    return f"<!DOCTYPE html>\n<html><body>\n{rows}</body></html>\n"


def ensure_wheelhouse(requirements: Path, dest: Path, arches: Iterable[str], *,
                      pythons: Iterable[tuple[int, int]] = AGENT_PYTHONS, pip_args: Sequence[str] = (),
                      run: Callable[[Sequence[str], float], subprocess.CompletedProcess[str]] = _run,
                      timeout_s: float = 900.0) -> list[Path]:
    """Fill `dest` with the wheels (pip skips what is already there) and its index.html; returns
    the wheels. `pip_args` reach every pip call (an index mirror, or --no-index --find-links DIR)."""
    dest.mkdir(parents=True, exist_ok=True)
    local = dest.parent / ".local-wheels"
    local.mkdir(exist_ok=True)
    try:
        cmds = local_wheel_commands(requirements, local, pip_args)
        cmds += download_commands(requirements, dest, local, list(arches), pythons, pip_args)
        for cmd in cmds:
            try:
                done = run(cmd, timeout_s)
            except subprocess.TimeoutExpired:
                raise WheelhouseError(f"{' '.join(cmd)}: did not finish in {timeout_s:g}s") from None
            if done.returncode != 0:
                tail = [ln for ln in (done.stderr or done.stdout).splitlines() if not ln.startswith("WARNING")][-4:]
                raise WheelhouseError(f"{' '.join(cmd)}: exit {done.returncode}: " + " | ".join(tail))
        for built in local.glob("*.whl"):
            if not _PURE.search(built.name):
                raise WheelhouseError(f"{built.name}: an sdist-only package built a platform wheel; it cannot "
                                      "serve other nodes (add a wheel for it to the index instead)")
            shutil.copy2(built, dest / built.name)
    finally:
        shutil.rmtree(local, ignore_errors=True)
    wheels = sorted(dest.glob("*.whl"))
    (dest / "index.html").write_text(links_page(w.name for w in wheels))
    return wheels
