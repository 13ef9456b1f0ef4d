"""State loss: Redis emptied (FLUSHALL) mid-install is detected and reported, no node gets a
new CA, and a restore of a backup taken before the loss finishes the install with the same CA.

The install is held mid-way by stopping one agent after the certificates are on the nodes: the
loss then always happens while the install runs, whatever the machine's speed."""
from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bke.adapters.bus.connect import connect_nats
from bke.contracts.install import InstallFinished, install_subject
from bke.core.secrets.fingerprint import cert_fingerprint, held_ca_fingerprint
from bke.adapters.state.epoch import STATE_LOST
from bke.adapters.state.keys.common import epoch_key
from bke.adapters.state.keys.certs import pki_key
from bke_cli.main import main as bke
from bke_cli.status_client import StatusUnavailable, get_status

from ..e2e.lab_helpers import Lab
from ..e2e.test_lab_install import SEED, assert_ran_once

pytestmark = pytest.mark.e2e
HELD = "node1"  # the worker: its agent is stopped to keep the install running


@pytest.fixture
def lab(tmp_path: Path):
    """A lab of the seed spec on 127.0.87.x (labs of other suites on this machine use the seed's
    own addresses), always taken down by PID."""
    spec = tmp_path / "seed-state-loss.yaml"
    spec.write_text(Path(SEED).read_text().replace("127.0.10.", "127.0.87."))
    lab = Lab(tmp_path / "lab", spec).start()
    yield lab
    lab.down()


async def test_flushall_mid_install_is_reported_and_a_restore_finishes_with_the_same_ca(lab: Lab, tmp_path, capsys) -> None:
    cluster, hosts = lab.plan.cluster, [n.hostname for n in lab.plan.nodes]
    install = asyncio.create_task(lab.install(timeout=240))
    await lab.wait_status(lambda d: lab.phase(d, "certs")["status"] == "Succeeded", 120, "the certs phase")
    assert lab.sup.stop_agent(HELD)
    held = {h: held_ca_fingerprint(lab.host(h)) for h in hosts}
    assert None not in held.values() and len(set(held.values())) == 1, held
    ca = next(iter(held.values()))

    backup = tmp_path / "state.bke"
    args = ["--workdir", str(lab.workdir)]
    assert await asyncio.to_thread(bke, ["state", "backup", str(backup), *args]) == 0
    assert b"BEGIN CERTIFICATE" not in backup.read_bytes()  # encrypted

    nc = await connect_nats(lab.access)  # the operator (NATS with authentication)
    admin = Redis.from_url(lab.info.redis_url)
    try:
        finished = await nc.subscribe(install_subject(cluster, "finished"))
        await admin.flushall()  # the state is lost mid-install
        started = time.monotonic()

        # detected and reported: the install fails with "state lost", kind operational
        ev = InstallFinished.model_validate_json((await finished.next_msg(timeout=30)).data)
        assert ev.status == "Failed" and ev.kind == "operational" and ev.message.startswith(STATE_LOST), ev
        assert ev.nodes_changed  # the planner must never take the name for a fresh plan
        assert time.monotonic() - started < 15
        code = await asyncio.wait_for(install, 60)
        assert code == 1 and STATE_LOST in capsys.readouterr().err  # the follower's ERROR line
        with pytest.raises(StatusUnavailable, match="state lost"):
            await get_status(nc, cluster)
        # nothing started over: no CA was made, and the epoch was not rewritten by a running service
        assert not await admin.exists(pki_key(cluster, "manifest"), epoch_key())
        assert {h: held_ca_fingerprint(lab.host(h)) for h in hosts} == held

        # a restore of the backup: the services go on, the held agent comes back, the install finishes
        # --force: the dispatcher's heartbeat records may have come back since the loss
        assert await asyncio.to_thread(bke, ["state", "restore", str(backup), "--force", *args]) == 0
        doc = await lab.wait_status(lambda d: True, 30, "the dispatcher to read the restored state")
        assert doc["status"] == "Running", doc  # the lost install goes on: it is not started over
        lab.sup.ensure_agents(lab.info, lab.plan, only=[HELD])
        code = await lab.install(timeout=180, submit=False)
        assert code == 0, lab.out.getvalue()

        # the same CA everywhere: on every node and in the store
        assert {h: held_ca_fingerprint(lab.host(h)) for h in hosts} == held
        stored = await admin.hget(pki_key(cluster, "certs"), "ca")
        assert stored is not None and cert_fingerprint(stored) == ca
        assert_ran_once(lab)
    finally:
        await admin.aclose()
        await nc.close()


async def test_starting_over_after_a_loss_never_gives_the_nodes_a_new_ca(lab: Lab, capsys) -> None:
    """No backup: the operator restarts everything on the empty store and installs again. The new
    PKI's CA differs from the one the nodes hold, so the install fails on it, naming both."""
    cluster, hosts = lab.plan.cluster, [n.hostname for n in lab.plan.nodes]
    install = asyncio.create_task(lab.install(timeout=240))
    await lab.wait_status(lambda d: lab.phase(d, "certs")["status"] == "Succeeded", 120, "the certs phase")
    assert lab.sup.stop_agent(HELD)
    held = {h: held_ca_fingerprint(lab.host(h)) for h in hosts}
    admin = Redis.from_url(lab.info.redis_url)
    try:
        await admin.flushall()
        assert await asyncio.wait_for(install, 60) == 1
        # starting over: the operator initialises the empty store (a service started on a store
        # without an epoch waits for this, not ready, since it cannot tell new from lost) and
        # restarts everything on it; the services adopt the new epoch
        assert await asyncio.to_thread(bke, ["state", "init", "--workdir", str(lab.workdir)]) == 0
        for name in list(lab.sup.pids()["services"]):
            assert lab.sup.stop_service(name)
        lab.sup.stop_agents(hosts)
        lab.start()
        capsys.readouterr()
        code = await lab.install(timeout=120)
        err = capsys.readouterr().err
        assert code == 1, lab.out.getvalue()
        assert "holds CA sha256:" in err and "the state was lost or replaced; restore a backup" in err, err
        new_ca = await admin.hget(pki_key(cluster, "certs"), "ca")
        assert new_ca is not None and cert_fingerprint(new_ca) not in held.values()  # a new CA was made...
        assert {h: held_ca_fingerprint(lab.host(h)) for h in hosts} == held  # ...and reached no node
        assert_ran_once(lab)
    finally:
        await admin.aclose()
