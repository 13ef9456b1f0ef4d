"""A stand-in agent wheel, built by hand (a wheel is a zip: no build backend, no network): its
`bke-agent` console script writes the confirmation an agent writes once it came up, with its
version, into BKE_AGENT_STATE_DIR, and exits 0."""
from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

__all__ = ["standin_wheel"]

_MAIN = '''import os, sys
from pathlib import Path


def main():
    state = Path(os.environ["BKE_AGENT_STATE_DIR"])
    (state / "agent-confirmed").write_text({version!r})
    sys.exit(0)
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def standin_wheel(out: Path, version: str) -> Path:
    info = f"bkestandin-{version}.dist-info"
    files = {
        "bkestandin/__init__.py": _MAIN.format(version=version).encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: bkestandin\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: bke-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/entry_points.txt": b"[console_scripts]\nbke-agent = bkestandin:main\n",
    }
    record = "\n".join([*(_record_line(n, d) for n, d in files.items()), f"{info}/RECORD,,"]) + "\n"
    path = out / f"bkestandin-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", record)
    return path
