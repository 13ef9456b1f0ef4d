"""The complete node environment, per node kind: what node-env fetches (each node's artefacts
for its arch, checksum-verified), the host files rendered for it (modules, sysctls, crictl.yaml)
and the steps that apply them (modprobe, sysctl, swap off and masked), with the preflight's arch
and kernel checks. Pure: plans, renders and step lists, no services."""
from __future__ import annotations

from typing import Any

import httpx
import pytest
import yaml

from bke.core.artefacts import CNI_PLUGINS
from bke.lab.standins.binary_placeholder import lab_binary_sha256
from bke.contracts.agent_steps import CheckHost, FetchFile, RunProgram, Step, SystemdUnit, WriteFile
from bke.core.errors import TemporaryError
from bke.core.plan import Plan, plan_spec_text
from bke.core.render import RenderInputs, render_cluster
from bke.core.render.host_files import HOST_VALIDATORS
from bke.core.state.nodefiles import file_from_bytes
from bke.adapters.checksums import HttpRepoChecksums, artefact_urls
from bke.lab.standins.checksums import LabChecksums
from bke.core.node_steps import node_env_steps
from bke.core.node_kernel import proxy_modules

REPO = "http://repo.example:8080"


def _plan(proxy_mode: str = "iptables", arm64: tuple[str, ...] = ("worker4",), pods: str | None = None) -> Plan:
    """examples/split-etcd.yaml (masters, etcd-only nodes, workers) with some arm64 nodes."""
    docs: list[dict[str, Any]] = list(yaml.safe_load_all(open("examples/split-etcd.yaml")))
    cluster = docs[0]["spec"]["clusterConfig"]["cluster"]
    cluster.update(httpRepo=REPO, kubeProxy={"mode": proxy_mode})
    if pods is not None:
        cluster.setdefault("networking", {})["podSubnet"] = pods
    for d in docs[1:]:
        if d["spec"]["hostname"] in arm64:
            d["spec"]["arch"] = "arm64"
    outcome = plan_spec_text(yaml.safe_dump_all(docs))
    assert outcome.plan is not None, outcome
    return outcome.plan


def _files(plan: Plan, host: str) -> list:
    return list(render_cluster(plan, RenderInputs(vrrp_password="pw123456")).node(host).files)


def _steps(plan: Plan, host: str) -> list[Step]:
    sums = {url: lab_binary_sha256(url) for url in artefact_urls(plan)}
    files = [file_from_bytes(f.path, f.content, f.mode) for f in _files(plan, host)]
    return node_env_steps(plan, plan.node(host), files, sums)


def _fetched(steps: list[Step]) -> dict[str, str]:
    return {s.path: s.url for s in steps if isinstance(s, FetchFile)}


def _ids(steps: list[Step]) -> list[str]:
    return [s.id for s in steps]


def test_an_etcd_only_node_gets_containerd_runc_and_kubelet_and_no_pod_network() -> None:
    plan = _plan()
    steps = _steps(plan, "etcd1")
    assert not plan.node("etcd1").registers
    assert sorted(_fetched(steps)) == ["/usr/bin/kubelet", "/usr/local/bin/containerd",
                                       "/usr/local/bin/containerd-shim-runc-v2", "/usr/local/sbin/runc"]
    written = [s.path for s in steps if isinstance(s, WriteFile)]
    assert "/etc/modules-load.d/bke.conf" in written
    assert "/etc/sysctl.d/99-bke.conf" not in written and "/etc/crictl.yaml" not in written
    [modprobe] = [s for s in steps if isinstance(s, RunProgram) and s.id == "kernel:modprobe"]
    assert modprobe.argv == ["modprobe", "-a", "overlay"]
    assert "kernel:sysctl" not in _ids(steps)


def test_a_master_gets_everything_in_order() -> None:
    plan = _plan()
    steps = _steps(plan, "m1")
    fetched = _fetched(steps)
    assert {"/usr/local/bin/crictl", "/usr/bin/kubectl", "/usr/local/sbin/runc"} <= set(fetched)
    assert {p for p in fetched if p.startswith("/opt/cni/bin/")} == {f"/opt/cni/bin/{p}" for p in CNI_PLUGINS}
    assert fetched["/usr/local/bin/containerd"] == f"{REPO}/containerd/2.1.1/linux/amd64/containerd"
    assert fetched["/usr/local/sbin/runc"] == f"{REPO}/runc/1.3.6/linux/amd64/runc"
    ids = _ids(steps)
    # preflight first; files before the programs that read them; modules before sysctls (the
    # bridge keys exist once br_netfilter is loaded); swap off before its check; kubelet last
    order = ["preflight", "write:/etc/sysctl.d/99-bke.conf", "kernel:modprobe", "kernel:sysctl", "swap:off",
             "systemd:mask-swap", "check:swap-off", "systemd:containerd", "systemd:kubelet"]
    assert [ids.index(i) for i in order] == sorted(ids.index(i) for i in order)
    assert ids.index("fetch:runc/runc") < ids.index("systemd:containerd")
    pre = steps[0]
    assert isinstance(pre, CheckHost) and pre.arch == "amd64" and "arch" in pre.checks
    assert "swap-off" not in pre.checks and "kernel-version" not in pre.checks  # iptables: no kernel minimum
    assert [s for s in steps if isinstance(s, SystemdUnit) and s.action == "mask"][0].unit == "swap.target"
    modprobe = next(s for s in steps if s.id == "kernel:modprobe")
    assert isinstance(modprobe, RunProgram) and modprobe.argv == ["modprobe", "-a", "overlay", "br_netfilter"]
    sysctl = next(s for s in steps if s.id == "kernel:sysctl")
    assert isinstance(sysctl, RunProgram) and sysctl.argv == ["sysctl", "-p", "/etc/sysctl.d/99-bke.conf"]


