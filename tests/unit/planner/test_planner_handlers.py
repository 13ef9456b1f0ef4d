"""The planner's handlers as plain functions: no broker, and no store where none is reached."""
from __future__ import annotations

from datetime import datetime, timezone

from bke.contracts import CLUSTER_REJECTED, ClusterRejected, InstallCluster
from bke_planner.handlers import PlannerDeps, handle_install_cluster, refuse_request

BAD_FLAG = open("tests/fixtures/client-cert-auth-false.yaml").read()


async def _no_blob(ref: str) -> bytes:
    raise AssertionError("not reached")


DEPS = PlannerDeps(store=None, fetch_blob=_no_blob, now=lambda: datetime.now(timezone.utc))  # type: ignore[arg-type]


async def test_a_refused_flag_is_rejected_with_its_field_before_anything_is_stored():
    (out,) = await handle_install_cluster(InstallCluster(request_id="r1", spec=BAD_FLAG), DEPS)
    assert out.subject == CLUSTER_REJECTED and out.msg_id == "rejected:r1"
    assert isinstance(out.message, ClusterRejected)
    assert [e.path for e in out.message.errors] == ["cluster.spec.clusterConfig.cluster.etcd.extraArgs.client-cert-auth"]


def test_a_malformed_request_is_answered_with_the_field_not_dead_lettered():
    (out,) = refuse_request(b'{"requestId": "r2", "spec": "x", "specRef": "b/k"}')
    assert out.subject == CLUSTER_REJECTED and out.message.request_id == "r2"
    assert "exactly one of 'spec' and 'specRef'" in out.message.errors[0].message
    (out,) = refuse_request(b"\xff")
    assert out.message.request_id is None and out.msg_id is None
