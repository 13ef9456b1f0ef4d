"""The clear bytes of the files a command writes, and the kubeconfig check on all of them before
any step runs.

Why before: a kubeconfig that names an `exec` plugin or an `auth-provider` runs a program as
whoever reads it (bke.core.host_actions.kubeconfigs). Most files arrive sealed to this agent, so
their text is known only once opened; checked only where each is written, the steps before it
would have run. So the agent opens every file of the command (WriteFile's and ReplaceFiles'
sealed or inline contents; a download is never a kubeconfig: bke.core.host_actions.check),
checks each, and drops the clear bytes; a command with one such file is refused as a whole,
as one beyond its kind is. The steps open their files again when they write them (and check
again): no clear secret is kept for the length of a command.

A file that cannot be opened here (not this agent's seal, bad base64, a sha256 that does not
match) is left to its step, which fails on it: it is never written, so it is nothing to check.

Secrets: no error or log line carries file content; sealing errors name key ids only.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Callable, Iterator
from functools import partial

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import NewFile, ReplaceFiles, WriteFile
from bke.core.host_actions import kubeconfig_refusal

from .errors import PermanentStepError
from .identity import AgentIdentity

__all__ = ["command_kubeconfig_refusal", "open_new_file", "open_write"]


def _unseal(identity: AgentIdentity, sealed_b64: str, path: str) -> bytes:
    try:
        return identity.open_sealed(base64.b64decode(sealed_b64, validate=True))
    except binascii.Error:
        raise PermanentStepError(f"{path}: sealed content is not valid base64") from None
    except Exception as exc:  # noqa: BLE001 - sealing errors name key ids only
        raise PermanentStepError(f"{path}: cannot open sealed content: {type(exc).__name__}: {exc}") from None


def _checked(data: bytes, sha256: str, path: str) -> bytes:
    if hashlib.sha256(data).hexdigest() != sha256.lower():
        raise PermanentStepError(f"content of {path} does not match its sha256")
    return data


def open_write(step: WriteFile, identity: AgentIdentity) -> bytes:
    """A WriteFile's clear bytes, checked against its sha256 (PermanentStepError)."""
    if (step.content_b64 is None) == (step.sealed_b64 is None):
        raise PermanentStepError("a WriteFile needs exactly one of contentB64 and sealedB64")
    if step.sealed_b64 is not None:
        return _checked(_unseal(identity, step.sealed_b64, step.path), step.sha256, step.path)
    try:
        data = base64.b64decode(step.content_b64 or "", validate=True)
    except binascii.Error:
        raise PermanentStepError("file content is not valid base64") from None
    return _checked(data, step.sha256, step.path)


def open_new_file(f: NewFile, identity: AgentIdentity) -> bytes:
    """A ReplaceFiles file's clear bytes (sealed or inline), checked against its sha256."""
    if f.sealed_b64 is not None:
        if f.content_b64 is not None or f.url is not None:
            raise PermanentStepError(f"{f.path}: a NewFile needs exactly one of contentB64, sealedB64 and url")
        return _checked(_unseal(identity, f.sealed_b64, f.path), f.sha256, f.path)
    try:
        return base64.b64decode(f.content_b64 or "", validate=True)
    except binascii.Error:
        raise PermanentStepError(f"{f.path}: content is not valid base64") from None


def _clear_files(cmd: AgentCommand, identity: AgentIdentity) -> Iterator[tuple[str, str, bytes]]:
    """(step id, path, clear bytes) of every file of `cmd` that can be opened."""
    openers: list[tuple[str, str, Callable[[], bytes]]] = []
    for step in cmd.steps:
        if isinstance(step, WriteFile):
            openers.append((step.id, step.path, partial(open_write, step, identity)))
        elif isinstance(step, ReplaceFiles):
            openers += [(step.id, f.path, partial(open_new_file, f, identity)) for f in step.files if f.url is None]
    for step_id, path, opened in openers:
        try:
            yield step_id, path, opened()
        except PermanentStepError:
            continue  # its step fails on it and writes nothing (the module docstring)


def command_kubeconfig_refusal(cmd: AgentCommand, identity: AgentIdentity) -> str | None:
    """Why `cmd` is refused for a kubeconfig it would write (None if none names a program)."""
    for step_id, path, data in _clear_files(cmd, identity):
        if why := kubeconfig_refusal(path, data):
            return f"step {step_id}: refused: {why}"
    return None
