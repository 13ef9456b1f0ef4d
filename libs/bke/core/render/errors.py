"""Renderer errors, classified by what the caller should do (see bke.core.errors).

    PermanentError
     └─ RenderError
         ├─ RenderRejected          the spec asks for something we refuse; carries field errors
         │   ├─ UnsupportedVersionError   a version outside bke.core.versions (message lists the table)
         │   └─ DeniedFlagError           an extraArgs flag on the denylist, or outside its version gate
         ├─ MissingInputError       the caller did not pass a required input (e.g. the VRRP password)
         └─ InvalidOutputError      what we rendered failed validation: a bug in a template or in
                                    the renderer, or a user flag value that breaks a file; carries
                                    every finding, never retried (same input, same output)

Rendering is pure, so nothing here is temporary: the same input always fails the same way.
"""
from __future__ import annotations

from dataclasses import dataclass

from bke.core.errors import PermanentError, RejectedInput

__all__ = [
    "DeniedFlagError",
    "Finding",
    "InvalidOutputError",
    "MissingInputError",
    "RenderError",
    "RenderRejected",
    "UnsupportedVersionError",
]


class RenderError(PermanentError):
    """Base of every error the renderer raises on purpose."""


class RenderRejected(RejectedInput, RenderError):
    """The input is refused; `errors` holds (field path, message) pairs, all of them at once."""


class UnsupportedVersionError(RenderRejected):
    pass


class DeniedFlagError(RenderRejected):
    pass


class MissingInputError(RenderError):
    pass


@dataclass(frozen=True)
class Finding:
    """One problem in the rendered output: which node and file, which check, what is wrong."""

    node: str  # hostname, or "" for cluster-level addon files
    file: str  # absolute node path, or the addon file name
    check: str  # e.g. "kubernetes-validate", "ports-unique", "hostpath-mounts"
    message: str

    def __str__(self) -> str:
        where = f"{self.node}:{self.file}" if self.node else self.file
        return f"{where}: [{self.check}] {self.message}"


class InvalidOutputError(RenderError):
    def __init__(self, findings: list[Finding]):
        self.findings = findings
        head = "; ".join(str(f) for f in findings[:3])
        more = f" (+{len(findings) - 3} more)" if len(findings) > 3 else ""
        super().__init__(f"rendered output failed validation: {head}{more}")
