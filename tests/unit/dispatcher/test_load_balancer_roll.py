"""A changed spec's load-balancer step (bke.core.upgrade.node_commands, LB_STEP): what a master is
sent when masters join or leave a cluster whose endpoint is a VIP, and the manifests' config
digest that makes the kubelet restart haproxy and keepalived for a new configuration."""
from __future__ import annotations

import base64

import pytest
import yaml

from bke.contracts.agent_steps import RemoveFile, ReplaceFiles
from bke.core.render import RenderInputs, render_cluster
from bke.core.render.node_files import CONFIG_ANNOTATION
from bke.core.secrets.sealing import generate_agent_key, open_sealed, seal
from bke.core.upgrade.node_commands import LB_STEP, node_upgrade_steps

from tests.unit.planner.test_apply_run import SPLIT, _node, _without, plan

PASSWORD = "Vr7pQ2xZ"
M6 = _node("m6", "127.0.20.6", "[master, apiserver]")
KEEPALIVED = "/etc/keepalived/keepalived.conf"
MANIFESTS = "/etc/kubernetes/manifests"


def _files(p, password: str = PASSWORD):
    return {n.hostname: {f.path: f for f in n.files} for n in render_cluster(p, RenderInputs(vrrp_password=password)).nodes}


@pytest.fixture(scope="module")
def grown():
    old, new = plan(SPLIT), plan(SPLIT + M6)
    return old, new, _files(old), _files(new)


def test_a_staying_master_gets_its_changed_load_balancer_files_the_vrrp_password_only_sealed(grown):
    old, new, old_files, new_files = grown
    key = generate_agent_key()
    (step,) = node_upgrade_steps(LB_STEP, "", old, new, "m1", old_files["m1"], new_files["m1"], {},
                                 seal=lambda data: seal(key.public_key(), data))
    assert isinstance(step, ReplaceFiles)
    assert [f.path for f in step.files] == ["/etc/haproxy/haproxy.cfg", KEEPALIVED,
                                            f"{MANIFESTS}/haproxy.yaml", f"{MANIFESTS}/keepalived.yaml"]
    by_path = {f.path: f for f in step.files}
    conf = by_path[KEEPALIVED]
    assert conf.content_b64 is None and conf.mode == 0o600
    text = open_sealed(key, base64.b64decode(conf.sealed_b64 or "")).decode()
    assert f"auth_pass {PASSWORD}" in text and "127.0.20.6" in text  # the new master is a VRRP peer
    assert all(PASSWORD not in base64.b64decode(f.content_b64).decode() for f in step.files if f.content_b64)
    assert "server m6 127.0.20.6:6443" in base64.b64decode(by_path["/etc/haproxy/haproxy.cfg"].content_b64 or "").decode()
    # haproxy is waited for on its monitor URI; the kubelet's restart of both pods is what the
    # agent waits for (their manifests changed: ReplaceFiles waits for the new pods)
    assert [p.url for p in step.probes] == ["http://127.0.0.1:8404/healthz"]


def test_without_a_sealer_the_secret_file_is_refused_not_sent_in_clear(grown):
    old, new, old_files, new_files = grown
    with pytest.raises(ValueError, match="keepalived.conf: a secret file is sent only sealed"):
        node_upgrade_steps(LB_STEP, "", old, new, "m1", old_files["m1"], new_files["m1"], {})


def test_a_leaving_master_stops_keepalived_before_haproxy():
    old, new = plan(SPLIT), plan(_without(SPLIT, "big-m3"))
    steps = node_upgrade_steps(LB_STEP, "", old, new, "m3", {}, {}, {})
    assert steps[:2] == [RemoveFile(id="remove:keepalived", path=f"{MANIFESTS}/keepalived.yaml"),
                         RemoveFile(id="remove:haproxy", path=f"{MANIFESTS}/haproxy.yaml")]
    # then their configuration: keepalived.conf holds the cluster's VRRP password
    assert [s.path for s in steps[2:]] == [KEEPALIVED, "/etc/keepalived/check_apiserver.sh", "/etc/haproxy/haproxy.cfg"]


def _digest(files, host: str, pod: str) -> str:
    doc = yaml.safe_load(files[host][f"{MANIFESTS}/{pod}.yaml"].content)
    return doc["metadata"]["annotations"][CONFIG_ANNOTATION]


def test_the_config_digest_follows_the_configuration_and_leaves_the_password_out(grown):
    old, new, old_files, new_files = grown
    for pod in ("haproxy", "keepalived"):  # a new backend and peer: a new manifest, so a restart
        assert _digest(old_files, "m1", pod) != _digest(new_files, "m1", pod)
    other = _files(old, "Zz9Zz9Zz")
    assert _digest(other, "m1", "keepalived") == _digest(old_files, "m1", "keepalived")
    assert old_files["m1"][KEEPALIVED].content != other["m1"][KEEPALIVED].content
    # one master's own priority and peers: each master's digest is its own
    assert _digest(old_files, "m1", "keepalived") != _digest(old_files, "m2", "keepalived")
    changed = _files(plan(SPLIT.replace("virtualRouterId: 77", "virtualRouterId: 78")))
    assert _digest(changed, "m1", "keepalived") != _digest(old_files, "m1", "keepalived")
    assert _digest(changed, "m1", "haproxy") == _digest(old_files, "m1", "haproxy")


def test_the_secret_paths_are_the_render_s_secret_files(grown):
    from bke.core.render.layout import SECRET_PATHS

    _, _, _, files = grown
    assert {f.path for node in files.values() for f in node.values() if f.secret} == SECRET_PATHS


def test_the_install_s_load_balancer_phase_sends_keepalived_conf_sealed_to_the_agent(grown):
    """The dispatcher's `load-balancer` phase (install and join): keepalived.conf, which holds
    the VRRP password, is written sealed to the node's provisioned agent key; the rest in clear;
    with no sealer the command is not built (never the password in clear on the bus)."""
    from bke.contracts.agent_steps import WriteFile
    from bke.core.state.nodefiles import file_from_bytes
    from bke_dispatcher.phases import NodeInputs, phase_by_slug

    old, _, old_files, _ = grown
    render = [file_from_bytes(f.path, f.content, f.mode) for f in old_files["m1"].values()]
    key = generate_agent_key()
    phase = phase_by_slug("load-balancer")
    assert "agent-keys" in phase.needs
    steps = phase.build(old, old.node("m1"), NodeInputs(render=render, certs=[], checksums={},  # type: ignore[misc]
                                                        seal=lambda data: seal(key.public_key(), data)))
    by_path = {s.path: s for s in steps if isinstance(s, WriteFile)}
    assert set(by_path) == {KEEPALIVED, "/etc/keepalived/check_apiserver.sh", "/etc/haproxy/haproxy.cfg",
                            f"{MANIFESTS}/haproxy.yaml", f"{MANIFESTS}/keepalived.yaml"}
    conf = by_path[KEEPALIVED]
    assert conf.content_b64 is None and f"auth_pass {PASSWORD}" in open_sealed(key, base64.b64decode(conf.sealed_b64 or "")).decode()
    assert all(s.content_b64 and s.sealed_b64 is None for p, s in by_path.items() if p != KEEPALIVED)
    with pytest.raises(ValueError, match="keepalived.conf: a secret file is sent only sealed"):
        phase.build(old, old.node("m1"), NodeInputs(render=render, certs=[], checksums={}))  # type: ignore[misc]
