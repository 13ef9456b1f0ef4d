"""What we render, checked by the real programs where Debian packages them.

- `haproxy -c -f` on every master's haproxy.cfg;
- `keepalived --config-test -f` on every master's keepalived.conf (unicast, multicast, one to five
  masters, IPv4 and IPv6);
- Debian's containerd (1.6) `config dump` on the version-2 form we render for containerd 1.7: our
  keys must come back (containerd ignores a key it does not know, so reading them back is the
  proof that it read them). The version-3 form (containerd 2.x) is checked by our own key table:
  tests/unit/core/render/test_render_containerd_keys.py.

A missing program skips its tests with the reason, unless BKE_REQUIRE_REAL_CHECKS=1 (.ci/run sets
it, after installing the programs): then it fails. Nothing here starts a daemon: each program only
reads a file and exits, within a timeout, with its state paths under a temp dir.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bke.core.render import RenderedCluster

from tests.unit.core.render.test_render_support import plan_of, render, spec_text

pytestmark = pytest.mark.integration

REQUIRED = os.environ.get("BKE_REQUIRE_REAL_CHECKS") == "1"
PACKAGE = {"haproxy": "haproxy", "keepalived": "keepalived", "containerd": "containerd"}
TIMEOUT = 30


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason} (BKE_REQUIRE_REAL_CHECKS=1)")
    pytest.skip(reason)


def _program(name: str) -> str:
    """The program's path; daemons live in sbin, which a user's PATH may lack."""
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        _unavailable(f"{name} is not installed (apt-get install {PACKAGE[name]}; .ci/run does it)")
    assert path is not None
    return path


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, start_new_session=True, check=False)


def _interface() -> str:
    """keepalived --config-test refuses an interface this host lacks, and loopback for VRRP: the
    renders under test name one of this host's own interfaces (eth0 when there is one)."""
    names = sorted(n for n in os.listdir("/sys/class/net") if n != "lo")
    if not names:
        _unavailable("this host has no network interface but loopback, which keepalived refuses for VRRP")
    return "eth0" if "eth0" in names else names[0]


V4 = [("m1", "10.9.0.1", ["master"]), ("m2", "10.9.0.2", ["master"]), ("m3", "10.9.0.3", ["master"]),
      ("w1", "10.9.0.20", ["node"])]
FIVE = [(f"m{i}", f"10.9.0.{i}", ["master"]) for i in range(1, 6)] + [("w1", "10.9.0.20", ["node"])]
V6 = [("m1", "fd00:9::1", ["master"]), ("m2", "fd00:9::2", ["master"]), ("m3", "fd00:9::3", ["master"]),
      ("w1", "fd00:9::20", ["node"])]
ONE = [("m1", "10.9.0.1", ["master"]), ("w1", "10.9.0.20", ["node"])]
SPLIT = [("m1", "10.9.0.1", ["master", "apiserver"]), ("m2", "10.9.0.2", ["master", "apiserver"]),
         ("m3", "10.9.0.3", ["master", "controller-manager", "scheduler"]), ("e1", "10.9.0.9", ["etcd"])]

# (name, nodes, VIP, loadBalancer fields): every master of each is checked.
LB_SPECS = [
    ("unicast-3", V4, "10.9.0.100", {}),
    ("multicast-3", V4, "10.9.0.100", {"vrrp": "multicast"}),
    ("unicast-5", FIVE, "10.9.0.100", {"virtualRouterId": 200}),
    ("unicast-1", ONE, "10.9.0.100", {}),
    ("split-roles", SPLIT, "10.9.0.100", {}),
    ("ipv6-unicast", V6, "fd00:9::100", {}),
    ("ipv6-multicast", V6, "fd00:9::100", {"vrrp": "multicast"}),
]


def _render_lb(nodes: list[tuple[str, str, list[str]]], vip: str, lb: dict[str, Any]) -> RenderedCluster:
    return render(plan_of(spec_text(nodes, endpoint=(vip, 36443), cluster={"loadBalancer": {"interface": _interface(), **lb}})))


def _masters(rendered: RenderedCluster) -> list[str]:
    return [n.hostname for n in rendered.nodes if n.file("/etc/keepalived/keepalived.conf") is not None]


