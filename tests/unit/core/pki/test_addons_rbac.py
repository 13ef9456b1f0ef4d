"""Bootstrap RBAC per minor (bke.core.rbac), checked against the identities the PKI table issues."""
from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from bke.core.pki.table import by_name
from bke.core.rbac import BINDINGS, CLUSTER_ADMINS, bindings_for, rbac_objects
from bke.core.versions import KUBERNETES

MINORS = sorted(KUBERNETES, key=lambda m: tuple(int(x) for x in m.split(".")))


@pytest.mark.parametrize("minor", MINORS)
def test_every_minor_binds_cluster_admins_to_cluster_admin(minor: str) -> None:
    crb = next(o for o in rbac_objects(minor) if o["metadata"]["name"] == CLUSTER_ADMINS)
    assert crb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}
    assert crb["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": CLUSTER_ADMINS}]


@pytest.mark.parametrize("version,has", [
    ("1.31.0", False), ("1.34.9", False), ("1.35.4", False), ("1.35.5", True), ("1.36.0", False),
    ("1.36.1", True), ("1.37.0", True), ("1.37", True),
])
def test_kubelet_api_admin_binding_exactly_where_kubeadm_creates_it(version: str, has: bool) -> None:
    """kubernetes#138957 for 1.37 and its cherry-picks (1.36.1, 1.35.5): see bke.core.pki.subjects."""
    names = [b.name for b in bindings_for(version)]
    assert ("kubeadm:apiserver-kubelet-client" in names) == has
    if has:
        crb = next(o for o in rbac_objects(version) if o["metadata"]["name"] == "kubeadm:apiserver-kubelet-client")
        assert crb["roleRef"]["name"] == "system:kubelet-api-admin"
        # bound by user name: the certificate's CN, so it holds whatever its groups become
        assert crb["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": by_name("apiserver-kubelet-client").cn}]


def test_bindings_name_the_identities_the_pki_table_issues() -> None:
    # admin.conf's only group gets its rights here; the apiserver's kubelet client shares it
    assert by_name("admin.conf").o == (CLUSTER_ADMINS,)
    assert CLUSTER_ADMINS in by_name("apiserver-kubelet-client").o  # up to the release that drops it
    issued_cns = {row.cn for row in (by_name("apiserver-kubelet-client"), by_name("admin.conf"))}
    for b in BINDINGS:
        assert b.subject in issued_cns or b.subject == CLUSTER_ADMINS, b
    # super-admin.conf needs none: system:masters bypasses RBAC
    assert by_name("super-admin.conf").o == ("system:masters",)


@pytest.mark.parametrize("minor", MINORS)
def test_objects_are_valid_for_their_minor_and_stable(minor: str) -> None:
    objs = rbac_objects(minor)
    for o in objs:
        kubernetes_validate.validate(o, minor, strict=True)
    # any patch of a minor kubeadm did not change in a patch release gives the same bindings
    # (1.35 and 1.36 gained the kubelet client's binding in 1.35.5 and 1.36.1)
    if minor not in ("1.35", "1.36"):
        assert yaml.safe_dump_all(objs) == yaml.safe_dump_all(rbac_objects(f"{minor}.9"))
    for o in rbac_objects(f"{minor}.9"):
        kubernetes_validate.validate(o, minor, strict=True)


def test_unsupported_minor_is_refused() -> None:
    with pytest.raises(ValueError, match="Kubernetes 1.30 is not in the supported versions table"):
        bindings_for("1.30")
