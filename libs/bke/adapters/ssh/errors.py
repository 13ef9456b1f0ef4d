"""Why a node's bootstrap stopped, classified by what retrying would do.

    BKEError
    ├── PermanentError             retrying the same way cannot help
    │   ├── HostKeyRefused         unknown, mismatched or revoked host key: nothing was sent
    │   ├── SshAuthRefused         the server refused our public key (no password is ever tried)
    │   ├── StepFailed             a remote command exited non-zero (names the step, exit, stderr)
    │   └── UploadFailed           SFTP refused a file (no SFTP subsystem, permission denied)
    └── TemporaryError
        └── SshUnreachable         connection refused, timed out or lost: try again later

Messages name the node and address and never contain key material or the environment file.
"""
from __future__ import annotations

from bke.core.errors import PermanentError, TemporaryError

__all__ = ["HostKeyRefused", "SshAuthRefused", "SshUnreachable", "StepFailed", "UploadFailed"]


class HostKeyRefused(PermanentError):
    """The host key is not the one we expect; carries the fingerprint the server presented."""

    def __init__(self, message: str, fingerprint: str | None = None):
        super().__init__(message)
        self.fingerprint = fingerprint


class SshAuthRefused(PermanentError):
    pass


class StepFailed(PermanentError):
    def __init__(self, step: str, exit_status: int | None, stderr: str):
        detail = stderr.strip().splitlines()[-1] if stderr.strip() else "(no stderr)"
        super().__init__(f"step {step} failed (exit {exit_status}): {detail}")
        self.step = step
        self.exit_status = exit_status
        self.stderr = stderr


class UploadFailed(PermanentError):
    pass


class SshUnreachable(TemporaryError):
    pass