# --- haproxy -------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "nodes", "vip", "lb"), LB_SPECS, ids=[s[0] for s in LB_SPECS])
def test_haproxy_accepts_every_rendered_config(tmp_path: Path, name: str, nodes: list, vip: str, lb: dict) -> None:
    haproxy = _program("haproxy")
    rendered = _render_lb(nodes, vip, lb)
    for host in _masters(rendered):
        cfg = tmp_path / f"{host}.cfg"
        cfg.write_bytes(rendered.node(host).file("/etc/haproxy/haproxy.cfg").content)
        out = _run([haproxy, "-c", "-f", str(cfg)], tmp_path)
        assert out.returncode == 0, f"{name}/{host}: {out.stdout}{out.stderr}"


def test_haproxy_refuses_a_broken_config(tmp_path: Path) -> None:
    """The check is live: a keyword haproxy does not know fails it."""
    haproxy = _program("haproxy")
    cfg = tmp_path / "haproxy.cfg"
    text = _render_lb(V4, "10.9.0.100", {}).node("m1").file("/etc/haproxy/haproxy.cfg").content.decode()
    cfg.write_text(text.replace("balance roundrobin", "balance roundrobin\n    balanse leastconn"))
    out = _run([haproxy, "-c", "-f", str(cfg)], tmp_path)
    assert out.returncode != 0 and "balanse" in out.stdout + out.stderr


