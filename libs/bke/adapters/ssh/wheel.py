"""The wheel and the pinned requirements that a node installs.

Why build from a copy: ``pip wheel`` on a source tree writes ``build/`` and ``*.egg-info`` into
it. The packages named in ``pyproject.toml`` are copied to a temp dir and built there, so the
operator's checkout is left as it was and the wheel holds exactly what was on disk at that moment.
"""
from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

__all__ = ["WheelBuildError", "build_wheel", "expected_wheel_name", "project_root"]


class WheelBuildError(RuntimeError):
    """pip could not build the wheel; carries the tail of its output."""


def project_root() -> Path | None:
    """The source checkout this ``bke`` runs from (the directory holding pyproject.toml), if any."""
    import bke

    here = Path(bke.__file__).resolve()
    for parent in here.parents:
        if (parent / "pyproject.toml").is_file() and (parent / "requirements.txt").is_file():
            return parent
    return None


def expected_wheel_name() -> str:
    """What :func:`build_wheel` will produce, for a dry run that builds nothing."""
    return f"bke-{importlib.metadata.version('bke')}-py3-none-any.whl"


def build_wheel(root: Path, work_dir: Path, timeout_s: float = 600.0) -> Path:
    """``pip wheel --no-deps`` of a copy of ``root``; returns the wheel's path inside ``work_dir``."""
    config = tomllib.loads((root / "pyproject.toml").read_text())
    where = config.get("tool", {}).get("setuptools", {}).get("packages", {}).get("find", {}).get("where", ["."])
    src = work_dir / "src"
    src.mkdir(parents=True)
    shutil.copy2(root / "pyproject.toml", src / "pyproject.toml")
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".*")
    for folder in where:
        if folder != "." and (root / folder).is_dir():
            shutil.copytree(root / folder, src / folder, ignore=skip)
    out = work_dir / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(src)]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise WheelBuildError(f"pip wheel did not finish in {timeout_s:g}s") from None
    wheels = sorted(out.glob("*.whl")) if out.is_dir() else []
    if done.returncode != 0 or len(wheels) != 1:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise WheelBuildError("pip wheel failed: " + (" | ".join(tail) or f"exit {done.returncode}"))
    return wheels[0]
