"""End to end: two processes of every service against one NATS and
one Redis split the work of an install and never run a step twice, even when one dispatcher
is killed mid-install; and replacing each service's process one at a time while an install
runs finishes it with nothing run twice.

"Took work" is each process's own count of the messages it handled (replica_helpers
`handled_per_replica`, why it is honest: there). "Ran twice" is read where each service leaves
its trace: the agents' journals (a command executed), the dispatcher's phase and install events
(a phase decided), the planner's `plan.created` (a plan decided), the certs' `certs.issued`
and the PKI's save counter (a certificate issued), the renderer's own "stored" log line (a
render stored), and one answer per request for the requests sent here."""
from __future__ import annotations

import asyncio
import os
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bke.adapters.auth.permissions import identity_name, inbox_prefix
from bke.adapters.bus.connect import BusAccess, connect_nats
from bke.contracts.base import schema_headers
from bke.contracts.certs import CERTS_ISSUED, ISSUE_CERTS, IssueCerts
from bke.contracts.cluster import InstallCluster
from bke.contracts.install import install_subject
from bke.contracts.render import MANIFESTS_RENDERED, RENDER_MANIFESTS, RenderManifests
from bke.contracts.subjects import CLUSTER_REJECTED, INSTALL_CLUSTER, PLAN_CREATED
from bke.contracts.upgrade import UPGRADE_CLUSTER, UPGRADE_REJECTED, UpgradeCluster
from bke.lab.identities import creds_path
from bke.lab.replicas import ensure_replicas, replica_keys
from bke.lab.supervisor import SERVICES
from bke.adapters.runtime.processes import pid_alive, poll_until

from .event_reader import events_reader_access
from .lab_helpers import Lab
from .replica_helpers import answer_of, handled_per_replica, stream_events
from .test_lab_install import SEED, assert_ran_once

pytestmark = pytest.mark.e2e
# Rounds of requests sent one after another to each service after the install: at least the
# first, until every replica has taken work, the second at most. A pull consumer hands a lone
# message to whichever replica's fetch is first in line, and a fetch stays first until it expires,
# so a few requests in a row may all go to one replica.
ROUNDS = (4, 24)
WORKED_HERE = ("planner", "renderer", "certs", "upgrader")  # the services those rounds send work to


@pytest.fixture
def replica_lab(tmp_path):
    labs: list[Lab] = []

    def make(spec: str, replicas: int) -> Lab:
        lab = Lab(tmp_path / f"lab{len(labs)}", Path(spec))
        labs.append(lab)  # its NATS and Redis run from here on: always taken down
        ensure_replicas(lab.sup, lab.info, replicas)
        lab.sup.ensure_agents(lab.info, lab.plan)
        return lab

    yield make
    for lab in labs:
        lab.down()


def _pids(lab: Lab, service: str) -> dict[str, int]:
    services = lab.sup.pids()["services"]
    return {k: services[k] for k in replica_keys(service, services)}


def _access(lab: Lab, role: str) -> BusAccess:
    """A service's identity: the test stands in for it (the dispatcher's `bke retry` path)."""
    name = identity_name(role)
    return BusAccess(lab.info.nats_url, creds_path(lab.sup.workdir, name), inbox_prefix(name))


async def _lease_holders(lab: Lab) -> set[str]:
    redis = Redis.from_url(lab.info.redis_url)
    try:
        keys = [k async for k in redis.scan_iter(match=f"bke:{lab.plan.cluster}:lease:*")]
        return {v.decode() for v in await redis.mget(keys) if v is not None} if keys else set()
    finally:
        await redis.aclose()


