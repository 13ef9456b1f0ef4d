"""Every validation rule of the spec, each error named by its field path."""
from __future__ import annotations

import pytest

from pathlib import Path

from bke.core.plan import plan_spec_text
from bke.core.spec import MAX_NODES, MAX_SPEC_BYTES
from bke.core.spec.loader import load_spec

from ..spec_helpers import docs_with_roles, to_text

M, N, E = ["master/node", "etcd"], ["node"], ["etcd"]


def errors_of(docs_or_text) -> dict[str, str]:
    text = docs_or_text if isinstance(docs_or_text, (str, bytes)) else to_text(docs_or_text)
    out = plan_spec_text(text, "spec.yaml")
    assert out.plan is None, "expected the spec to be rejected"
    return {e.path: e.message for e in out.errors}


def test_valid_seed_example_has_no_errors():
    out = plan_spec_text(open("examples/seed-3m1w.yaml").read())
    assert out.ok and out.errors == []


def test_unknown_role_names_node_and_role_index():
    docs = docs_with_roles(M, M, M, ["node", "etcd-evnt"])
    errs = errors_of(docs)
    assert errs == {"nodes[3].spec.role[1]": errs["nodes[3].spec.role[1]"]}
    assert "unknown role 'etcd-evnt'" in errs["nodes[3].spec.role[1]"]


@pytest.mark.parametrize("role", ["apiserver", "controller-manager", "scheduler"])
def test_control_plane_role_on_non_master_is_rejected(role):
    errs = errors_of(docs_with_roles(M, M, M, ["node", role]))
    assert "only selects which masters" in errs["nodes[3].spec.role[1]"]


def test_no_master():
    errs = errors_of(docs_with_roles(["etcd"], ["node"], endpoint=("10.0.0.1", 36443)))
    assert "no node has role 'master'" in errs["nodes"]


def test_duplicate_hostname_and_ip_all_reported():
    docs = docs_with_roles(M, M, M, N)
    docs[4]["spec"]["hostname"] = docs[1]["spec"]["hostname"]
    docs[3]["spec"]["ip"] = docs[2]["spec"]["ip"]
    errs = errors_of(docs)
    assert "duplicate hostname 'n0' (also nodes[0])" in errs["nodes[3].spec.hostname"]
    assert "duplicate IP" in errs["nodes[2].spec.ip"] and "nodes[1]" in errs["nodes[2].spec.ip"]


def test_malformed_ip_and_cidr_and_overlap():
    docs = docs_with_roles(M, M, M, N, networking={"serviceSubnet": "10.96.0.0/33", "podSubnet": "10.0.0.0/8"})
    docs[4]["spec"]["ip"] = "10.0.0.300"
    errs = errors_of(docs)
    assert "malformed IP address '10.0.0.300'" in errs["nodes[3].spec.ip"]
    assert "malformed CIDR" in errs["cluster.spec.clusterConfig.cluster.networking.serviceSubnet"]
    docs = docs_with_roles(M, M, M, N, networking={"serviceSubnet": "10.96.0.0/12", "podSubnet": "10.100.0.0/16"})
    assert "overlaps service subnet" in errors_of(docs)["cluster.spec.clusterConfig.cluster.networking.podSubnet"]


@pytest.mark.parametrize(
    "roles,cluster",
    [
        ((M, M, N), "etcd-data"),  # etcd-data falls back to the two masters
        ((M, E, N), "etcd-data"),  # master/node+etcd and one etcd-only node
        ((M, ["etcd-event"], ["etcd-event"]), "etcd-events"),
        ((M, ["etcd-pod"], ["etcd-pod"], ["etcd-pod"], ["etcd-pod"]), "etcd-pods"),
    ],
)
def test_even_etcd_cluster_is_rejected(roles, cluster):
    errs = errors_of(docs_with_roles(*roles))
    assert f"etcd cluster '{cluster}' would have" in errs["nodes"] and "odd number" in errs["nodes"]


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("kubernetesVersion", "v1.30.4", "supported minors are 1.31, 1.32"),
        ("kubernetesVersion", "one.two", "malformed version"),
        ("etcdVersion", "3.4.30", "unsupported etcd version"),
        ("containerdVersion", "1.6.9", "unsupported containerd version"),
    ],
)
def test_versions(field, value, needle):
    errs = errors_of(docs_with_roles(M, **{field: value}))
    assert needle in errs[f"cluster.spec.clusterConfig.cluster.{field}"]


