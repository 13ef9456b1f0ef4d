"""Why a step failed, and whether trying it again can help.

    StepError                 the step failed; the executor retries it while attempts remain
    ├── PermanentStepError    retrying cannot help (bad content, checksum mismatch, unknown
    │                         user, ...): the step fails at once, whatever its `retries`
    │   └── PathRefused       the path is outside what this backend may write
    │                         (host allow-list, lab node root, `..`, symlinks out)
    ├── NotHealthy            a health endpoint did not answer as expected in time (`url`,
    │                         `last`: what it said last); ReplaceFiles rolls back on it
    (anything else)           a bug or an outage: counted as a failed attempt, retried

Messages are what the dispatcher shows the operator (stderr of the step): they name paths,
units and exit codes, never file content, and never anything from a sealed file.
"""
from __future__ import annotations

__all__ = ["NotHealthy", "PathRefused", "PermanentStepError", "StepError"]


class StepError(Exception):
    def __init__(self, message: str, *, exit_code: int | None = None, stdout: bytes | str = b"",
                 stderr: bytes | str | None = None) -> None:
        super().__init__(message)
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = message if stderr is None else stderr


class PermanentStepError(StepError):
    pass


class PathRefused(PermanentStepError):
    pass


class NotHealthy(StepError):
    def __init__(self, url: str, timeout_s: float, last: str) -> None:
        super().__init__(f"{url} not healthy after {timeout_s:g}s; last answer: {last}")
        self.url, self.timeout_s, self.last = url, timeout_s, last
