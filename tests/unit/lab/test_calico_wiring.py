"""Calico wired to the cluster (bke.core.calico), the lab stand-in's shape, the manifest checks and
the readiness rule the dispatcher waits on."""
from __future__ import annotations

import copy
import hashlib

import kubernetes_validate
import pytest
import yaml

import json
import re

from bke.core.calico import BLOCK_SIZE, BLOCK_SIZES, CalicoWiring, calico_image, find_calico_node, wire_calico
from bke.lab.standins.calico_placeholder import lab_calico_manifest, lab_calico_sha256
from bke.core.plan import plan_spec_text
from bke.core.spec.synth import synth_docs
from bke.core.versions import KUBERNETES
from bke.lab.standins.manifests import LabManifests
from bke.adapters.cluster_api.manifests import cni_artefact, verify_manifest


def _objs(version: str = "3.31.3") -> list[dict]:
    return [d for d in yaml.safe_load_all(lab_calico_manifest(version)) if d]


def _env(objs: list[dict]) -> dict[str, str]:
    c = find_calico_node(objs)["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in c["env"]}


def _images(objs: list[dict]) -> list[str]:
    out = []
    for o in objs:
        if o["kind"] in ("DaemonSet", "Deployment"):
            pod = o["spec"]["template"]["spec"]
            out += [c["image"] for c in [*pod.get("initContainers", []), *pod["containers"]]]
    return out


def test_the_wired_block_size_is_the_one_the_plan_time_size_check_counts() -> None:
    from bke.core.spec.sizes import CALICO_BLOCK

    assert CALICO_BLOCK[4] == BLOCK_SIZE
    assert CALICO_BLOCK == BLOCK_SIZES  # IPv6 too: /122


def _ipam(objs: list[dict]) -> dict:
    """The IPAM stanza of the CNI template, once install-cni's placeholders are filled in."""
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "calico-config")
    filled = re.sub(r"__CNI_MTU__", "1440", cm["data"]["cni_network_config"]).replace("__", "")
    return json.loads(filled)["plugins"][0]["ipam"]


V6_ONLY_KEYS = ("IP", "CALICO_ROUTER_ID")
V6_KEYS = ("CALICO_IPV6POOL_CIDR", "CALICO_IPV6POOL_BLOCK_SIZE", "FELIX_IPV6SUPPORT", "IP6")


def test_ipv4_only_keeps_upstreams_ipam_and_sets_no_ipv6_setting() -> None:
    wired = wire_calico(_objs(), CalicoWiring("10.244.0.0/16", "registry.k8s.io"))
    env = _env(wired)
    assert not [k for k in (*V6_KEYS, *V6_ONLY_KEYS) if k in env]
    assert _ipam(wired) == {"type": "calico-ipam"} == _ipam(_objs())  # calico-ipam: IPv4 by default


def test_ipv6_only_wires_the_ipv6_pool_and_turns_ipv4_off() -> None:
    wired = wire_calico(_objs(), CalicoWiring("fd00:10:244::/56", "registry.k8s.io"))
    env = _env(wired)
    assert {k: env[k] for k in (*V6_KEYS, *V6_ONLY_KEYS)} == {
        "CALICO_IPV6POOL_CIDR": "fd00:10:244::/56", "CALICO_IPV6POOL_BLOCK_SIZE": "122", "FELIX_IPV6SUPPORT": "true",
        "IP6": "autodetect", "IP": "none", "CALICO_ROUTER_ID": "hash"}
    assert "CALICO_IPV4POOL_CIDR" not in env
    assert _ipam(wired) == {"type": "calico-ipam", "assign_ipv4": "false", "assign_ipv6": "true"}


def test_dual_stack_wires_both_pools_and_both_families_in_the_cni_ipam() -> None:
    wired = wire_calico(_objs(), CalicoWiring("10.244.0.0/16,fd00:10:244::/56", "harbor.local", "nftables"))
    env = _env(wired)
    assert env["CALICO_IPV4POOL_CIDR"] == "10.244.0.0/16" and env["CALICO_IPV4POOL_BLOCK_SIZE"] == "26"
    assert env["CALICO_IPV6POOL_CIDR"] == "fd00:10:244::/56" and env["CALICO_IPV6POOL_BLOCK_SIZE"] == "122"
    assert env["FELIX_IPV6SUPPORT"] == "true" and env["IP6"] == "autodetect" and env["FELIX_NFTABLESMODE"] == "Enabled"
    assert not [k for k in V6_ONLY_KEYS if k in env]  # IPv4 is autodetected as upstream does
    assert _ipam(wired) == {"type": "calico-ipam", "assign_ipv4": "true", "assign_ipv6": "true"}
    # the IPv6 first gives the same wiring: one pool per family, whatever the order
    assert _env(wire_calico(_objs(), CalicoWiring("fd00:10:244::/56,10.244.0.0/16", "harbor.local", "nftables"))) == env


def test_an_ipam_template_calico_did_not_write_is_refused() -> None:
    objs = _objs()
    cm = next(o for o in objs if o["kind"] == "ConfigMap")
    cm["data"]["cni_network_config"] = cm["data"]["cni_network_config"].replace('"calico-ipam"', '"host-local"')
    with pytest.raises(ValueError, match="0 calico-ipam stanzas"):
        wire_calico(objs, CalicoWiring("fd00::/56", "registry.k8s.io"))
    del cm["data"]["cni_network_config"]
    with pytest.raises(ValueError, match="no cni_network_config"):
        wire_calico(objs, CalicoWiring("10.0.0.0/16,fd00::/56", "registry.k8s.io"))