def test_an_arm64_worker_fetches_arm64_binaries_and_its_preflight_checks_it() -> None:
    plan = _plan()
    steps, amd = _steps(plan, "worker4"), _steps(plan, "worker1")
    assert plan.node("worker4").arch == "arm64"
    assert all("/linux/arm64/" in url for url in _fetched(steps).values())
    assert all("/linux/amd64/" in url for url in _fetched(amd).values())
    assert set(_fetched(steps)) == set(_fetched(amd))  # the same files, another arch
    pre = steps[0]
    assert isinstance(pre, CheckHost) and pre.arch == "arm64"
    # each checksum is its own URL's: an arm64 binary is not verified against an amd64 sum
    sha = {s.path: s.sha256 for s in steps if isinstance(s, FetchFile)}
    assert sha["/usr/bin/kubelet"] == lab_binary_sha256(f"{REPO}/kubernetes/1.33.2/linux/arm64/kubelet")


@pytest.mark.parametrize(("mode", "modules", "kernel"), [
    ("iptables", ["overlay", "br_netfilter"], None),
    ("ipvs", ["overlay", "br_netfilter", "ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh", "nf_conntrack"], None),
    ("nftables", ["overlay", "br_netfilter", "nf_tables"], "5.13"),
])
def test_the_kube_proxy_mode_brings_its_modules_and_kernel_minimum(mode: str, modules: list[str], kernel: str | None) -> None:
    plan = _plan(mode)
    steps = _steps(plan, "worker1")
    modprobe = next(s for s in steps if s.id == "kernel:modprobe")
    assert isinstance(modprobe, RunProgram) and modprobe.argv == ["modprobe", "-a", *modules]
    pre = steps[0]
    assert isinstance(pre, CheckHost) and pre.min_kernel == kernel and ("kernel-version" in pre.checks) == bool(kernel)
    # the file loads the same modules at boot
    conf = next(f for f in _files(plan, "worker1") if f.path == "/etc/modules-load.d/bke.conf")
    lines = [ln for ln in conf.content.decode().splitlines() if ln and not ln.startswith("#")]
    assert lines == modules
    # etcd-only nodes run no kube-proxy: neither its modules nor its kernel minimum
    etcd = _steps(plan, "etcd1")
    assert next(s for s in etcd if s.id == "kernel:modprobe").argv == ["modprobe", "-a", "overlay"]  # type: ignore[union-attr]
    assert etcd[0].min_kernel is None  # type: ignore[union-attr]


def test_rendered_host_files_and_their_validators() -> None:
    plan = _plan()
    files = {f.path: f.content.decode() for f in _files(plan, "worker1")}
    sysctl = [ln for ln in files["/etc/sysctl.d/99-bke.conf"].splitlines() if ln and not ln.startswith("#")]
    assert sysctl == ["net.bridge.bridge-nf-call-ip6tables = 1", "net.bridge.bridge-nf-call-iptables = 1",
                      "net.ipv4.ip_forward = 1"]
    crictl = yaml.safe_load(files["/etc/crictl.yaml"])
    assert crictl == {"runtime-endpoint": "unix:///run/containerd/containerd.sock",
                      "image-endpoint": "unix:///run/containerd/containerd.sock", "timeout": 10}
    for kind, path in (("modules-load", "/etc/modules-load.d/bke.conf"), ("sysctl", "/etc/sysctl.d/99-bke.conf"),
                       ("crictl-config", "/etc/crictl.yaml")):
        assert HOST_VALIDATORS[kind](files[path], None) == ([], {}), kind
    # and they refuse what is wrong
    assert HOST_VALIDATORS["modules-load"]("br_netfilter\nbad module\n", None)[0] == [
        "line 2: 'bad module' is not a module name", "overlay is missing (containerd's snapshotter needs it)"]
    assert "is set twice" in HOST_VALIDATORS["sysctl"]("a.b = 1\na.b = 0\n", None)[0][0]
    assert "not 'key = value'" in HOST_VALIDATORS["sysctl"]("net.ipv4.ip_forward\n", None)[0][0]
    bad = HOST_VALIDATORS["crictl-config"]('runtime-endpoint: "tcp://x"\nimage-endpoint: "unix:///s"\ntimeout: 10\nx: 1\n', None)[0]
    assert any(p.startswith("runtime-endpoint") for p in bad) and any(p.startswith("x:") for p in bad)


