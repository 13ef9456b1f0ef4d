"""`bke plan` refuses at plan time what the renderer would refuse: exit 2, every field path."""
from __future__ import annotations

from pathlib import Path

from bke_cli.main import main as bke

REFUSED = Path(__file__).parent.parent.parent / "fixtures" / "client-cert-auth-false.yaml"
PATH = "cluster.spec.clusterConfig.cluster.etcd.extraArgs.client-cert-auth"


def test_plan_refuses_etcd_without_client_certificates(capsys) -> None:
    assert bke(["plan", str(REFUSED)]) == 2
    err = capsys.readouterr().err
    assert f"ERROR {PATH}: --client-cert-auth=false means false and is refused" in err


def test_plan_refuses_a_go_spelling_of_false_on_a_node(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    text = REFUSED.read_text().replace('extraArgs: {client-cert-auth: "false"}', 'extraArgs: {max-request-bytes: "2097152"}')
    spec.write_text(text.replace("role: [master/node, etcd]}", 'role: [master/node, etcd], kubelet: {extraArgs: {anonymous-auth: "1"}}}'))
    assert bke(["plan", str(spec)]) == 2
    assert "ERROR nodes[0].spec.kubelet.extraArgs.anonymous-auth: --anonymous-auth=1 means true" in capsys.readouterr().err


def test_plan_accepts_the_corrected_spec(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(REFUSED.read_text().replace('client-cert-auth: "false"', 'client-cert-auth: "1"'))
    assert bke(["plan", str(spec)]) == 0
    assert "master1" in capsys.readouterr().out


def test_lab_install_refuses_before_starting_anything(tmp_path: Path, capsys) -> None:
    workdir = tmp_path / "lab"
    assert bke(["lab", "install", str(REFUSED), "--workdir", str(workdir)]) == 2
    assert f"ERROR {PATH}: " in capsys.readouterr().err
    assert not workdir.exists()  # no NATS, Redis, service or agent was started


def test_plan_says_who_serves_the_endpoint(tmp_path: Path, capsys) -> None:
    from tests.unit.core.render.test_render_lb import NODES
    from tests.unit.core.render.test_render_support import spec_text
    spec = tmp_path / "spec.yaml"
    spec.write_text(spec_text(NODES, endpoint=("10.7.0.100", 8443)))
    assert bke(["plan", str(spec)]) == 0
    # whitespace joined: rich may wrap the line at the console's width
    assert "(VIP: haproxy + keepalived, unicast VRRP)" in " ".join(capsys.readouterr().out.split())
    spec.write_text(spec_text(NODES, endpoint=("api.example.com", 6443), cluster={"loadBalancer": {"type": "external"}}))
    assert bke(["plan", str(spec)]) == 0
    assert "(external load balancer)" in " ".join(capsys.readouterr().out.split())