def test_pod_subnet_and_block_size_reach_calico_node() -> None:
    wired = wire_calico(_objs(), CalicoWiring("10.32.0.0/12", "registry.k8s.io"))
    env = _env(wired)
    assert env["CALICO_IPV4POOL_CIDR"] == "10.32.0.0/12" and env["CALICO_IPV4POOL_BLOCK_SIZE"] == str(BLOCK_SIZE) == "26"
    assert "FELIX_NFTABLESMODE" not in env


def test_an_existing_cidr_entry_is_replaced_not_duplicated() -> None:
    objs = _objs()
    find_calico_node(objs)["spec"]["template"]["spec"]["containers"][0]["env"].append(
        {"name": "CALICO_IPV4POOL_CIDR", "value": "192.168.0.0/16"})
    before = copy.deepcopy(objs)
    wired = wire_calico(objs, CalicoWiring("10.244.0.0/16", "registry.k8s.io"))
    names = [e["name"] for e in find_calico_node(wired)["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert names.count("CALICO_IPV4POOL_CIDR") == 1 and _env(wired)["CALICO_IPV4POOL_CIDR"] == "10.244.0.0/16"
    assert objs == before  # the input is not changed


def test_nftables_mode_switches_felix_to_nftables() -> None:
    assert _env(wire_calico(_objs(), CalicoWiring("10.244.0.0/16", "registry.k8s.io", "nftables")))["FELIX_NFTABLESMODE"] == "Enabled"
    assert "FELIX_NFTABLESMODE" not in _env(wire_calico(_objs(), CalicoWiring("10.244.0.0/16", "registry.k8s.io", "ipvs")))


def test_images_move_to_an_offline_registry_and_stay_upstream_by_default() -> None:
    default = _images(wire_calico(_objs(), CalicoWiring("10.244.0.0/16", "registry.k8s.io")))
    assert default == ["docker.io/calico/cni:v3.31.3", "docker.io/calico/node:v3.31.3",
                       "docker.io/calico/kube-controllers:v3.31.3"]
    mirrored = _images(wire_calico(_objs(), CalicoWiring("10.244.0.0/16", "harbor.local:5000/k8s/")))
    assert mirrored == ["harbor.local:5000/k8s/calico/cni:v3.31.3", "harbor.local:5000/k8s/calico/node:v3.31.3",
                        "harbor.local:5000/k8s/calico/kube-controllers:v3.31.3"]
    assert calico_image("reg.example", "calico/node:v3.31.3") == "reg.example/calico/node:v3.31.3"
    assert calico_image("reg.example", "quay.io/calico/node@sha256:ab") == "reg.example/calico/node@sha256:ab"


def test_what_is_not_calico_or_cannot_be_wired_is_refused() -> None:
    with pytest.raises(ValueError, match="no DaemonSet kube-system/calico-node"):
        wire_calico([o for o in _objs() if o["kind"] != "DaemonSet"], CalicoWiring("10.244.0.0/16", "registry.k8s.io"))
    with pytest.raises(ValueError, match="two IPv4"):
        wire_calico(_objs(), CalicoWiring("10.0.0.0/16,10.1.0.0/16", "registry.k8s.io"))
    with pytest.raises(ValueError, match="smaller than one calico block"):
        wire_calico(_objs(), CalicoWiring("10.0.0.0/28", "registry.k8s.io"))
    with pytest.raises(ValueError, match=r"fd00::/124 is smaller than one calico block \(/122\)"):
        wire_calico(_objs(), CalicoWiring("10.0.0.0/16,fd00::/124", "registry.k8s.io"))


@pytest.mark.parametrize("minor", list(KUBERNETES))
def test_the_lab_stand_in_is_calico_shaped_and_valid_for_every_minor(minor: str) -> None:
    version = KUBERNETES[minor].calico
    objs = wire_calico(_objs(version), CalicoWiring("10.244.0.0/16,fd00:10:244::/56", "registry.k8s.io", "nftables"))
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objs}
    assert {("ServiceAccount", "calico-node"), ("ClusterRole", "calico-node"), ("ClusterRoleBinding", "calico-node"),
            ("ConfigMap", "calico-config"), ("DaemonSet", "calico-node"),
            ("Deployment", "calico-kube-controllers")} <= kinds
    for o in objs:
        kubernetes_validate.validate(o, minor, strict=True)
    assert lab_calico_manifest(version) == lab_calico_manifest(version)  # deterministic, for the bundle's fake upstream


def test_a_manifest_is_taken_only_with_a_matching_checksum() -> None:
    body = b"kind: List\n"
    good = hashlib.sha256(body).hexdigest()
    assert verify_manifest("u", body, good.upper()) == body
    with pytest.raises(ValueError, match="does not match its .sha256"):
        verify_manifest("u", body + b" ", good)
    with pytest.raises(ValueError, match="does not match the versions table's pin"):
        verify_manifest("u", body, good, pinned="0" * 64)


def _plan(http_repo: str = "http://127.0.0.1:1"):  # nothing listens there: the lab source never connects
    docs = synth_docs(4)
    docs[0]["spec"]["clusterConfig"]["cluster"]["httpRepo"] = http_repo
    out = plan_spec_text(yaml.safe_dump_all(docs))
    assert not out.errors, out.errors
    return out.plan


async def test_lab_source_serves_the_stand_in_at_the_artefact_path() -> None:
    plan = _plan()
    art = cni_artefact(plan, "v3.31.3")
    assert art.path == "calico/3.31.3/calico.yaml"
    body = await LabManifests().fetch(plan, art)
    assert hashlib.sha256(body).hexdigest() == lab_calico_sha256("3.31.3")