@pytest.mark.parametrize("pods", ["fd00:10:244::/56", "10.244.0.0/16,fd00:10:244::/56"])
def test_an_ipv6_pod_subnet_forwards_ipv6_on_registered_nodes(pods: str) -> None:
    plan = _plan(pods=pods)
    files = {f.path: f.content.decode() for f in _files(plan, "worker1")}
    sysctl = [ln for ln in files["/etc/sysctl.d/99-bke.conf"].splitlines() if ln and not ln.startswith("#")]
    assert "net.ipv6.conf.all.forwarding = 1" in sysctl and "net.ipv4.ip_forward = 1" in sysctl
    assert HOST_VALIDATORS["sysctl"](files["/etc/sysctl.d/99-bke.conf"], None) == ([], {})
    assert not any(f.path == "/etc/sysctl.d/99-bke.conf" for f in _files(plan, "etcd1"))  # no pod network there


async def test_lab_checksums_cover_every_artefact_of_every_arch() -> None:
    plan = _plan()
    sums = await LabChecksums().for_plan(plan)
    assert f"{REPO}/runc/1.3.6/linux/arm64/runc" in sums and f"{REPO}/runc/1.3.6/linux/amd64/runc" in sums
    assert all(sums[u] == lab_binary_sha256(u) for u in sums)
    for host in ("m1", "etcd1", "worker1", "worker4"):
        assert {s.url for s in _steps(plan, host) if isinstance(s, FetchFile)} <= set(sums)


async def test_http_repo_checksums_read_each_sha256_once_and_refuse_garbage() -> None:
    plan = _plan(arm64=())
    hits: list[str] = []
    broken = {"/runc/1.3.6/linux/amd64/runc.sha256"}

    def handler(request: httpx.Request) -> httpx.Response:
        hits.append(request.url.path)
        if request.url.path in broken:
            return httpx.Response(200, text="<html>not found</html>")
        return httpx.Response(200, text=f"{'ab' * 32}  {request.url.path.rsplit('/', 1)[-1]}\n")

    sums = HttpRepoChecksums(transport=httpx.MockTransport(handler))
    with pytest.raises(TemporaryError, match="runc.sha256 holds no sha256"):
        await sums.for_plan(plan)
    broken.clear()
    got = await sums.for_plan(plan)
    assert set(got) == set(artefact_urls(plan)) and set(got.values()) == {"ab" * 32}
    asked = len(hits)
    assert await sums.for_plan(plan) == got and len(hits) == asked  # cached: no second request
    assert all(h.endswith(".sha256") for h in hits)


@pytest.mark.parametrize(("kernel", "conntrack"), [
    ("3.10.0-1160.el7.x86_64", ("nf_conntrack", "nf_conntrack_ipv4")), ("4.18.0-553.el8_10.x86_64", ("nf_conntrack", "nf_conntrack_ipv4")),
    ("4.19.0-27-amd64", ("nf_conntrack",)), ("6.8.0-45-generic", ("nf_conntrack",)),
])
def test_ipvs_modules_by_kernel_as_kube_proxy_requires_them(kernel: str, conntrack: tuple[str, ...]) -> None:
    # kube-proxy's GetRequiredIPVSModules: nf_conntrack_ipv4 before 4.19 (Linux a0ae2562c6c4)
    got = proxy_modules("ipvs", kernel)
    assert got[:4] == ("ip_vs", "ip_vs_rr", "ip_vs_wrr", "ip_vs_sh") and got[4:] == conntrack
    assert proxy_modules("iptables", kernel) == () and proxy_modules("nftables", kernel) == ("nf_tables",)


def test_only_ipvs_nodes_get_the_old_kernel_steps() -> None:
    for mode, wanted in (("ipvs", True), ("iptables", False), ("nftables", False)):
        plan = _plan(mode)
        ids = _ids(_steps(plan, "worker1"))
        assert ("kernel:modprobe-nf_conntrack_ipv4" in ids) is wanted, mode
        assert "kernel:modprobe-nf_conntrack_ipv4" not in _ids(_steps(plan, "etcd1"))  # no kube-proxy there
    old = [s for s in _steps(_plan("ipvs"), "worker1") if s.kernel_below]
    assert [(type(s).__name__, s.kernel_below) for s in old] == [("WriteFile", "4.19"), ("RunProgram", "4.19")]
