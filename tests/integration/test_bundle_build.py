"""`bke bundle build` against fake upstreams and a fake registry on loopback: the tree is laid
out as `Artefact.path` says with upstream's bytes, every file has its `.sha256`, a checksum
mismatch is refused without leaving anything behind, and `bke bundle serve` serves it read-only."""
from __future__ import annotations

import hashlib
import json
import threading
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
import yaml

from bke.core.artefacts import node_artefacts
from bke.adapters.bundle import (
    BundleOptions,
    ChecksumMismatch,
    HttpFetcher,
    UpstreamError,
    apply_overrides,
    build_bundle,
    make_server,
    parse_override,
    UPSTREAMS,
)
from bke.core.plan import plan_spec_text
from bke.core.pythons import STANDALONE
from bke.core.versions import KUBERNETES
from bke_cli.main import main as cli_main

from ..bundle_helpers import FakeRegistry, FakeUpstream

pytestmark = pytest.mark.integration
SEED = Path("examples/seed-3m1w.yaml")
NOW = datetime(2026, 12, 1, tzinfo=timezone.utc)


@pytest.fixture
def seed_plan():
    return plan_spec_text(SEED.read_bytes()).plan


@pytest.fixture
def upstream(seed_plan):
    up = FakeUpstream(seed_plan.spec.config)
    yield up
    up.close()


@pytest.fixture
def registry():
    reg = FakeRegistry()
    yield reg
    reg.close()


def _opts(up: FakeUpstream, reg: FakeRegistry, **kw) -> BundleOptions:
    return BundleOptions(upstreams=up.table, registries={"registry.k8s.io": reg.base, "docker.io": reg.base},
                         agent=False, **kw)


def _build(plan, out, opts):
    fetcher = HttpFetcher(timeout_s=10)
    try:
        return build_bundle(plan, out, opts, fetcher, NOW)
    finally:
        fetcher.close()


def test_tree_holds_upstream_bytes_with_checksums_and_index(seed_plan, upstream, registry, tmp_path):
    out = tmp_path / "bundle"
    index = _build(seed_plan, out, _opts(upstream, registry))
    # every node artefact of both arches, and calico's manifest, with upstream's bytes
    for arch in ("amd64", "arm64"):
        for a in node_artefacts(seed_plan.spec.config, arch, registers=True):
            data = (out / a.path).read_bytes()
            assert data == upstream.expected[a.path], a.path
            assert (out / f"{a.path}.sha256").read_text().split()[0] == hashlib.sha256(data).hexdigest()
    assert (out / "containerd/2.1.1/linux/arm64/containerd-shim-runc-v2").stat().st_mode & 0o777 == 0o755
    assert not (out / "containerd/2.1.1/linux/amd64/ctr").exists()  # archive members nobody fetches stay out
    calico = next(p for p in upstream.expected if p.endswith("calico.yaml"))
    assert (out / calico).read_bytes() == upstream.expected[calico]
    on_disk = json.loads((out / "bundle.json").read_text())
    assert on_disk == json.loads(json.dumps(index))
    assert {f["path"] for f in on_disk["files"]} == set(upstream.expected)
    by_path = {f["path"]: f for f in on_disk["files"]}
    assert by_path["kubernetes/1.33.2/linux/amd64/kubelet"]["verified"] == "published"
    assert by_path[calico]["verified"] == "recorded"  # no checksum published for calico.yaml
    # the agent's bundled CPython: upstream's archive kept whole, checked against the release's SHA256SUMS
    for arch, triple in (("amd64", "x86_64"), ("arm64", "aarch64")):
        py = by_path[f"python/{STANDALONE.version}/linux/{arch}/python.tar.gz"]
        assert py["verified"] == "published" and py["member"] is None
        assert py["source"].endswith(f"/{STANDALONE.release}/cpython-{STANDALONE.version}-{triple}-unknown-linux-gnu"
                                     "-install_only_stripped.tar.gz")
    assert on_disk["versions"]["python"] == STANDALONE.version
    assert on_disk["versions"]["runc"] and on_disk["versions"]["kubernetes"] == "1.33.2"
    assert not [p for p in out.iterdir() if p.name.startswith(".staging")]
    # images: what the rendered seed pulls, plus calico's, each with the registry's digest
    images = {i["ref"]: i for i in json.loads((out / "images.json").read_text())}
    calico_v = KUBERNETES["1.33"].calico  # the release the versions table pairs with the seed's minor
    for ref in ("registry.k8s.io/kube-apiserver:v1.33.2", "registry.k8s.io/kube-proxy:v1.33.2",
                "registry.k8s.io/etcd:3.5.1-0", "registry.k8s.io/coredns/coredns:v1.12.0",
                f"docker.io/calico/node:v{calico_v}", f"docker.io/calico/cni:v{calico_v}"):
        assert ref in images, sorted(images)
    assert any(r.startswith("registry.k8s.io/pause:") for r in images)
    api = images["registry.k8s.io/kube-apiserver:v1.33.2"]
    assert api["digest"] == FakeRegistry.digest("/v2/kube-apiserver/manifests/v1.33.2")
    assert images[f"docker.io/calico/node:v{calico_v}"]["digest"] == FakeRegistry.digest(f"/v2/calico/node/manifests/v{calico_v}")
    assert len((out / "images.txt").read_text().splitlines()) == len(images)


