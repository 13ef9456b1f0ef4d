"""Which Python versions bke-agent runs on, and which operating systems ship one.

Why these versions (checked for this release, redo the check when a pin moves):
* the agent's code and everything it imports from `bke` need 3.11: `vermin` (1.9.2, with
  --eval-annotations) over those 63 modules finds one 3.11 feature, `asyncio.timeout` in
  bke_agent/executor.py; everything else would run on 3.9;
* the pinned dependencies decide more than the code: pydantic-settings 2.16.3 declares
  Requires-Python >=3.11, and pydantic 2.14.4, PyYAML 6.0.4, redis 8.1.0 and faststream 0.7.8
  >=3.10 (their wheels' metadata). Going below 3.11 would mean a second, untested set of pins;
* manylinux wheels of every compiled dependency (pydantic-core, PyYAML, cffi; cryptography and
  PyNaCl are abi3) exist for cp311 to cp314 on x86_64 and aarch64 (a `pip download
  --only-binary=:all: --platform manylinux2014_<arch> --python-version 3.X` of
  requirements-agent.txt succeeds for each), so the wheelhouse covers 3.11 to 3.14.
Only 3.11 runs the test suite here; 3.12 to 3.14 are supported on the strength of the checks above.

This module is imported by the agent before anything else and by the SSH bootstrap's
`check-python` step (as the literal set): it must stay plain, standard-library Python.
"""
from __future__ import annotations

from typing import NamedTuple

__all__ = ["AGENT_PYTHONS", "OS_PYTHONS", "STANDALONE", "OsPython", "StandalonePython", "check_python_source",
           "python_problem", "supported_text"]

AGENT_PYTHONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13), (3, 14))


class OsPython(NamedTuple):
    os: str
    default: str  # the distribution's python3
    remedy: str  # how the agent gets a supported Python there


class StandalonePython(NamedTuple):
    """A relocatable CPython from python-build-standalone, shipped in the bundle for nodes whose
    own python3 cannot run the agent (what uv installs as a "managed" Python)."""

    python: str  # the CPython version it carries
    release: str  # python-build-standalone's release tag (a build date)
    glibc: str  # the oldest glibc it runs on
    triples: tuple[tuple[str, str], ...]  # BKE arch -> upstream's target triple

    @property
    def version(self) -> str:
        """The version as upstream's asset names spell it, and as the bundle tree's folder."""
        return f"{self.python}+{self.release}"

    @property
    def minor(self) -> str:
        return ".".join(self.python.split(".")[:2])


# Pinned build: release 20251031, CPython 3.11.14, the `install_only_stripped` flavour (upstream's
# docs/distributions.md, "Install Only Archive": the installation alone, rewritten from
# python/install/* to python/*, gzip-compressed; "stripped" is the same without debug symbols:
# smaller to ship to every node). Asset name as the release tool uploads it
# (astral-sh/python-build-standalone src/github.rs, command_upload_release_distributions:
# `cpython-{version}+{tag}-{triple}-install_only_stripped.tar.gz`). glibc floor: "The minimum glibc
# version required for most targets is 2.17 ... RHEL/CentOS 7+" (docs/running.md, "Runtime
# Requirements"; riscv64 alone needs 2.28), so x86_64- and aarch64-unknown-linux-gnu run on every
# listed OS, CentOS 7's glibc 2.17 included. Checked on paper: no real build was downloaded or run
# here; that release 20251031 carries 3.11.14 is read from other projects' pinned URLs to it.
STANDALONE = StandalonePython("3.11.14", "20251031", "2.17",
                              (("amd64", "x86_64-unknown-linux-gnu"), ("arm64", "aarch64-unknown-linux-gnu")))
_BUNDLED = f"the bundle's CPython {STANDALONE.python} (python-build-standalone, glibc {STANDALONE.glibc}+)"

# The operating systems the README lists, their default `python3`, and how the agent gets a
# supported one there (vendor packages named as the distributions name them; checked on paper).
# `bke agent bootstrap` (--python auto, the default) uses the bundled CPython wherever the node's
# python3 fails the check, so the vendor routes below are alternatives, not requirements.
OS_PYTHONS: tuple[OsPython, ...] = (
    OsPython("Ubuntu 22.04", "3.10", f"{_BUNDLED}; or python3.11 and python3.11-venv (universe) with "
             "--remote-python python3.11 --python system"),
    OsPython("Ubuntu 20.04", "3.8", _BUNDLED),
    OsPython("Ubuntu 24.04", "3.12", "the default python3 (and python3-venv)"),
    OsPython("Debian 12", "3.11", "the default python3 (and python3-venv)"),
    OsPython("openEuler 22.03 LTS", "3.9", f"{_BUNDLED} (the vendor ships no 3.11)"),
    OsPython("openEuler 24.03 LTS", "3.11", "the default python3"),
    OsPython("Kylin V10", "3.7", _BUNDLED),
    OsPython("Rocky Linux / RHEL 9, CentOS Stream 9", "3.9",
             f"{_BUNDLED}; or dnf install python3.11 (AppStream) with --remote-python python3.11 --python system"),
    OsPython("RHEL / Rocky / Alma 8, CentOS 8", "3.6", _BUNDLED),
    OsPython("CentOS 7", "3.6", f"{_BUNDLED} (end of life; its glibc 2.17 is the build's floor)"),
)


def supported_text() -> str:
    versions = [f"{a}.{b}" for a, b in AGENT_PYTHONS]
    return ", ".join(versions[:-1]) + " or " + versions[-1]


def python_problem(version: tuple[int, ...]) -> str | None:
    """Why this interpreter cannot run bke-agent, or None."""
    if tuple(version[:2]) in AGENT_PYTHONS:
        return None
    return (f"bke-agent needs Python {supported_text()}; this is Python {version[0]}.{version[1]} "
            "(see the README's list of operating systems for how to get one)")


def check_python_source(hint: str = "") -> str:
    """One line of Python for `python -c` on a node: exits non-zero with the message (and `hint`,
    plain text without quotes or `%`) on an unsupported interpreter. Written for any Python 3 (old
    syntax only, no f-strings)."""
    if any(c in hint for c in "\"\\%\n"):
        raise ValueError(f"hint {hint!r}: no quotes, backslashes, % or line breaks")
    allowed = ", ".join(f"({a}, {b})" for a, b in AGENT_PYTHONS)
    return ("import sys; v = tuple(sys.version_info[:2]); "
            f'sys.exit(0 if v in ({allowed},) else "bke-agent needs Python {supported_text()}; '
            f'this node has Python %d.%d{hint}" % v)')
