"""Checksum sources live in `bke.checksums` (the upgrader reads the same ones)."""
from bke.checksums import HttpRepoChecksums, LabChecksums, artefact_urls

__all__ = ["HttpRepoChecksums", "LabChecksums", "artefact_urls"]