def test_a_mismatch_is_refused_and_leaves_nothing_valid(seed_plan, upstream, registry, tmp_path):
    upstream.tamper("containerd-2.1.1-linux-arm64.tar.gz")
    out = tmp_path / "bundle"
    with pytest.raises(ChecksumMismatch) as err:
        _build(seed_plan, out, _opts(upstream, registry))
    msg = str(err.value)
    assert "containerd-2.1.1-linux-arm64.tar.gz" in msg and err.value.published in msg and err.value.actual in msg
    assert err.value.published != err.value.actual
    assert not (out / "containerd/2.1.1/linux/arm64/containerd").exists()
    assert not (out / "containerd/2.1.1/linux/arm64/containerd.sha256").exists()
    assert not (out / "bundle.json").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".staging")]


def test_a_python_archive_unlike_the_releases_sha256sums_is_refused(seed_plan, upstream, registry, tmp_path):
    name = f"cpython-{STANDALONE.version}-aarch64-unknown-linux-gnu-install_only_stripped.tar.gz"
    upstream.tamper(name)
    out = tmp_path / "bundle"
    with pytest.raises(ChecksumMismatch, match=name.replace("+", r"\+")):
        _build(seed_plan, out, _opts(upstream, registry))
    assert not (out / f"python/{STANDALONE.version}/linux/arm64/python.tar.gz").exists()
    assert not (out / "bundle.json").exists()


def test_the_cli_refuses_a_mismatch_with_exit_1(seed_plan, upstream, tmp_path, capsys):
    upstream.tamper("/kubectl")
    out = tmp_path / "bundle"
    args = ["bundle", "build", "--spec", str(SEED), "--out", str(out), "--no-agent", "--no-image-digests",
            "--arch", "amd64"]
    args += [a for p, u in upstream.table.items() for a in ("--upstream", f"{p}={u.url}")]
    assert cli_main(args) == 1
    err = capsys.readouterr().err
    assert "ERROR bundle" in err and "kubectl: sha256 mismatch" in err
    assert not (out / "kubernetes/1.33.2/linux/amd64/kubectl").exists()
    assert not (out / "kubernetes/1.33.2/linux/arm64").exists()  # --arch narrowed it


def test_pins_check_files_without_published_checksums(seed_plan, upstream, registry, tmp_path):
    calico = next(p for p in upstream.expected if p.endswith("calico.yaml"))
    good = hashlib.sha256(upstream.expected[calico]).hexdigest()
    with pytest.raises(ChecksumMismatch, match="calico.yaml: sha256 mismatch"):
        _build(seed_plan, tmp_path / "a", _opts(upstream, registry, pins={"calico.yaml": "0" * 64}))
    assert not (tmp_path / "a" / calico).exists()
    index = _build(seed_plan, tmp_path / "b", _opts(upstream, registry, pins={calico: good}))
    assert {f["path"]: f["verified"] for f in index["files"]}[calico] == "pinned"


def test_a_rerun_keeps_verified_files_and_refetches_a_damaged_one(seed_plan, upstream, registry, tmp_path):
    out = tmp_path / "bundle"
    _build(seed_plan, out, _opts(upstream, registry))
    kubelet = out / "kubernetes/1.33.2/linux/amd64/kubelet"
    kubelet.write_bytes(b"damaged")
    index = _build(seed_plan, out, _opts(upstream, registry))
    files = {f["path"]: f for f in index["files"]}
    assert files["kubernetes/1.33.2/linux/amd64/kubelet"]["fetched"]  # fetched again
    kubectl = files["kubernetes/1.33.2/linux/amd64/kubectl"]
    assert (kubectl["fetched"], kubectl["verified"]) == (False, "published")  # kept, as verified before
    assert kubelet.read_bytes() == upstream.expected["kubernetes/1.33.2/linux/amd64/kubelet"]
    # a pin given later is checked against a kept file too
    calico = next(p for p in upstream.expected if p.endswith("calico.yaml"))
    assert files[calico]["verified"] == "recorded"
    with pytest.raises(ChecksumMismatch, match="calico.yaml"):
        _build(seed_plan, out, _opts(upstream, registry, pins={"calico.yaml": "1" * 64}))


