"""End to end: an upgrade renews certificates as kubeadm does, unless told not to (real NATS,
Redis and etcd; every service and agent a process).

One lab install of the seed example (three stacked masters, one worker), upgraded twice:
1. `--no-certificate-renewal`, 1.33.2 -> 1.33.3: every certificate file on every node is
   byte for byte the one the install wrote, and the certs service renewed nothing;
2. the default, 1.33.3 -> 1.34.1 with etcd 3.5.1 -> 3.5.2: on every node, each certificate of a
   component the upgrade replaced (kubeadm's list, bke.core.upgrade.certificates) has a new serial
   and a later notAfter, its key changed, and the certs service's read model
   (`bke certs check-expiration --cluster`) shows the same notAfter; the files the upgrade
   does not renew (CAs, kubelet.conf) are unchanged; no command ran twice;
3. 1.34.1 -> 1.35.5 on the same lab: the apiserver's kubelet client re-issued without
   kubeadm:cluster-admins after the target's RBAC (group_less_checks.py).
"""
from __future__ import annotations

import asyncio
from datetime import datetime

import pytest

from bke.core.pki import node_file_refs
from bke.core.pki.kubeconfig import embedded_material
from bke.core.pki.material import cert_info
from bke.core.upgrade import Change, expand_order
from bke.core.upgrade.certificates import renewed_instances

from .test_lab_install import SEED, assert_ran_once
from .test_lab_upgrade import _bke, _spec_copy
from .group_less_checks import crossing_into_a_group_less_release

# an install and three upgrades; the CI budget (30 minutes): run by `python3 dev.py full`; the
# renewal's adapter on real Redis: tests/integration/test_upgrader_certs.py
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1200)]


def _cert_files(lab) -> dict[tuple[str, str], tuple[str, bytes]]:
    """(host, path) -> (instance, bytes) of every certificate file the certs service gives a node."""
    out = {}
    for host, refs in node_file_refs(lab.plan).items():
        for ref in refs:
            out[(host, ref.path)] = (ref.instance, (lab.host(host) / ref.path.lstrip("/")).read_bytes())
    return out


def _cert_of(path: str, data: bytes) -> tuple[int, datetime] | None:
    """(serial, notAfter) of a certificate file or a kubeconfig's embedded client cert; None for keys."""
    if path.endswith(".conf"):
        m = embedded_material(data)
        assert m is not None, path
        data = m.cert
    elif not path.endswith(".crt"):
        return None
    info = cert_info(data)
    return info.serial, info.not_after


async def _expiry(lab) -> dict[str, datetime]:
    """instance -> notAfter, as the certs service answers `bke certs check-expiration --cluster`."""
    from bke_cli.certs_cmd import expiration_over_bus

    rows = await expiration_over_bus(lab.sup.operator_access(lab.info), lab.plan.cluster)
    return {r.instance: r.not_after for r in rows}


async def test_an_upgrade_renews_each_upgraded_components_certificates_unless_told_not_to(lab_factory, tmp_path):
    spec = _spec_copy(tmp_path, SEED, "127.0.10.", "127.0.97.")
    lab = lab_factory(str(spec))
    assert await lab.install() == 0, lab.out.getvalue()
    workdir = str(lab.workdir)
    installed = _cert_files(lab)
    expiry_before = await _expiry(lab)

    # 1. renewal off: the control plane is replaced, no certificate changes anywhere
    off = await asyncio.to_thread(_bke, "lab", "upgrade", str(spec), "--to", "1.33.3", "--etcd-version", "3.5.1",
                                  "--no-certificate-renewal", "--workdir", workdir)
    assert off.returncode == 0, off.stdout + off.stderr
    api = (lab.host("master1") / "etc/kubernetes/manifests/kube-apiserver.yaml").read_text()
    assert "v1.33.3" in api  # the upgrade did run
    assert _cert_files(lab) == installed
    assert await _expiry(lab) == expiry_before

    # 2. renewal on (the default): each replaced component's certificates are new on its node
    on = await asyncio.to_thread(_bke, "lab", "upgrade", str(spec), "--to", "1.34.1", "--etcd-version", "3.5.2",
                                 "--workdir", workdir)
    assert on.returncode == 0, on.stdout + on.stderr
    renewed = set(renewed_instances(lab.plan, expand_order(
        lab.plan, Change(kubernetes=True, etcd=True, containerd=False, certificates=True))))
    assert any(i.startswith("etcd-data-peer@") for i in renewed) and "admin.conf@master2" in renewed
    after = _cert_files(lab)
    expiry_after = await _expiry(lab)
    checked = 0
    for (host, path), (instance, old) in installed.items():
        new = after[(host, path)][1]
        if instance not in renewed:
            assert new == old, (host, path, "not renewed by the upgrade, yet changed")
            continue
        assert new != old, (host, path, "renewed, yet the node holds the old file")
        before_cert, after_cert = _cert_of(path, old), _cert_of(path, new)
        if before_cert is None:
            continue  # a key: new bytes (checked above) with the new certificate
        assert after_cert is not None
        assert after_cert[0] != before_cert[0] and after_cert[1] > before_cert[1], (host, path)
        assert expiry_after[instance] == after_cert[1], (host, path)
        checked += 1
    # every renewed instance was checked on some node (3 masters x 10 certificates here)
    assert checked >= len(renewed)
    assert {i for i in expiry_after if expiry_after[i] != expiry_before[i]} == renewed
    assert_ran_once(lab)

    # 3. into 1.35.5, whose kubeadm issues the kubelet client without the group
    await crossing_into_a_group_less_release(lab, spec, "3.5.2")