async def _more_work_for_every_service(lab: Lab, nc) -> int:
    """Rounds (ROUNDS) of a request to each of the planner, renderer, certs and upgrader, one after another
    (each waits for its answer), after the install: each is real work for the service (a plan
    refused, a render, a PKI ensure, an upgrade refused) whose answer can be counted. The rounds sent."""
    c = lab.plan.cluster
    op, disp = await connect_nats(lab.access), await connect_nats(_access(lab, "dispatcher"))
    events = await connect_nats(events_reader_access(lab))
    try:
        for rounds in range(1, ROUNDS[1] + 1):
            rid = str(uuid.uuid4())
            await op.jetstream().publish(INSTALL_CLUSTER, InstallCluster(request_id=rid, spec="kind: nothing\n").to_bytes(),
                                         headers=schema_headers())
            await answer_of(events, CLUSTER_REJECTED, rid)
            rid = f"render-{uuid.uuid4()}"
            await disp.jetstream().publish(RENDER_MANIFESTS, RenderManifests(request_id=rid, cluster=c).to_bytes(),
                                           headers=schema_headers())
            await answer_of(events, MANIFESTS_RENDERED, rid)
            rid = f"issue-{uuid.uuid4()}"
            await disp.jetstream().publish(ISSUE_CERTS, IssueCerts(request_id=rid, cluster=c).to_bytes(),
                                           headers=schema_headers())
            await answer_of(events, CERTS_ISSUED, rid)
            rid = f"up-{uuid.uuid4()}"
            # two minors ahead: the skew policy refuses it (kubeadm's rule), nothing starts
            req = UpgradeCluster(request_id=rid, cluster=c, kubernetes_version="1.35.0")
            await op.jetstream().publish(UPGRADE_CLUSTER, req.to_bytes(), headers=schema_headers())
            await answer_of(events, UPGRADE_REJECTED, rid)
            if rounds >= ROUNDS[0] and await _every_replica_took_work(lab, nc, WORKED_HERE):
                break
        return rounds
    finally:
        await op.close()
        await disp.close()
        await events.close()


async def _every_replica_took_work(lab: Lab, nc, services: tuple[str, ...]) -> bool:
    for service in services:
        handled = await handled_per_replica(nc, service, _pids(lab, service))
        if not all(sum(h.values()) for h in handled.values()):
            return False
    return True


async def _assert_decided_once(lab: Lab, events) -> str:
    """The dispatcher announced each phase change and the install's end once; the request id."""
    c = lab.plan.cluster
    phases = await stream_events(events, install_subject(c, "phase"))
    twice = {k: n for k, n in Counter((e["phase"], e["status"]) for e in phases).items() if n > 1}
    assert phases and not twice, f"phase changes announced more than once: {twice}"
    finished = await stream_events(events, install_subject(c, "finished"))
    assert [(e["status"], e["requestId"]) for e in finished] == [("Succeeded", phases[0]["requestId"])]
    return phases[0]["requestId"]


