"""The lab has no httpRepo: a lab agent writes a placeholder instead of downloading a binary.

Both sides compute the placeholder from the URL, so the checksum check in the agent's
FetchFile step is still exercised end to end (a wrong URL or checksum fails the step): the
lab agent writes these bytes, and a service in lab mode expects their checksum
(bke.lab.standins.checksums).
"""
from __future__ import annotations

import hashlib

__all__ = ["lab_binary_bytes", "lab_binary_sha256"]


def lab_binary_bytes(url: str) -> bytes:
    return f"#!/bin/sh\n# bke lab placeholder for {url}\nexit 0\n".encode()


def lab_binary_sha256(url: str) -> str:
    return hashlib.sha256(lab_binary_bytes(url)).hexdigest()
