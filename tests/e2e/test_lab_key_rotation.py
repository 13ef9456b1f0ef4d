"""End to end: every at-rest kind rotated and retired under a running lab, no process restarted
(bke.core.secrets.key_kinds: a service reads its key file again when it changes).

Each service is given the files of its kinds only, and each agent none, read from the processes'
own environment in a lab whose processes are fresh interpreters (`BKE_LAB_FORKSERVER=0`, as hosts
start them): a forked process's /proc/<pid>/environ shows the fork server's start, not what it
was given (tests/integration/test_lab_forkserver.py proves a forked one gets exactly that).
After `bke keys rotate KIND --workdir` for every kind kept in Redis, a certificate renewal runs
through the certs service (the CA keys re-encrypted under the new `pki` key, the kubeconfigs
written under the new `api` key) and the dispatcher (commands signed with the key it holds);
after `bke keys retire`, the same again with the new keys alone, the identity registry opens
the NATS authority, and the lab's runtime starts again on its re-encrypted authority file."""
from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bke.lab.forkserver import ENABLE_ENV
from bke.lab.key_files import lab_key_file
from bke.adapters.runtime.processes import pid_alive
from bke.core.secrets.at_rest import load_keyring
from bke.core.secrets.key_kinds import KIND_NAMES, SERVICE_KEY_KINDS, key_file_env
from bke.adapters.state.rekey import census

from .test_lab_install import SEED

pytestmark = pytest.mark.e2e  # each kind rotated and retired against the real Redis alone: tests/integration/test_key_rotation.py
IN_REDIS = ("pki", "api", "signing", "snapshot", "authority", "plan", "render")


def _bke(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bke_cli.main", *args], capture_output=True, text=True, timeout=300)


def _key_env(pid: int) -> dict[str, str]:
    """The at-rest key variables a running process was started with."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    pairs = dict(p.decode().split("=", 1) for p in raw if b"=" in p)
    return {k: v for k, v in pairs.items() if k.startswith("BKE_KEY_FILE_") or k == "BKE_SECRET_KEY_FILE"}


async def test_each_process_is_started_with_the_key_files_of_its_kinds_alone(lab_factory, tmp_path, monkeypatch):
    monkeypatch.setenv(ENABLE_ENV, "0")  # fresh interpreters: their /proc environ is what they were given
    spec = tmp_path / "seed-keys.yaml"
    spec.write_text(Path(SEED).read_text().replace("127.0.10.", "127.0.88."))
    lab = lab_factory(str(spec))  # services and agents up, nothing installed
    for name, pid in lab.sup.pids()["services"].items():  # each service holds the files of its kinds, and no other
        assert _key_env(pid) == {key_file_env(k): str(lab_key_file(lab.workdir, k))
                                 for k in SERVICE_KEY_KINDS.get(name, ())}, name
    assert lab.sup.pids()["agents"]
    for host, pid in lab.sup.pids()["agents"].items():
        assert _key_env(pid) == {}, host  # an agent holds none


async def test_every_kind_rotates_and_retires_under_a_running_lab(lab_factory, tmp_path):
    spec = tmp_path / "seed-keys.yaml"
    spec.write_text(Path(SEED).read_text().replace("127.0.10.", "127.0.89."))
    lab = lab_factory(str(spec))
    assert await lab.install() == 0, lab.out.getvalue()
    work, cluster = str(lab.workdir), lab.plan.cluster
    services = dict(lab.sup.pids()["services"])

    async def renew() -> None:
        done = await asyncio.to_thread(_bke, "certs", "renew", "apiserver", "--cluster", cluster, "--workdir", work,
                                       "--timeout", "240")
        assert done.returncode == 0 and "rotation Succeeded" in done.stdout, done.stdout + done.stderr

    old = {kind: load_keyring(lab_key_file(lab.workdir, kind)).current for kind in IN_REDIS}
    for kind in IN_REDIS:
        done = await asyncio.to_thread(_bke, "keys", "rotate", kind, "--workdir", work)
        assert done.returncode == 0, done.stdout + done.stderr
        assert load_keyring(lab_key_file(lab.workdir, kind)).previous == (old[kind],)
    await renew()  # during: every holder has both keys

    for kind in IN_REDIS:
        done = await asyncio.to_thread(_bke, "keys", "retire", kind, "--workdir", work)
        assert done.returncode == 0, done.stdout + done.stderr
        ring = load_keyring(lab_key_file(lab.workdir, kind))
        assert ring.previous == () and ring.current != old[kind]
    r = Redis.from_url(lab.info.redis_url)
    try:
        for kind in IN_REDIS:  # every record under its kind's one key now
            counted = await census(r, kind)
            assert counted.blobs and set(counted.by_key) == {load_keyring(lab_key_file(lab.workdir, kind)).box().key_id}
    finally:
        await r.aclose()
    listed = await asyncio.to_thread(_bke, "keys", "list", "--workdir", work)
    assert listed.returncode == 0 and "record(s)" in listed.stdout, listed.stdout + listed.stderr
    await renew()  # after: the new keys alone
    ids = await asyncio.to_thread(_bke, "identities", "list", "--workdir", work)
    assert ids.returncode == 0 and "dispatcher" in ids.stdout, ids.stdout + ids.stderr
    assert lab.sup.pids()["services"] == services and all(pid_alive(p) for p in services.values())  # no restart
    assert set(KIND_NAMES) - set(IN_REDIS) == {"backup"}
