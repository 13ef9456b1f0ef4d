"""One file for one node, as the certs service and the renderer hand it to the dispatcher: its
path, mode and sha256, and either its bytes or, for a secret, those bytes sealed to the node's
agent (`sealed_b64`), never the clear bytes. Stored per node in Redis by
bke.adapters.state.nodefiles; read by the pure cores that turn files into agent steps.
"""
from __future__ import annotations

import base64
import hashlib

from pydantic import Field

from bke.contracts.base import Message

__all__ = ["NodeFile", "file_from_bytes"]


class NodeFile(Message):
    path: str
    mode: int = Field(0o644, ge=0, le=0o7777)
    sha256: str
    content_b64: str | None = None
    sealed_b64: str | None = None  # sealed to the receiving agent; never the clear bytes


def file_from_bytes(path: str, data: bytes, mode: int = 0o644) -> NodeFile:
    return NodeFile(path=path, mode=mode, sha256=hashlib.sha256(data).hexdigest(), content_b64=base64.b64encode(data).decode())