# replicas taking work once, without a lab: tests/integration/test_dispatcher_replicas_once.py
async def test_two_replicas_of_every_service_split_the_work_and_run_nothing_twice(replica_lab):
    lab = replica_lab(SEED, 2)
    c = lab.plan.cluster
    assert all(len(_pids(lab, s)) == 2 for s in SERVICES), lab.sup.pids()
    install = asyncio.create_task(lab.install())
    nc = await connect_nats(lab.access)  # the operator's: health requests
    events = await connect_nats(events_reader_access(lab))  # the stream's events, replayed
    try:
        # both dispatchers take agents' results from the first phases on; once each has, and
        # while the install still runs, the one driving a phase (holding its lease) is killed
        dispatchers = _pids(lab, "dispatcher")

        async def both_took_results() -> dict[str, dict[str, int]] | None:
            seen = await handled_per_replica(nc, "dispatcher", dispatchers)
            return seen if all(sum(h.values()) for h in seen.values()) else None

        before, deadline = None, time.monotonic() + 120
        while before is None and not install.done() and time.monotonic() < deadline:
            before = await both_took_results()  # each round waits for the replicas' answers
        assert before, "the two dispatchers did not both take work before the install ended"
        doc = await lab.status()
        assert doc and doc["status"] == "Running", "the install ended before a dispatcher could be killed"
        holders = await _lease_holders(lab)
        victim = next((k for k, pid in dispatchers.items() if any(h.endswith(f":{pid}") for h in holders)), "dispatcher")
        pid = dispatchers[victim]
        os.kill(pid, signal.SIGKILL)
        poll_until(lambda: True if not pid_alive(pid) else None, timeout=10, what="the dispatcher replica to die")

        assert await install == 0, lab.out.getvalue()  # the other replica finished it
        rounds = await _more_work_for_every_service(lab, nc)

        # every replica of every service took work (the killed dispatcher: before it died)
        for service in SERVICES:
            alive = {k: p for k, p in _pids(lab, service).items() if pid_alive(p)}
            handled = await handled_per_replica(nc, service, alive)
            if service == "dispatcher":
                handled[victim] = before[victim]
            idle = [k for k, h in handled.items() if not sum(h.values())]
            assert len(handled) == 2 and not idle, f"{service}: replicas without work: {idle} ({handled})"

        # nothing ran twice
        assert_ran_once(lab)  # no command executed twice on any node (the agents' journals)
        rid = await _assert_decided_once(lab, events)
        plans = [e for e in await stream_events(events, PLAN_CREATED) if e["cluster"] == c]
        assert [e["requestId"] for e in plans] == [rid]  # the plan decided once
        issued = await stream_events(events, CERTS_ISSUED)
        assert len(issued) == 1 + rounds and len({e["requestId"] for e in issued}) == 1 + rounds
        certs = Counter(name for e in issued for name in e["issued"])
        assert certs and max(certs.values()) == 1, f"certificates issued more than once: {certs}"
        redis = Redis.from_url(lab.info.redis_url)
        try:
            # the PKI's save counter: one save made it; every later ensure reused it unchanged
            assert await redis.get(f"bke:{c}:pki:version") == b"1"
        finally:
            await redis.aclose()
        rendered = await stream_events(events, MANIFESTS_RENDERED)
        assert len(rendered) == 1 + rounds and len({e["digest"] for e in rendered}) == 1
        stored = [line for k in _pids(lab, "renderer")
                  for line in (lab.workdir / "logs" / f"{k}.log").read_text().splitlines() if '"stored ' in line]
        assert len(stored) == 1, stored  # one render stored; the others found it unchanged
        for subject in (CLUSTER_REJECTED, UPGRADE_REJECTED):
            answers = Counter(e["requestId"] for e in await stream_events(events, subject))
            assert len(answers) == rounds and set(answers.values()) == {1}, (subject, answers)
    finally:
        await nc.close()
        await events.close()
        if not install.done():
            install.cancel()


async def test_each_service_replaced_one_at_a_time_during_an_install(lab_factory):
    """A rolling replacement, one process per service: each old process is stopped (SIGTERM, as
    a deployment does) and a new one started, each at a later phase of the same install. Both
    processes run this code: the new version reading the previous one's data is
    tests/e2e/test_lab_previous_schema.py."""
    lab = lab_factory(SEED)
    install = asyncio.create_task(lab.install())
    try:
        first = await lab.wait_status(lambda d: bool(d.get("phases")), 120, "the install's phases")
        names = [p["name"] for p in first["phases"]]
        for service, phase in zip(SERVICES, names[1:]):
            await lab.wait_status(lambda d, p=phase: lab.phase(d, p)["status"] != "Pending", 180, f"phase {phase}")
            old = lab.sup.pids()["services"][service]
            assert lab.sup.stop_service(service)
            new = lab.sup.ensure_services(lab.info, only=(service,))[service]
            assert new != old and not pid_alive(old)
        assert await install == 0, lab.out.getvalue()
        assert_ran_once(lab)
        events = await connect_nats(events_reader_access(lab))
        try:
            await _assert_decided_once(lab, events)
        finally:
            await events.close()
    finally:
        if not install.done():
            install.cancel()
