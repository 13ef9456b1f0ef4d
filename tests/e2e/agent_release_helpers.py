"""An agent release laid out as `bke bundle build` lays it out (bke.adapters.bundle.assemble._place_agent):
`agent/<version>/` with the BKE wheel, `requirements.txt`, `wheels/` (every dependency for
each Python and arch, and its index.html), and `bundle.json` listing every file with its sha256,
written last.

The dependency wheels come from the bundle's own wheelhouse builder
(bke.adapters.bundle.wheelhouse.ensure_wheelhouse: `pip download --only-binary=:all:` per Python and
arch, so the set has wheels this machine cannot install: cp312, aarch64), built once from the
package index and kept in `~/.cache/bke-agent-wheels/wheelhouse-<digest>` (BKE_AGENT_WHEEL_CACHE),
the digest over requirements-agent.txt and the Pythons and arches; a second run copies it. The
BKE wheel is this work tree's code built with another version (`pip wheel --no-deps`, a few
seconds), so the new agent is the code under test reporting that version.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from bke.adapters.bundle.wheelhouse import ensure_wheelhouse
from tests.workers import in_host_network

__all__ = ["ARCHES", "PYTHONS", "cached_wheelhouse", "release_bundle"]

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "requirements-agent.txt"
PYTHONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12))
ARCHES = ("amd64", "arm64")


def _cache() -> Path:
    return Path(os.environ.get("BKE_AGENT_WHEEL_CACHE", "~/.cache/bke-agent-wheels")).expanduser()


def cached_wheelhouse() -> Path:
    """The wheelhouse for PYTHONS x ARCHES, built once (renamed into place when complete, so a
    build cut short is never reused)."""
    key = hashlib.sha256(REQUIREMENTS.read_bytes() + repr((PYTHONS, ARCHES)).encode()).hexdigest()[:16]
    done = _cache() / f"wheelhouse-{key}"
    if (done / "index.html").is_file():
        return done
    tmp = _cache() / f".wheelhouse-{key}.{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    in_host_network(lambda: ensure_wheelhouse(REQUIREMENTS, tmp, ARCHES, pythons=PYTHONS))  # needs the index
    shutil.rmtree(done, ignore_errors=True)
    os.replace(tmp, done)
    return done


def _bke_wheel(dest: Path, version: str, work: Path) -> Path:
    """This work tree (tracked and new files, as git sees them) built as a wheel of `version`."""
    src = work / "src"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for rel in filter(None, listed):
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    project = src / "pyproject.toml"
    text, n = re.subn(r'(?m)^version = "[^"]+"', f'version = "{version}"', project.read_text(), count=1)
    assert n == 1, "pyproject.toml has no version line"
    project.write_text(text)
    # pip builds in an isolated environment whose build backend (setuptools, pyproject.toml) it
    # fetches from the package index: from a worker's own loopback, through the host's network
    built = in_host_network(lambda: subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                                                    "--wheel-dir", str(dest), str(src)],
                                                   capture_output=True, text=True, timeout=600))
    assert built.returncode == 0, f"pip wheel of this tree failed:\n{built.stdout}\n{built.stderr}"
    return next(dest.glob(f"bke-{version}-*.whl"))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def release_bundle(root: Path, version: str, work: Path) -> Path:
    """`root` made a bundle holding agent `version` only (no Kubernetes files: the upgrader
    reads only the agent's part); returns `root`."""
    base = root / "agent" / version
    shutil.copytree(cached_wheelhouse(), base / "wheels")
    wheel = _bke_wheel(base, version, work)
    shutil.copyfile(REQUIREMENTS, base / "requirements.txt")
    placed = [wheel, base / "requirements.txt", *sorted((base / "wheels").glob("*.whl")),
              base / "wheels" / "index.html"]
    files = [{"path": str(p.relative_to(root)), "sha256": _sha256(p), "size": p.stat().st_size,
              "source": "pip" if p.parent.name == "wheels" else "local", "verified": "built here"} for p in placed]
    index = {"bundleVersion": 1, "createdAt": datetime.now(timezone.utc).isoformat(), "files": files,
             "agent": {"dir": f"agent/{version}", "pythons": [f"{a}.{b}" for a, b in PYTHONS]}}
    (root / "bundle.json").write_text(json.dumps(index, indent=2) + "\n")
    return root
