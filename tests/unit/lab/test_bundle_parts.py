"""Pure parts of `bke bundle`: reading upstream's checksum files, image references and the
image list's source mapping, the upstream table's URLs."""
from __future__ import annotations

import pytest

from bke.adapters.bundle import UPSTREAMS, ChecksumError, published_sha256
from bke.adapters.bundle.images import calico_images, rendered_images, split_ref

A, B = "a" * 64, "b" * 64


def test_checksum_files_in_upstreams_forms():
    assert published_sha256(f"{A}\n", "kubelet", "u") == A  # dl.k8s.io: the bare digest
    assert published_sha256(f"{A}  containerd-2.1.1-linux-amd64.tar.gz\n", "containerd-2.1.1-linux-amd64.tar.gz", "u") == A
    runc = f"{A} *runc.amd64\n{B} *runc.arm64\n{'c' * 64}  runc.tar.xz\n"  # one file for every arch
    assert published_sha256(runc, "runc.arm64", "u") == B
    assert published_sha256(f"{B.upper()}  ./dir/x.tgz\n", "x.tgz", "u") == B
    with pytest.raises(ChecksumError, match=r"https://x/runc.sha256sum: no checksum for runc.s390x \(it lists runc.amd64"):
        published_sha256(runc, "runc.s390x", "https://x/runc.sha256sum")
    with pytest.raises(ChecksumError, match="not a sha256 checksum line"):
        published_sha256("<html>Not Found</html>", "kubelet", "u")


def test_image_references():
    assert split_ref("registry.k8s.io/kube-apiserver:v1.33.2") == ("registry.k8s.io", "kube-apiserver", "v1.33.2")
    assert split_ref("docker.io/calico/node:v3.30.3") == ("docker.io", "calico/node", "v3.30.3")
    assert split_ref("haproxy:2.8") == ("docker.io", "library/haproxy", "2.8")
    assert split_ref("localhost:5000/pause") == ("localhost:5000", "pause", "latest")


def test_images_under_a_private_repo_name_their_upstream_source():
    text = ("spec:\n  containers:\n  - image: harbor.local/k8s/kube-apiserver:v1.33.2\n"
            "    image: \"harbor.local/k8s/coredns:v1.12.0\"\n"
            "        image: docker.io/library/haproxy:2.8.5-alpine\n")
    toml = '[plugins."io.containerd.cri.v1.images".pinned_images]\n  sandbox = "harbor.local/k8s/pause:3.10"\n'
    got = {i.ref: i.source for i in rendered_images([text, toml], "harbor.local/k8s/")}
    assert got == {
        "harbor.local/k8s/kube-apiserver:v1.33.2": "registry.k8s.io/kube-apiserver:v1.33.2",
        "harbor.local/k8s/coredns:v1.12.0": "registry.k8s.io/coredns/coredns:v1.12.0",  # kubeadm's convention
        "harbor.local/k8s/pause:3.10": "registry.k8s.io/pause:3.10",
        "docker.io/library/haproxy:2.8.5-alpine": "docker.io/library/haproxy:2.8.5-alpine",
    }


def test_calico_images_come_from_every_workload():
    manifest = ("kind: ConfigMap\n---\nkind: DaemonSet\nspec:\n  template:\n    spec:\n"
                "      initContainers: [{name: a, image: 'x/cni:v1'}]\n      containers: [{name: b, image: 'x/node:v1'}]\n"
                "---\nkind: Deployment\nspec: {template: {spec: {containers: [{name: c, image: 'x/kc:v1'}]}}}\n")
    assert [i.ref for i in calico_images(manifest)] == ["x/cni:v1", "x/kc:v1", "x/node:v1"]
    # under a private imageRepo the addons phase moves them there; the source stays upstream's
    moved = calico_images(manifest.replace("x/node", "docker.io/calico/node"), "harbor.local/k8s/")
    assert {i.ref: i.source for i in moved}["harbor.local/k8s/calico/node:v1"] == "docker.io/calico/node:v1"
    assert {i.ref for i in moved} >= {"harbor.local/k8s/x/cni:v1", "harbor.local/k8s/x/kc:v1"}


def test_upstream_urls_follow_each_projects_layout():
    k, c, r = UPSTREAMS["kubernetes"], UPSTREAMS["containerd"], UPSTREAMS["runc"]
    assert k.download_url("1.33.2", "arm64", "kubelet") == "https://dl.k8s.io/release/v1.33.2/bin/linux/arm64/kubelet"
    assert k.sums_url("1.33.2", "arm64", "kubelet") == "https://dl.k8s.io/release/v1.33.2/bin/linux/arm64/kubelet.sha256"
    assert c.sums_url("2.1.1", "amd64", "containerd").endswith("/v2.1.1/containerd-2.1.1-linux-amd64.tar.gz.sha256sum")
    assert c.member_name("containerd-shim-runc-v2") == "bin/containerd-shim-runc-v2"
    assert r.sums_url("1.3.0", "amd64", "runc") == "https://github.com/opencontainers/runc/releases/download/v1.3.0/runc.sha256sum"
    assert UPSTREAMS["cni-plugins"].download_url("1.6.2", "arm64", "bridge").endswith("/v1.6.2/cni-plugins-linux-arm64-v1.6.2.tgz")
    assert UPSTREAMS["crictl"].download_url("1.33.0", "amd64", "crictl").endswith("/v1.33.0/crictl-v1.33.0-linux-amd64.tar.gz")
    assert UPSTREAMS["calico"].sums is None


def test_lab_http_repo_replaces_only_the_clusters_http_repo():
    from pathlib import Path

    import yaml

    from bke.lab.http_repo import with_http_repo
    from bke.core.plan import plan_spec_text

    seed = Path("examples/seed-3m1w.yaml").read_bytes()
    text = with_http_repo(seed, "http://127.0.0.1:41234")
    assert plan_spec_text(text).plan.spec.config.http_repo == "http://127.0.0.1:41234"
    before, after = list(yaml.safe_load_all(seed)), list(yaml.safe_load_all(text))
    after[0]["spec"]["clusterConfig"]["cluster"].pop("httpRepo")
    assert after == before
    assert with_http_repo(b"kind: BKENode\n", "http://x") == b"kind: BKENode\n"
