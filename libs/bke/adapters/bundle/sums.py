"""Reading upstream's published checksums: `sha256sum` output (`<hex>  name` or `<hex> *name`, one
line per file) or a bare digest (dl.k8s.io's `.sha256`)."""
from __future__ import annotations

import re

__all__ = ["ChecksumError", "ChecksumMismatch", "published_sha256"]

_LINE = re.compile(r"^(?P<hex>[0-9a-fA-F]{64})(?:\s+\*?(?P<name>\S.*))?$")


class ChecksumError(ValueError):
    """A checksum file that does not say what the digest of the file is."""


class ChecksumMismatch(ValueError):
    """The downloaded bytes are not what upstream published."""

    def __init__(self, name: str, url: str, published: str, actual: str):
        super().__init__(f"{name}: sha256 mismatch: upstream publishes {published}, the download from {url} "
                         f"has {actual}; refusing it")
        self.name, self.published, self.actual = name, published, actual


def published_sha256(text: str, name: str, where: str) -> str:
    """The digest `text` gives for the file called `name` (its base name); a lone bare digest
    counts for any name. `where` (the checksum's URL) goes into the error."""
    entries = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line.strip())
        if not m:
            raise ChecksumError(f"{where}: not a sha256 checksum line: {line.strip()[:80]!r}")
        entries.append((m["hex"].lower(), (m["name"] or "").strip()))
    named = [h for h, n in entries if n and n.rsplit("/", 1)[-1] == name]
    if named:
        return named[0]
    if len(entries) == 1 and not entries[0][1]:
        return entries[0][0]
    listed = ", ".join(n for _, n in entries if n) or "nothing"
    raise ChecksumError(f"{where}: no checksum for {name} (it lists {listed})")
