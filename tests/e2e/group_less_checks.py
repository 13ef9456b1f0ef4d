"""What an upgrade into a release whose kubeadm issues the apiserver's kubelet client
without kubeadm:cluster-admins (1.34 -> 1.35.5, kubernetes#138957 cherry-picked; bke.core.pki.subjects)
re-issues that certificate with the new subject on every master, after the target release's RBAC
(the binding by user name) is applied, and the certs service's own record agrees (an `ensure`
afterwards reissues nothing). Run as the third upgrade of test_lab_upgrade_certs's lab, which
saves an install."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime

from bke.core.pki.material import cert_info

from .test_lab_upgrade import _bke

KUBELET_CLIENT = "etc/kubernetes/pki/apiserver-kubelet-client.crt"


async def crossing_into_a_group_less_release(lab, spec, etcd_version: str) -> None:
    """A lab at 1.34 upgraded to 1.35.5 (etcd staying at `etcd_version`): the checks above."""
    masters = [n.hostname for n in lab.plan.nodes if n.runs("kube-apiserver")]
    before = {h: cert_info((lab.host(h) / KUBELET_CLIENT).read_bytes()) for h in masters}
    assert all(i.o == ("kubeadm:cluster-admins",) for i in before.values())

    # etcd stays (3.5.1 cannot go to 3.6 in one step): only Kubernetes crosses into 1.35.5
    up = await asyncio.to_thread(_bke, "lab", "upgrade", str(spec), "--to", "1.35.5", "--etcd-version", etcd_version,
                                 "--workdir", str(lab.workdir))
    assert up.returncode == 0, up.stdout + up.stderr
    assert "upgrade Succeeded" in up.stdout, up.stdout
    for h in masters:
        after = cert_info((lab.host(h) / KUBELET_CLIENT).read_bytes())
        assert after.o == () and after.cn == "kube-apiserver-kubelet-client", h
        assert after.serial != before[h].serial, h

    from redis import Redis

    from bke.adapters.state.keys.dispatcher import addons_key
    from bke.adapters.state.keys.upgrader import upgrade_key

    r = Redis.from_url(lab.info.redis_url, decode_responses=True)
    rbac = json.loads(r.hget(addons_key(lab.plan.cluster), "rbac"))
    assert rbac["version"] == "1.35.5" and rbac["objects"] == 2  # the group binding and the user binding
    run = json.loads(r.get(upgrade_key(lab.plan.cluster)))
    api = next(s for s in run["steps"] if s["name"] == "kube-apiserver")
    # applied in the certificates step, before the first apiserver got the group-less certificate
    assert datetime.fromisoformat(rbac["at"]).timestamp() < api["sent_at"], (rbac["at"], api["sent_at"])
