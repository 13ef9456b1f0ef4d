"""The upgrade's certificate renewal adapter (bke_upgrader.certs) on a real Redis: the
certificates step asks the certs service once per upgrade and waits, the answer moves it on,
a node's renewed files come from its sealed set, and a failure is never hidden by the
`certs renewed` that follows it."""
from __future__ import annotations

import base64
import hashlib

import pytest

from bke.contracts.certs import RENEW_CERTS, CertsFailed, CertsRenewed, RenewCerts, RenewedCertificate
from bke.core.errors import TemporaryError
from bke.core.pki import node_file_refs
from bke.core.state.nodefiles import NodeFile
from bke.adapters.state.nodefiles import RedisNodeFiles
from bke.core.upgrade import Change, expand_order
from bke.core.upgrade.run import new_run
from bke_upgrader.certs import UpgradeCerts, renewal_id
from bke_upgrader.store import UpgradeStore

from ..unit.upgrade_helpers import SEED, plan_of

pytestmark = pytest.mark.integration
RENEW = Change(kubernetes=True, etcd=False, containerd=False, certificates=True)


def _sealed_set(plan, host: str) -> list[NodeFile]:
    out = []
    for ref in node_file_refs(plan, [host])[host]:
        data = f"{ref.instance}:{ref.part}".encode()
        sha = hashlib.sha256(data).hexdigest()
        blob = base64.b64encode(b"ciphertext" + data).decode()
        out.append(NodeFile(path=ref.path, mode=ref.mode, sha256=sha, sealed_b64=blob) if ref.secret
                   else NodeFile(path=ref.path, mode=ref.mode, sha256=sha, content_b64=base64.b64encode(data).decode()))
    return out


@pytest.fixture
async def setup(redis_client):
    plan = plan_of(SEED)
    run = new_run("u1", plan.cluster, {}, {}, expand_order(plan, RENEW), [n.hostname for n in plan.nodes], "t0")
    store = UpgradeStore(redis_client)
    await store.start(run, lambda cur: "")
    sent: list[tuple[str, bytes, dict[str, str]]] = []
    kicks: list[str] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append((subject, body, headers))

    certs = UpgradeCerts(store, publish, kicks.append)
    yield plan, run, store, certs, sent, kicks


def _step(run):
    return next(s for s in run.steps if s.name == "certificates")


async def test_renewal_is_asked_once_per_upgrade_then_its_files_ride_in_the_node_steps(setup):
    plan, run, store, certs, sent, kicks = setup
    with pytest.raises(TemporaryError):
        await certs.renew(run, _step(run), plan)
    (subject, body, headers), = sent
    ask = RenewCerts.model_validate_json(body)
    assert subject == RENEW_CERTS and ask.origin == "upgrade" and ask.request_id == renewal_id("u1")
    assert "apiserver@master1" in ask.names and not [n for n in ask.names if n.startswith("kubelet.conf")]
    assert headers["Nats-Msg-Id"] == f"renew:{plan.cluster}:{renewal_id('u1')}"  # the same every pass

    # another renewal's answer (the CLI's) is not this upgrade's
    await certs.on_renewed(CertsRenewed(request_id="r9", cluster=plan.cluster, certificates=[], at="t"))
    assert not kicks
    renewed = [RenewedCertificate(name=i.split("@")[0], instance=i, nodes=[i.split("@")[1]], serial="1", not_after="x")
               for i in ask.names]
    await certs.on_renewed(CertsRenewed(request_id=ask.request_id, cluster=plan.cluster, origin="upgrade",
                                        certificates=renewed, at="t"))
    assert kicks == [plan.cluster]
    step = _step(run)
    await certs.renew(run, step, plan)
    assert step.status == "Succeeded"

    await RedisNodeFiles(store.r).put_many(plan.cluster, "certs", {"master2": _sealed_set(plan, "master2")})
    got = await certs.files_for(run, "kube-scheduler", "", ["master2"], plan)
    assert isinstance(got, dict)
    [conf] = got["master2"]
    assert conf.path == "/etc/kubernetes/scheduler.conf" and conf.sealed_b64 and conf.content_b64 is None
    assert await certs.files_for(run, "workers", "", ["node1"], plan) == {}  # a worker step carries none
    why = await certs.files_for(run, "kube-scheduler", "", ["master3"], plan)  # no sealed set stored
    assert isinstance(why, str) and "master3" in why


async def test_a_node_not_resealed_fails_the_step_even_though_certs_renewed_follows(setup):
    plan, run, store, certs, sent, kicks = setup
    rid = renewal_id("u1")
    await certs.on_failed(CertsFailed(request_id=rid, cluster=plan.cluster, node="master2", operation="renewal",
                                      reason="its agent's sealing key is unusable"))
    await certs.on_renewed(CertsRenewed(request_id=rid, cluster=plan.cluster, origin="upgrade", certificates=[], at="t"))
    step = _step(run)
    await certs.renew(run, step, plan)
    assert step.status == "Failed" and "node master2: its agent's sealing key is unusable" in step.message
    assert not sent  # answered before it was asked (a redelivery after a restart): nothing asked again


async def test_the_renewal_names_the_target_release_so_subjects_follow_it(redis_client):
    """Crossing into a release whose kubeadm issues apiserver-kubelet-client without
    kubeadm:cluster-admins (bke.core.pki.subjects): the upgrader's one RenewCerts names that release,
    the certs service re-issues the certificate with its subject (test_certs_renewal), and the
    kube-apiserver step carries it to each master like any renewed file (test above)."""
    plan = plan_of(SEED)
    run = new_run("u2", plan.cluster, {"kubernetes": "v1.36.0"}, {"kubernetes": "v1.37.0"},
                  expand_order(plan, RENEW), [n.hostname for n in plan.nodes], "t0")
    store = UpgradeStore(redis_client)
    await store.start(run, lambda cur: "")
    sent: list[bytes] = []

    async def publish(body: bytes, subject: str, headers: dict[str, str]) -> None:
        sent.append(body)

    with pytest.raises(TemporaryError):
        await UpgradeCerts(store, publish).renew(run, _step(run), plan)
    ask = RenewCerts.model_validate_json(sent[0])
    assert ask.kubernetes_version == "v1.37.0"
    assert {f"apiserver-kubelet-client@master{i}" for i in (1, 2, 3)} <= set(ask.names)
