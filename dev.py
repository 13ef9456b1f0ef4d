#!/usr/bin/env python3
"""One entry for a fresh machine: create the venv, install the pinned set, then run a job.

    python3 dev.py lab     # set up, then a lab install of examples/seed-3m1w.yaml
                           # (`python3 dev.py lab SPEC WORKDIR --control-plane real`: the real components)
    python3 dev.py kube    # set up, then build (once, with Go) and cache the real Kubernetes,
                           # etcd and kwok binaries a `--control-plane real` lab runs
    python3 dev.py test    # set up, then the lints, then the CI suite (what .ci/run calls)
    python3 dev.py lint    # set up, then the lints only
    python3 dev.py soak    # set up, then the soaks only (`-m soak`: every service killed at every
                           # point of an install, each in an install of its own; outages past the
                           # reconnect limits)
    python3 dev.py full    # set up, then the lints, then every test: the CI suite plus the soaks
                           # and the long fuzzing budget (BKE_FUZZ=long)

Only the standard library is used here, since nothing else exists before the venv does.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
PY = VENV / "bin" / "python"
STAMP = VENV / ".bke-installed"
# What `ruff` checks: every Python tree of the project (rules in pyproject.toml).
LINT_PATHS = ("libs", "services", "agent", "cli", "tests", "bench", "dev.py")
# The lints, run side by side; each must pass before pytest runs (configs in pyproject.toml).
LINTS = (
    ("import contracts", ["lint-imports", "--no-logo", "--cache-dir", str(VENV / ".import_linter_cache")]),
    ("ruff", ["ruff", "check", "--quiet", *LINT_PATHS]),
    ("mypy libs/", ["mypy"]),
    # The docs site: a broken link, a missing anchor or a page outside the nav fails (mkdocs.yml).
    ("docs site", ["mkdocs", "build", "--strict", "--quiet"]),
)


# The installer of the pinned set, itself pinned; pip installs it (and takes over if it cannot).
UV = "uv==0.13.9"


def _digest() -> str:
    h = hashlib.sha256()
    h.update(UV.encode())
    for name in ("requirements.txt", "requirements-lock.txt", "pyproject.toml"):
        h.update((ROOT / name).read_bytes())
    return h.hexdigest()


def ensure_venv() -> None:
    """Create .venv and install requirements + the project, unless already done for these pins."""
    if sys.version_info[:2] != (3, 11):
        sys.exit(f"ERROR BKE needs Python 3.11, this is {sys.version.split()[0]}")
    if not PY.exists():
        subprocess.check_call([sys.executable, "-m", "venv", str(VENV)])
    digest = _digest()
    if STAMP.exists() and STAMP.read_text() == digest:
        return
    pip = [str(PY), "-m", "pip", "--disable-pip-version-check", "-q"]
    # uv installs the same pins about ten times faster than pip (measured here: 16 s against
    # 159 s on a fresh venv), which a fresh clone's CI pays every time. uv reads no pip.conf: where
    # only pip reaches the index, pip does the whole install.
    uv = [str(VENV / "bin" / "uv"), "pip", "install", "--quiet", "--python", str(PY)]
    for installer in (uv, [*pip, "install"]):
        if installer is uv and subprocess.call([*pip, "install", UV]) != 0:
            continue
        if (subprocess.call([*installer, "-r", str(ROOT / "requirements.txt")]) == 0
                and subprocess.call([*installer, "--no-deps", "-e", str(ROOT)]) == 0):
            STAMP.write_text(digest)
            return
        print(f"setup: installing with {'uv' if installer is uv else 'pip'} failed", file=sys.stderr, flush=True)
    sys.exit("ERROR the pinned set could not be installed (see the lines above)")


def test_workers() -> list[str]:
    """pytest-xdist's options for two workers on two cores, when this host lets a worker take a
    network namespace of its own (tests/workers.py says why it needs one); none otherwise, and
    the suite runs in one process. BKE_TEST_WORKERS=1 asks for one process."""
    if os.environ.get("BKE_TEST_WORKERS", "2") == "1":
        return []
    try:
        isolated = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        isolated = False
    if not isolated:
        print("test: one process (this host gives no network namespace to a second worker)", flush=True)
        return []
    return ["-n", "2", "--dist", "loadscope", "--no-loadscope-reorder"]


def run_lints(env: dict[str, str]) -> int:
    """Run every lint at once (each is one process; together they take the time of mypy alone),
    and report all of them, so one run shows every finding; non-zero if any failed."""
    import tempfile

    running = []
    for name, cmd in LINTS:
        out = tempfile.TemporaryFile()
        running.append((name, out, subprocess.Popen([str(VENV / "bin" / cmd[0]), *cmd[1:]], env=env, cwd=ROOT,
                                                    stdout=out, stderr=subprocess.STDOUT)))
    failed = []
    for name, out, proc in running:
        code = proc.wait()
        out.seek(0)
        print(f"lint: {name}{'' if code == 0 else ' FAILED'}", flush=True)
        sys.stdout.buffer.write(out.read())
        sys.stdout.flush()
        if code != 0:
            failed.append(name)
    if failed:
        print(f"ERROR lint failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str]) -> int:
    job = argv[0] if argv else "help"
    rest = argv[1:]
    if job not in {"lab", "test", "lint", "setup", "bench", "full", "kube", "soak"}:
        print(__doc__)
        return 2
    ensure_venv()
    env = dict(os.environ)
    env["PATH"] = f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    if job == "setup":
        return 0
    if job in {"test", "lint", "full"}:
        lint_status = run_lints(env)
        if job == "lint" or lint_status != 0:
            return lint_status
        if job == "full":
            env["BKE_FUZZ"] = "long"
            cmd = [str(PY), "-m", "pytest", "-q", *rest]
        else:
            # The CI tier: unit, contract, integration, end-to-end and faults; the soaks are separate.
            cmd = [str(PY), "-m", "pytest", "-q", "-m", "not soak", "--durations=40", *test_workers(), *rest]
    elif job == "soak":
        cmd = [str(PY), "-m", "pytest", "-q", "-m", "soak", "--durations=0", *rest]
    elif job == "kube":
        cmd = [str(PY), "-m", "bke.lab.kube_binaries", "build", *rest]
    elif job == "bench":
        cmd = [str(PY), str(ROOT / "bench" / "all.py"), *rest]
    else:
        spec = rest[0] if rest else str(ROOT / "examples" / "seed-3m1w.yaml")
        workdir = rest[1] if len(rest) > 1 else str(ROOT / ".lab")
        cmd = [str(VENV / "bin" / "bke"), "lab", "install", spec, "--workdir", workdir, *rest[2:]]
        code = subprocess.call(cmd, env=env, cwd=ROOT)
        if "--control-plane" not in rest:
            print("the Kubernetes components were simulated; for real ones: `python3 dev.py kube` (Go 1.26), then "
                  "`python3 dev.py lab SPEC WORKDIR --control-plane real` (docs/real-control-plane.md)", flush=True)
        return code
    return subprocess.call(cmd, env=env, cwd=ROOT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
