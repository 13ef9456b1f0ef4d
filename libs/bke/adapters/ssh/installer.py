"""The one-line installer: the same step table as the SSH path, as one POSIX shell line.

Why one line and what it honestly is: an operator who prepares nodes another way (a golden image,
a config-management tool, a console session) pastes one line into a root shell on the node. It is
*not* ``curl ... | sh``: nothing is downloaded from BKE, and the line does not carry the wheel. The
operator copies two files into the current directory first — the wheel and ``requirements.txt`` —
and the line does the rest::

    (umask 077 && mkdir ... && install -m 0600 WHEEL .bke-bootstrap/WHEEL && ...
     printf '%s\\n' LINE... > .bke-bootstrap/env && ... && rm -rf -- .bke-bootstrap)

* the steps are :func:`bke.adapters.ssh.plan.bootstrap_steps` joined with ``&&``, so the first failure
  stops the line, exactly as the SSH executor stops at the first failed step;
* generated files (unit, environment) are written with ``printf '%s\\n'`` and shell-quoted lines;
* it runs in a subshell ``( ... )`` so that ``umask 077`` does not leak into the operator's shell;
* the only values in it are the node's own: its name, its cluster and the NATS URL (which may hold
  credentials: it ends up in the shell's history, see docs/agent-bootstrap.md).

Pip needs the package index (or a mirror configured in pip.conf) on the node, as on the SSH path,
unless a wheelhouse is given (`--wheelhouse`, the bundle's): then it installs with no index.
"""
from __future__ import annotations

import shlex

from .plan import (
    BootstrapParams,
    Inline,
    LocalFile,
    Step,
    Upload,
    bootstrap_steps,
    remote_command,
)

__all__ = ["installer_files", "installer_line"]


def installer_line(params: BootstrapParams) -> str:
    """One line for a root shell on the node; ``params.username`` is ignored (no sudo). ValueError if a
    value (e.g. the interpreter path) holds a line break."""
    as_root = BootstrapParams(
        cluster=params.cluster, node=params.node, nats_url=params.nats_url, wheel=params.wheel,
        requirements=params.requirements, username="root", python=params.python, wheelhouse=params.wheelhouse,
        python_mode=params.python_mode, standalone=params.standalone,
    )
    parts = ["umask 077"]
    for step in bootstrap_steps(as_root):
        parts.extend(_step_commands(step))
    line = "(" + " && ".join(parts) + ")"
    if "\n" in line or "\r" in line:  # generated files are split into lines; only a free-text option can do this
        raise ValueError("a value for the installer contains a line break; it would not be one line")
    return line


def installer_files(params: BootstrapParams) -> tuple[str, ...]:
    """The local files the operator must copy next to where the line runs, by name."""
    return tuple(u.source.path.name for s in bootstrap_steps(params) for u in s.uploads
                 if isinstance(u.source, LocalFile))


def _step_commands(step: Step) -> list[str]:
    # Same order as the executor: the step's command first, then its uploads land in STAGING_DIR.
    return [remote_command(step.argv), *(_upload_command(u) for u in step.uploads)]


def _upload_command(upload: Upload) -> str:
    if isinstance(upload.source, LocalFile):
        return remote_command(("install", "-m", f"{upload.mode:04o}", "--", upload.source.path.name, upload.remote_path))
    assert isinstance(upload.source, Inline)
    lines = upload.source.text.splitlines()
    write = remote_command(("printf", "%s\\n", *lines)) + " > " + shlex.quote(upload.remote_path)
    return write + " && " + remote_command(("chmod", f"{upload.mode:04o}", upload.remote_path))