def test_overrides_are_checked():
    assert parse_override("containerd=https://mirror/{version}/c-{arch}.tgz") == (
        "containerd", "url", "https://mirror/{version}/c-{arch}.tgz")
    assert parse_override("runc.sums=https://m/{version}/SUMS")[1] == "sums"
    with pytest.raises(UpstreamError, match="expected PROJECT=URL-TEMPLATE"):
        parse_override("containerd")
    with pytest.raises(UpstreamError, match="upstreams.flannel: unknown project"):
        apply_overrides(UPSTREAMS, {"flannel": {"url": "https://x/{version}"}})
    with pytest.raises(UpstreamError, match=r"upstreams.runc.url: unknown template field\(s\) release"):
        apply_overrides(UPSTREAMS, {"runc": {"url": "https://x/{release}"}})
    table = apply_overrides(UPSTREAMS, {"runc": {"url": "https://m/runc/v{version}/runc.{arch}"}})
    assert table["runc"].sums_url("1.3.0", "arm64", "runc") == "https://m/runc/v1.3.0/runc.sha256sum"
    assert table["containerd"] == UPSTREAMS["containerd"]


def test_build_by_versions_lists_lb_images(upstream, registry, tmp_path, capsys):
    out = tmp_path / "bundle"
    args = ["bundle", "build", "--out", str(out), "--kubernetes", "v1.33.2", "--etcd", "v3.5.1",
            "--containerd", "v2.1.1", "--no-agent", "--registry", f"registry.k8s.io={registry.base}",
            "--registry", f"docker.io={registry.base}"]
    args += [a for p, u in upstream.table.items() for a in ("--upstream", f"{p}={u.url}")]
    assert cli_main(args) == 0, capsys.readouterr().err
    text = (out / "images.txt").read_text()
    assert "docker.io/library/haproxy:" in text and "docker.io/osixia/keepalived:" in text, text
    assert "calico.yaml: upstream publishes no checksum" in capsys.readouterr().err
    assert cli_main(["bundle", "build", "--out", str(out), "--kubernetes", "v1.33.2"]) == 2


def test_a_bad_version_option_is_named_by_its_option(tmp_path, capsys):
    args = ["bundle", "build", "--out", str(tmp_path / "b"), "--kubernetes", "v9.1.0", "--etcd", "v3.5.1",
            "--containerd", "v2.1.1", "--no-agent"]
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "ERROR --kubernetes: unsupported kubernetes version 'v9.1.0'" in err, err
    assert not (tmp_path / "b").exists()


def test_serve_is_read_only_and_stays_inside(tmp_path):
    root = tmp_path / "b"
    (root / "kubernetes/1.33.2/linux/amd64").mkdir(parents=True)
    (root / "kubernetes/1.33.2/linux/amd64/kubelet").write_bytes(b"kubelet bytes")
    (tmp_path / "secret").write_text("outside")
    (root / "link").symlink_to(tmp_path / "secret")
    server = make_server(root, "127.0.0.1:0")
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with httpx.Client() as c:
            assert c.get(f"{base}/kubernetes/1.33.2/linux/amd64/kubelet").content == b"kubelet bytes"
            assert c.head(f"{base}/kubernetes/1.33.2/linux/amd64/kubelet").status_code == 200
            for path in ("/kubernetes/", "/", "/link", "/../secret", "/%2e%2e/secret", "/nothing"):
                assert c.get(base + path).status_code == 404, path
            assert c.put(f"{base}/new", content=b"x").status_code == 501
            assert c.post(f"{base}/kubernetes/1.33.2/linux/amd64/kubelet", content=b"x").status_code == 501
        assert (root / "kubernetes/1.33.2/linux/amd64/kubelet").read_bytes() == b"kubelet bytes"
    finally:
        server.shutdown()
        server.server_close()


def test_a_config_file_points_at_mirrors_and_pins(seed_plan, upstream, registry, tmp_path, capsys):
    calico = next(p for p in upstream.expected if p.endswith("calico.yaml"))
    conf = tmp_path / "bundle.yaml"
    conf.write_text(yaml.safe_dump({
        "upstreams": {p: {"url": u.url} for p, u in upstream.table.items()},
        "pins": {"calico.yaml": hashlib.sha256(upstream.expected[calico]).hexdigest()},
        "registries": {"registry.k8s.io": registry.base, "docker.io": registry.base},
    }))
    out = tmp_path / "bundle"
    base = ["bundle", "build", "--spec", str(SEED), "--out", str(out), "--no-agent", "--arch", "amd64"]
    assert cli_main([*base, "--config", str(conf)]) == 0, capsys.readouterr().err
    assert {f["path"]: f["verified"] for f in json.loads((out / "bundle.json").read_text())["files"]}[calico] == "pinned"
    capsys.readouterr()
    conf.write_text(yaml.safe_dump({"upstreams": {"containerd": {"uri": "https://x/{version}"}}}))
    assert cli_main([*base, "--config", str(conf)]) == 2
    assert "upstreams.containerd.uri: unknown field" in capsys.readouterr().err
    conf.write_text(yaml.safe_dump({"mirrors": {}}))
    assert cli_main([*base, "--config", str(conf)]) == 2
    assert "mirrors: unknown key" in capsys.readouterr().err
    assert cli_main([*base, "--arch", "s390x"]) == 2
    assert "--arch s390x: supported arches are amd64, arm64" in capsys.readouterr().err