# --- keepalived ----------------------------------------------------------------------------
def _keepalived_test(tmp_path: Path, rendered: RenderedCluster, host: str, edit: tuple[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """keepalived --config-test on one node's rendered config, with its rendered check script.

    The check script is copied to a root-owned folder under tmp_path and the config pointed at
    it: keepalived reports a tracked script it cannot find, and (enable_script_security) one a
    non-root user could write, as a config error.
    """
    keepalived = _program("keepalived")
    if os.geteuid() != 0:
        _unavailable("keepalived --config-test needs root: its script security refuses a check script not owned by root")
    node = rendered.node(host)
    folder = tmp_path / host
    folder.mkdir(mode=0o755)
    script = folder / "check_apiserver.sh"
    script.write_bytes(node.file("/etc/keepalived/check_apiserver.sh").content)
    script.chmod(0o755)
    text = node.file("/etc/keepalived/keepalived.conf").content.decode()
    assert '"/etc/keepalived/check_apiserver.sh"' in text
    text = text.replace('"/etc/keepalived/check_apiserver.sh"', f'"{script}"')
    if edit:
        assert edit[0] in text
        text = text.replace(*edit)
    conf = folder / "keepalived.conf"
    conf.write_text(text)
    conf.chmod(0o600)
    return _run([keepalived, "--config-test", "-f", str(conf)], folder)


@pytest.mark.parametrize(("name", "nodes", "vip", "lb"), LB_SPECS, ids=[s[0] for s in LB_SPECS])
def test_keepalived_accepts_every_rendered_config(tmp_path: Path, name: str, nodes: list, vip: str, lb: dict) -> None:
    rendered = _render_lb(nodes, vip, lb)
    masters = _masters(rendered)
    assert masters
    for host in masters:
        out = _keepalived_test(tmp_path, rendered, host)
        # --config-test exits 0 only when nothing was reported (keepalived/core/main.c, config_test_exit).
        assert out.returncode == 0 and not out.stderr.strip(), f"{name}/{host}: exit {out.returncode}: {out.stderr}"


@pytest.mark.parametrize(("edit", "fragment"), [
    (("unicast_peer {", "unicast_peers {"), "Unknown keyword 'unicast_peers'"),
    (("priority 103", "priority 300"), "outside range"),
])
def test_keepalived_refuses_a_broken_config(tmp_path: Path, edit: tuple[str, str], fragment: str) -> None:
    """The check is live: what keepalived would only log at start-up fails it."""
    out = _keepalived_test(tmp_path, _render_lb(V4, "10.9.0.100", {}), "m1", edit)
    assert out.returncode != 0 and fragment in out.stderr, out.stderr


# --- containerd 1.6 reads our version-2 form -----------------------------------------------
def _dump(tmp_path: Path, text: str) -> dict[str, Any]:
    """`containerd --config FILE config dump`: the config as containerd decoded it.

    `config dump` only loads the file and prints (cmd/containerd/command/config.go, v1.6.20):
    no daemon, no socket. Its root, state and socket are pointed under tmp_path all the same.
    """
    containerd = _program("containerd")
    paths = {'root = "/var/lib/containerd"': f'root = "{tmp_path / "root"}"',
             'state = "/run/containerd"': f'state = "{tmp_path / "state"}"',
             'address = "/run/containerd/containerd.sock"': f'address = "{tmp_path / "containerd.sock"}"'}
    for old, new in paths.items():
        assert old in text
        text = text.replace(old, new)
    conf = tmp_path / "config.toml"
    conf.write_text(text)
    out = _run([containerd, "--config", str(conf), "config", "dump"], tmp_path)
    assert out.returncode == 0, out.stderr
    return tomllib.loads(out.stdout)


def _our_keys(dumped: dict[str, Any]) -> dict[str, Any]:
    """The values of our keys as containerd decoded them (None: absent from the dump).

    sandbox_image, config_path, default_runtime_name and runtime_type are fields of containerd's
    CRI config struct: the dump shows the decoded value, or the default for a key it did not read.
    A runtime's `options` is a map that containerd hands to the runc shim undecoded, so the dump
    shows it as written: SystemdCgroup coming back proves the spelling we rendered, which is the
    field's name in runc's Options (runtime/v2/runc/options/oci.pb.go, containerd v1.7.22).
    """
    cri = dumped["plugins"]["io.containerd.grpc.v1.cri"]
    runc = cri["containerd"]["runtimes"]["runc"]
    return {"SystemdCgroup": runc.get("options", {}).get("SystemdCgroup"), "runtime_type": runc["runtime_type"],
            "sandbox_image": cri["sandbox_image"], "config_path": cri["registry"]["config_path"],
            "default_runtime_name": cri["containerd"]["default_runtime_name"]}


CONTAINERD_17 = [
    # (name, kubernetes, containerRuntime): values that differ from containerd's defaults
    # (SystemdCgroup false, sandbox registry.k8s.io/pause:3.6, config_path ""), so that reading one
    # back proves containerd read it.
    ("systemd", "v1.31.4", {}, True, "registry.k8s.io/pause:3.10"),
    ("cgroupfs-own-sandbox", "v1.32.1", {"cgroupDriver": "cgroupfs", "sandboxImage": "registry.local:5000/pause:3.10"},
     False, "registry.local:5000/pause:3.10"),
    ("image-repo", "v1.31.4", {}, True, "mirror.example.com/k8s/pause:3.10"),
]


@pytest.mark.parametrize(("name", "kubernetes", "runtime", "systemd", "sandbox"), CONTAINERD_17, ids=[c[0] for c in CONTAINERD_17])
def test_containerd_reads_back_our_version_2_keys(tmp_path: Path, name: str, kubernetes: str, runtime: dict, systemd: bool, sandbox: str) -> None:
    cluster: dict[str, Any] = {"containerRuntime": runtime}
    if name == "image-repo":
        cluster["imageRepo"] = "mirror.example.com/k8s"
    rendered = render(plan_of(spec_text(V4, kubernetes=kubernetes, etcd="v3.5.16", containerd="v1.7.22", cluster=cluster)))
    text = rendered.node("w1").file("/etc/containerd/config.toml").content.decode()
    assert text.startswith("# containerd 1.7")
    assert _our_keys(_dump(tmp_path, text)) == {
        "SystemdCgroup": systemd, "runtime_type": "io.containerd.runc.v2", "sandbox_image": sandbox,
        "config_path": "/etc/containerd/certs.d", "default_runtime_name": "runc"}


@pytest.mark.parametrize(("old", "new", "key", "read_back"), [
    ("SystemdCgroup = true", "SystemdCgroups = true", "SystemdCgroup", None),
    ("sandbox_image = ", "sandbox_imag = ", "sandbox_image", "registry.k8s.io/pause:3.6"),  # Debian 1.6.20's default
    ("config_path = ", "configpath = ", "config_path", ""),
])
def test_a_misspelt_key_does_not_come_back(tmp_path: Path, old: str, new: str, key: str, read_back: object) -> None:
    """Why the keys are read back: containerd accepts a misspelt key and runs with its default."""
    rendered = render(plan_of(spec_text(V4, kubernetes="v1.31.4", etcd="v3.5.16", containerd="v1.7.22")))
    text = rendered.node("w1").file("/etc/containerd/config.toml").content.decode()
    assert old in text
    assert _our_keys(_dump(tmp_path, text.replace(old, new, 1)))[key] == read_back
