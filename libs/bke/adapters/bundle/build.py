"""`bke bundle build`: every file of `bke.core.artefacts` for the chosen arches, downloaded from the
upstream table, verified against upstream's published checksum, unpacked, and laid out as the
httpRepo tree (`Artefact.path`, a `<file>.sha256` beside each file).

Why this order per download: fetch into a private staging directory, check the digest, then
move each file into the tree and only then write its `.sha256`. A reader of the tree (the
dispatcher reads `<url>.sha256`, a node checks the file against it) therefore never sees a
checksum for a file that is not complete, and a refused download leaves nothing in the tree.
A file already in the tree whose bytes match its `.sha256` (and its pin, if it has one) is kept,
with the verification the previous build recorded (a re-run after a failure continues where it
stopped). `bundle.json` is written last.

    BundleError
    ├── ChecksumMismatch   (bke.adapters.bundle.sums) the bytes are not what upstream published
    ├── ChecksumError      (bke.adapters.bundle.sums) the checksum file does not name the file
    └── FetchError         (bke.adapters.bundle.fetch) HTTP status or connection failure
"""
from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from bke.core.artefacts import ARCHES, Artefact, agent_artefacts, cluster_artefacts, file_sha256, node_artefacts
from bke.core.spec.models import Cluster
from .sums import ChecksumMismatch, published_sha256
from .upstreams import UPSTREAMS, Upstream
from .fetch import Fetcher

__all__ = ["BundleError", "BundleFile", "Download", "bundle_artefacts", "downloads", "ensure_files",
           "write_atomic"]


class BundleError(RuntimeError):
    """The build cannot go on (a missing archive member, a bad archive)."""


@dataclass(frozen=True)
class Download:
    """One upstream file and the tree files it yields."""

    upstream: Upstream
    url: str
    sums_url: str | None
    artefacts: tuple[Artefact, ...]

    @property
    def name(self) -> str:
        return self.url.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class BundleFile:
    path: str  # under the tree root
    sha256: str
    size: int
    source: str  # the upstream URL it came from
    # how the digest is known to be upstream's: "published" (upstream's checksum file),
    # "pinned" (a digest the user gave), "recorded" (no published checksum: first-download digest)
    verified: str
    member: str | None = None  # the archive member it was unpacked from
    fetched: bool = True  # False: kept from an earlier build (it matched its .sha256)


def bundle_artefacts(cluster: Cluster, arches: Iterable[str] = ARCHES) -> list[Artefact]:
    """Everything any node of `cluster` (of these arches) or its dispatcher fetches, once each, and
    the CPython the agent's bootstrap ships to nodes whose own python3 is unsupported."""
    seen: dict[str, Artefact] = {}
    for arch in arches:
        for a in node_artefacts(cluster, arch, registers=True):  # a registered node fetches a superset
            seen.setdefault(a.path, a)
        for a in agent_artefacts(arch):
            seen.setdefault(a.path, a)
    for a in cluster_artefacts(cluster):
        seen.setdefault(a.path, a)
    return list(seen.values())


def downloads(artefacts: Iterable[Artefact], table: Mapping[str, Upstream] = UPSTREAMS) -> list[Download]:
    """Group tree files by the upstream file that holds them (one tarball gives several)."""
    groups: dict[str, list[Artefact]] = {}
    rows: dict[str, Upstream] = {}
    for a in artefacts:
        up = table[a.project]
        url = up.download_url(a.version, a.arch, a.file)
        groups.setdefault(url, []).append(a)
        rows[url] = up
    return [Download(rows[u], u, rows[u].sums_url(g[0].version, g[0].arch, g[0].file), tuple(g))
            for u, g in groups.items()]


def write_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _kept(root: Path, a: Artefact) -> str | None:
    """The digest of a tree file that is complete and matches its `.sha256`, else None."""
    target, sums = root / a.path, root / f"{a.path}.sha256"
    if not (target.is_file() and sums.is_file()):
        return None
    want = sums.read_text().split()[0] if sums.read_text().split() else ""
    got = file_sha256(target)
    return got if got == want else None


