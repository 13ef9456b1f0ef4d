"""The files a deployment makes beside docker-compose.yml (keys, creds, passwords, the per-deployment
command key) are git-ignored, and none of them is tracked: a `git add deploy` cannot commit one."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MADE_PER_DEPLOYMENT = (
    "deploy/secret.key", "deploy/keys/pki.key", "deploy/keys/authority.key", "deploy/http-token", "deploy/agent.env",
    "deploy/command-key.pub",
    "deploy/nats/auth.conf", "deploy/nats/sys.creds", "deploy/nats/creds/planner.creds",
    "deploy/redis/planner.env", "deploy/redis/admin.env", "deploy/redis/redis-users.json", "deploy/redis/users.acl",
)

pytestmark = pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(),
                                reason="not a git checkout")


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False)


@pytest.mark.parametrize("path", MADE_PER_DEPLOYMENT)
def test_ignored(path: str) -> None:
    assert _git("check-ignore", "--quiet", "--no-index", path).returncode == 0, f"{path} is not git-ignored"


def test_none_is_tracked() -> None:
    tracked = set(_git("ls-files", "deploy").stdout.split())
    secret = {p for p in tracked if p.startswith(("deploy/nats/creds/", "deploy/redis/", "deploy/keys/"))}
    assert not (tracked & set(MADE_PER_DEPLOYMENT)) and not secret, sorted(tracked & set(MADE_PER_DEPLOYMENT) | secret)
