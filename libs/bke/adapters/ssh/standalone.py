"""The bootstrap's steps for the bundled CPython: choose the interpreter, fetch, verify and unpack
the relocatable build (bke.core.pythons.STANDALONE) on nodes whose own python3 cannot run the agent.

Why shell scripts in argv: the choice is made on the node (its python3 is only known there) and
must reach later steps, which run as separate exec channels. `choose-python` writes the chosen
interpreter into the staging directory; every later step reads it. Each script is a constant; every
value (paths, the digest, the URL) is a positional argument, so :func:`shlex.join` quotes it.

What a node needs for them: `sh`, coreutils (`cat`, `sha256sum`, `mkdir`, `rm`, `mv`), `tar`
with gzip, and `curl` or `wget` only when the archive is fetched from an httpRepo rather than
uploaded. Every listed OS has these in its minimal install (checked on paper).

Idempotent: the unpacked build keeps the digest of its archive in `<prefix>/.bke-sha256`, and the
fetch, verify and unpack steps do nothing when it already matches, so a re-run after a failure
finishes the job, and a new pin replaces the old build.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from bke.core.artefacts import agent_artefacts, file_sha256, tree_sha256
from bke.core.pythons import STANDALONE
from .layout import AGENT_PREFIX, PYTHON_PREFIX, STAGING_DIR

__all__ = ["ARCHIVE", "CHOICE", "PYTHON_BIN", "PYTHON_MODES", "PythonMode", "StandaloneSource", "bundled_python_steps",
           "choose_python_argv", "standalone_source", "venv_argv"]

PythonMode = Literal["auto", "system", "bundled"]
PYTHON_MODES: tuple[str, ...] = ("auto", "system", "bundled")
PYTHON_BIN = f"{PYTHON_PREFIX}/bin/python{STANDALONE.minor}"
CHOICE = f"{STAGING_DIR}/python"  # the interpreter choose-python picked, one line
ARCHIVE = f"{STAGING_DIR}/python.tar.gz"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class StandaloneSource:
    """Where a node gets the bundled CPython: uploaded from the operator's bundle (`path`) or
    fetched from the httpRepo (`url`), and the sha256 it must have (the bundle's `.sha256`, itself
    checked against upstream's SHA256SUMS by `bke bundle build`)."""

    sha256: str
    path: Path | None = None
    url: str | None = None

    def __post_init__(self) -> None:
        if (self.path is None) == (self.url is None):
            raise ValueError("the bundled CPython comes from exactly one of a local file or a URL")
        if not _SHA256.match(self.sha256):
            raise ValueError(f"{self.sha256!r} is not a sha256 hex digest")
        if self.url is not None and (any(c in self.url for c in "\n\r\0")
                                     or not self.url.startswith(("http://", "https://"))):
            raise ValueError(f"{self.url!r} is not an http:// or https:// URL")


def standalone_source(location: str, arch: str, read_url: Callable[[str], str]) -> StandaloneSource:
    """The bundled CPython for a node of `arch`, from `location`: a bundle directory on this machine
    (`bke bundle build`'s output: the archive is uploaded) or the httpRepo serving it (the node
    fetches it). The digest is the bundle's `.sha256` beside the archive; a local archive must match
    it here already. `read_url` reads a small text file over HTTP. ValueError names what is wrong."""
    art = agent_artefacts(arch)[0]
    if location.startswith(("http://", "https://")):
        url = art.url(location)
        return StandaloneSource(tree_sha256(read_url(f"{url}.sha256"), f"{url}.sha256"), url=url)
    path = Path(location) / art.path
    sums = path.with_name(path.name + ".sha256")
    if not path.is_file() or not sums.is_file():
        raise ValueError(f"{location}: no {art.path} with its .sha256 (make the bundle with `bke bundle build`)")
    want = tree_sha256(sums.read_text(), str(sums))
    got = file_sha256(path)
    if got != want:
        raise ValueError(f"{path}: sha256 {got} is not the {want} its .sha256 records; rebuild the bundle")
    return StandaloneSource(want, path=path)


# $1 mode, $2 the node's python, $3 the bundled interpreter, $4 the version check, $5 the choice file.
# auto keeps the node's python when it passes the check; otherwise (or when bundled is asked) the
# bundled interpreter is chosen and the reason is printed.
_CHOOSE = (
    'if [ "$1" = auto ]; then '
    'if why=$("$2" -c "$4" 2>&1); then printf "%s\\n" "$2" > "$5"; echo "using the node'"'"'s $2"; exit 0; fi; '
    'echo "the node'"'"'s $2 cannot run bke-agent (${why:-not found}); using the bundled CPython $3"; '
    'else echo "using the bundled CPython $3 (--python bundled)"; fi; printf "%s\\n" "$3" > "$5"'
)
# Shared head of the fetch, verify and unpack scripts: $1 the choice file, $2 the bundled
# interpreter, $3 the prefix, $4 the digest. Nothing to do when the node keeps its own python, or
# when the build of this digest is already unpacked.
_SKIP = ('[ "$(cat "$1")" = "$2" ] || exit 0; '
         '[ "$(cat "$3/.bke-sha256" 2>/dev/null)" != "$4" ] || exit 0; ')
# $5 the URL, $6 the archive
_FETCH = _SKIP + (
    'if command -v curl >/dev/null 2>&1; then curl -fsSL -o "$6" "$5"; '
    'elif command -v wget >/dev/null 2>&1; then wget -q -O "$6" "$5"; '
    'else echo "neither curl nor wget on this node: cannot fetch $5 (give --python-from the bundle directory '
    'to upload it instead)" >&2; exit 1; fi'
)
# $5 the archive
_VERIFY = _SKIP + (
    'printf "%s  %s\\n" "$4" "$5" | sha256sum -c --status - '
    '|| { echo "$5: its sha256 is not $4 (the bundle'"'"'s): refusing it" >&2; exit 1; }'
)
# $5 the archive, $6 the version check. Unpacked beside the prefix and moved in whole; the digest
# is written last, after the interpreter ran on this node (a glibc older than the build's floor
# fails here, with the loader's message).
_UNPACK = _SKIP + (
    'rm -rf "$3.new" && mkdir -p "$3.new" && tar -xzf "$5" -C "$3.new" --strip-components=1 --no-same-owner '
    '&& rm -rf "$3" && mv "$3.new" "$3" '
    '&& { "$2" -c "$6" || { echo "the bundled CPython does not run on this node (it needs glibc '
    + STANDALONE.glibc + '+)" >&2; exit 1; }; } '
    '&& printf "%s\\n" "$4" > "$3/.bke-sha256"'
)
# $1 the choice file, $2 the venv. A venv made by another interpreter (the node's python before,
# the bundled one now) is cleared and made again: pip reinstalls everything in the next steps.
_VENV = (
    'py=$(cat "$1") && home=$(dirname "$(command -v "$py")") && clear= && '
    'if [ -f "$2/pyvenv.cfg" ] && ! grep -qxF "home = $home" "$2/pyvenv.cfg"; then clear=--clear; fi && '
    '"$py" -m venv $clear "$2"'
)


def choose_python_argv(mode: str, python: str, check: str) -> tuple[str, ...]:
    return ("sh", "-c", _CHOOSE, "sh", mode, python, PYTHON_BIN, check, CHOICE)


def venv_argv() -> tuple[str, ...]:
    return ("sh", "-c", _VENV, "sh", CHOICE, AGENT_PREFIX)


def bundled_python_steps(source: StandaloneSource, check: str) -> list[tuple[str, str, tuple[str, ...], bool]]:
    """(name, summary, argv, privileged) of the steps after choose-python, before venv."""
    head = (CHOICE, PYTHON_BIN, PYTHON_PREFIX, source.sha256)
    steps: list[tuple[str, str, tuple[str, ...], bool]] = []
    if source.url is not None:
        steps.append(("fetch-python", "fetch the bundled CPython from the httpRepo (curl or wget), if chosen",
                      ("sh", "-c", _FETCH, "sh", *head, source.url, ARCHIVE), False))
    steps.append(("verify-python", "check the archive's sha256 (sha256sum), if chosen",
                  ("sh", "-c", _VERIFY, "sh", *head, ARCHIVE), False))
    steps.append(("install-python", f"unpack it in {PYTHON_PREFIX} and run it once, if chosen",
                  ("sh", "-c", _UNPACK, "sh", *head, ARCHIVE, check), True))
    return steps