def test_unpaired_etcd_is_a_warning_not_an_error():
    out = plan_spec_text(to_text(docs_with_roles(M, kubernetesVersion="v1.34.1", etcdVersion="3.5.1")))
    assert out.ok and any("upstream pairs it with etcd 3.6.4" in w for w in out.warnings)


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_endpoint_port_out_of_range(port):
    errs = errors_of(docs_with_roles(M, endpoint=("10.1.1.1", port)))
    assert "out of range" in errs["cluster.spec.controlPlaneEndpoint.port"]


def test_endpoint_on_node_must_be_apiserver_port_and_vip_must_not():
    assert "listens on 6443" in errors_of(docs_with_roles(M, endpoint=("127.100.0.1", 8443)))["cluster.spec.controlPlaneEndpoint.port"]
    assert "choose another port" in errors_of(docs_with_roles(M, endpoint=("10.9.9.9", 6443)))["cluster.spec.controlPlaneEndpoint.port"]
    errs = errors_of(docs_with_roles(M, N, M, endpoint=("127.100.0.2", 6443)))
    assert "runs no kube-apiserver" in errs["cluster.spec.controlPlaneEndpoint.host"]


@pytest.mark.parametrize(
    "name,value,needle",
    [
        ("--v", "2", "not a plain flag name"),
        ("bad flag", "1", "not a plain flag name"),
        ("v", "2\n--authorization-mode=AlwaysAllow", "control character"),
        ("v", "a\x00b", "control character"),
        ("v", "tab\there", "control character"),
    ],
)
def test_extra_args_names_and_values(name, value, needle):
    docs = docs_with_roles(M, M, M, N)
    docs[2]["spec"]["apiServer"] = {"extraArgs": {name: value}}
    errs = errors_of(docs)
    assert needle in errs[f"nodes[1].spec.apiServer.extraArgs.{name}"]
    docs = docs_with_roles(M, scheduler={"extraArgs": {name: value}})
    assert needle in errors_of(docs)[f"cluster.spec.clusterConfig.cluster.scheduler.extraArgs.{name}"]


def test_structural_errors_name_the_field():
    docs = docs_with_roles(M, M, M, N)
    docs[0]["spec"]["clusterConfig"]["cluster"]["certificates"] = {"keyAlgorithm": "DSA-1024"}
    docs[3]["spec"]["rolez"] = ["node"]
    errs = errors_of(docs)
    assert "RSA-2048" in errs["cluster.spec.clusterConfig.cluster.certificates.keyAlgorithm"]
    assert errs["nodes[2].spec.rolez"] == "unknown field"


def test_yaml_syntax_error_has_line_and_column():
    errs = errors_of("apiVersion: x\nkind: [unclosed\n")
    (path,) = errs
    assert path.startswith("spec.yaml:") and path.count(":") == 2


def test_wrong_kind_and_missing_cluster():
    errs = errors_of("kind: Pod\n---\n" + to_text(docs_with_roles(M)[1:]))
    assert "unknown kind 'Pod'" in errs["documents[0].kind"]
    assert "no BKECluster" in errs["cluster"]


def test_limits():
    big = b"#" * (MAX_SPEC_BYTES + 1)
    assert "8 MiB" in errors_of(big)["spec.yaml"]
    node = "---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nspec: {}\n"
    assert f"the limit is {MAX_NODES}" in errors_of(node * (MAX_NODES + 1))["nodes"]


def test_all_errors_at_once():
    docs = docs_with_roles(M, M, M, ["node", "etcd-evnt"], ["node", "apiserver"], kubernetesVersion="v1.29.0")
    assert len(errors_of(docs)) >= 3


@pytest.mark.parametrize("name", ["a.b", "Upper", "-x", "x" * 64])
def test_cluster_name_is_a_dns_label(name):
    docs = docs_with_roles(M)
    docs[0]["metadata"]["name"] = name
    assert "DNS-1123 label" in errors_of(docs)["cluster.metadata.name"]


def test_a_field_by_its_python_name_is_an_unknown_field_as_in_the_schema() -> None:
    text = (Path(__file__).resolve().parents[3] / "examples" / "seed-3m1w.yaml").read_text().replace("controlPlaneEndpoint", "control_plane_endpoint")
    paths = {e.path: e.message for e in load_spec(text).errors}
    assert paths.get("cluster.spec.control_plane_endpoint") == "unknown field"