def _unpack(archive: Path, wanted: Mapping[str, Path], url: str) -> None:
    """Extract the named regular-file members of a tar archive to the given paths (never a link,
    never a path the archive chooses)."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            by_name = {m.name.removeprefix("./"): m for m in tar.getmembers()}
            for member, dest in wanted.items():
                info = by_name.get(member.removeprefix("./"))
                if info is None:
                    raise BundleError(f"{url}: the archive has no member {member} "
                                      f"(it holds {', '.join(sorted(by_name)[:12])}...)")
                if not info.isfile():
                    raise BundleError(f"{url}: member {member} is not a regular file")
                src = tar.extractfile(info)
                assert src is not None
                fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
                with src, os.fdopen(fd, "wb") as out:
                    shutil.copyfileobj(src, out, 1 << 20)
    except tarfile.TarError as exc:
        raise BundleError(f"{url}: not a readable tar archive: {exc}") from None


def _place(root: Path, a: Artefact, staged: Path) -> str:
    """Move a verified file into the tree, then write its `.sha256` (bare digest, as dl.k8s.io)."""
    digest = file_sha256(staged)
    target = root / a.path
    target.parent.mkdir(parents=True, exist_ok=True)
    sums = root / f"{a.path}.sha256"
    sums.unlink(missing_ok=True)  # an old checksum never outlives the file it described
    os.chmod(staged, a.mode)
    os.replace(staged, target)
    write_atomic(sums, f"{digest}\n".encode())
    return digest


def ensure_files(root: Path, plan: Iterable[Download], fetcher: Fetcher, pins: Mapping[str, str] | None = None,
                 on_file: Callable[[str, str], None] | None = None,
                 previous: Mapping[str, str] | None = None) -> list[BundleFile]:
    """Fetch, verify, unpack and place every download of `plan` under `root`. `pins` maps a tree
    path (or an upstream file name) to the sha256 the user vouches for: it is checked for files
    upstream publishes no checksum for, and must agree with upstream's where there is one.
    `previous` maps tree paths to how the previous build verified them (its bundle.json)."""
    pins = dict(pins or {})
    previous = previous or {}
    root.mkdir(parents=True, exist_ok=True)
    out: list[BundleFile] = []
    say = on_file or (lambda path, what: None)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        for d in plan:
            kept = {a.path: _kept(root, a) for a in d.artefacts}
            pin = _pin(d, pins)
            # a pinned archive is fetched again: its pin is of the archive, the tree holds members
            if all(kept.values()) and (pin is None or (d.upstream.member is None
                                                       and kept[d.artefacts[0].path] == pin.lower())):
                for a in d.artefacts:
                    how = "pinned" if pin else previous.get(a.path, "unknown (kept from an earlier build)")
                    out.append(replace(_record(root, a, kept[a.path] or "", d, how), fetched=False))
                    say(a.path, "kept (matches its .sha256)")
                continue
            out.extend(_one(root, staging, d, fetcher, pins, say))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def _pin(d: Download, pins: Mapping[str, str]) -> str | None:
    return pins.get(d.name) or (pins.get(d.artefacts[0].path) if len(d.artefacts) == 1 else None)


def _record(root: Path, a: Artefact, digest: str, d: Download, verified: str) -> BundleFile:
    return BundleFile(a.path, digest, (root / a.path).stat().st_size, d.url, verified, d.upstream.member_name(a.file))


def _one(root: Path, staging: Path, d: Download, fetcher: Fetcher, pins: Mapping[str, str],
         say: Callable[[str, str], None]) -> list[BundleFile]:
    work = Path(tempfile.mkdtemp(dir=staging))
    download = work / "download"
    actual = fetcher.to_file(d.url, download)
    pin = _pin(d, pins)
    if d.sums_url is not None:
        published = published_sha256(fetcher.text(d.sums_url), d.name, d.sums_url)
        verified = "published"
        if pin and pin.lower() != published:
            raise ChecksumMismatch(d.name, d.url, f"{published} (pinned: {pin})", actual)
    elif pin:
        published, verified = pin.lower(), "pinned"
    else:
        published, verified = actual, "recorded"
    if actual != published:
        raise ChecksumMismatch(d.name, d.url, published, actual)
    staged: dict[str, Path] = {}
    if d.upstream.member is None:
        (a,) = d.artefacts
        staged[a.path] = download
    else:
        members = {}
        for i, a in enumerate(d.artefacts):
            staged[a.path] = work / f"member-{i}"
            members[d.upstream.member_name(a.file) or a.file] = staged[a.path]
        _unpack(download, members, d.url)
    files = []
    for a in d.artefacts:
        digest = _place(root, a, staged[a.path])
        files.append(_record(root, a, digest, d, verified))
        say(a.path, f"sha256 {verified}" + (f" (from {d.name})" if d.upstream.member else ""))
    return files
