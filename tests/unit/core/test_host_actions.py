"""What a signed command may do by its kind (bke.core.host_actions), each refusal beside the
legitimate command it must not stop: files by class and path, programs and their arguments,
units, the agent's own update, kubeconfigs (no exec, no auth-provider) where they are made and
where the agent writes them, health probes (endpoints, TLS files, no body in the answer)."""
from __future__ import annotations

import asyncio
import base64
import hashlib
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import (
    AgentWheel,
    FetchFile,
    HealthProbe,
    NewFile,
    ReplaceFiles,
    RestartStaticPod,
    RunProgram,
    Step,
    SystemdUnit,
    TlsFiles,
    UpdateAgent,
    WaitHealth,
    WriteFile,
)
from bke.core.host_actions import (
    HEALTH_ENDPOINTS, command_refusal, file_class, health_url_refusal, kubeconfig_problems, kubeconfig_refusal,
)
from bke.core.pki.kubeconfig import render_kubeconfig
from bke.core.secrets import public_key_from_raw, seal
from bke_agent import AgentIdentity, Executor, HostBackend, LabBackend
from tests.command_ids import command_id_for
from tests.trust_helpers import signed

from tests.unit.agent.test_agent_handling import NOW, FakeJS, FakeMsg, _loop

SUM = "0" * 64


def _write(path: str, data: bytes = b"x", mode: int = 0o644) -> WriteFile:
    return WriteFile(id=f"write:{path}", path=path, mode=mode, content_b64=base64.b64encode(data).decode(),
                     sha256=hashlib.sha256(data).hexdigest())


def _refusal(phase: str, *steps: Step) -> str | None:
    return command_refusal(AgentCommand(command_id=command_id_for(phase), cluster="c", node="n", phase=phase,
                                        issued_at="t", steps=list(steps)))


# ---- files by class, programs, units, the agent: (refused, its legitimate counterpart) ----

UPDATE = UpdateAgent(id="agents:update", version="9.9.9", wheels=[AgentWheel(url="http://repo/a.whl", sha256=SUM)])
CASES = [
    # a unit, outside the runtime's install and upgrade steps
    (("certs", _write("/etc/systemd/system/kubelet.service")), ("node-env", _write("/etc/systemd/system/kubelet.service"))),
    (("node-env", _write("/etc/systemd/system/evil.service")), ("node-env", _write("/etc/systemd/system/containerd.service"))),
    # a binary
    (("rotate@r1", FetchFile(id="f", url="http://repo/kubelet", path="/usr/bin/kubelet", sha256=SUM)),
     ("node-env", FetchFile(id="f", url="http://repo/kubelet", path="/usr/bin/kubelet", sha256=SUM))),
    (("upgrade:kube-apiserver", ReplaceFiles(id="r", files=[NewFile(path="/usr/bin/kubelet", url="http://repo/k", sha256=SUM, mode=0o755)])),
     ("upgrade:workers", ReplaceFiles(id="r", files=[NewFile(path="/usr/bin/kubelet", url="http://repo/k", sha256=SUM, mode=0o755)]))),
    # a static pod manifest: only its own component's work writes it
    (("etcd", _write("/etc/kubernetes/manifests/kube-apiserver.yaml", mode=0o600)),
     ("control-plane-init", _write("/etc/kubernetes/manifests/kube-apiserver.yaml", mode=0o600))),
    (("rotate@r1", _write("/etc/kubernetes/manifests/etcd.yaml")), ("etcd", _write("/etc/kubernetes/manifests/etcd.yaml"))),
    (("upgrade:kube-scheduler", ReplaceFiles(id="r", files=[NewFile(path="/etc/kubernetes/manifests/kube-apiserver.yaml", content_b64="eA==", sha256=SUM)])),
     ("upgrade:kube-apiserver", ReplaceFiles(id="r", files=[NewFile(path="/etc/kubernetes/manifests/kube-apiserver.yaml", content_b64="eA==", sha256=SUM)]))),
    # the keepalived script (and the configurations that name what keepalived and haproxy run)
    (("certs", _write("/etc/keepalived/check_apiserver.sh", mode=0o755)),
     ("load-balancer", _write("/etc/keepalived/check_apiserver.sh", mode=0o755))),
    (("upgrade:etcd", _write("/etc/keepalived/keepalived.conf", mode=0o600)),
     ("upgrade:load-balancer", _write("/etc/keepalived/keepalived.conf", mode=0o600))),
    # an executable file anywhere else is a script
    (("certs", _write("/etc/kubernetes/pki/ca.crt", mode=0o755)), ("certs", _write("/etc/kubernetes/pki/ca.crt", mode=0o644))),
    # kernel settings
    (("certs", _write("/etc/sysctl.d/99-bke.conf")), ("node-env", _write("/etc/sysctl.d/99-bke.conf"))),
    (("node-env", _write("/etc/sysctl.d/10-evil.conf")), ("node-env", _write("/etc/modules-load.d/bke.conf"))),
    # configuration: a health round writes nothing
    (("health", _write("/etc/kubernetes/pki/ca.crt")), ("rotate@r1", _write("/etc/kubernetes/pki/ca.crt"))),
    # a kubeconfig is never downloaded
    (("certs", FetchFile(id="f", url="http://repo/x", path="/etc/kubernetes/admin.conf", sha256=SUM, mode=0o600)),
     ("certs", _write("/etc/kubernetes/admin.conf", mode=0o600))),
    # programs, units, the agent itself
    (("certs", RunProgram(id="p", argv=["modprobe", "overlay"])), ("node-env", RunProgram(id="p", argv=["modprobe", "overlay"]))),
    (("node-env", RunProgram(id="p", argv=["crictl", "exec", "x", "sh"])), ("node-env", RunProgram(id="p", argv=["swapoff", "-a"]))),
    (("node-env", SystemdUnit(id="u", unit="debug-shell.service", action="enable-now")),
     ("node-env", SystemdUnit(id="u", unit="kubelet.service", action="enable-now"))),
    (("health", SystemdUnit(id="u", unit="kubelet.service", action="restart")),
     ("workers", SystemdUnit(id="u", unit="kubelet.service", action="restart"))),
    (("upgrade:workers", ReplaceFiles(id="r", files=[NewFile(path="/etc/containerd/config.toml", content_b64="eA==", sha256=SUM)],
                                      restart_units=["sshd.service"])),
     ("upgrade:workers", ReplaceFiles(id="r", files=[NewFile(path="/etc/containerd/config.toml", content_b64="eA==", sha256=SUM)],
                                      restart_units=["containerd.service"]))),
    (("node-env", UPDATE), ("upgrade:agents", UPDATE)),
    # never a path with '..', nor one that is not in its normal form (its class is read from it)
    (("etcd", _write("/etc/kubernetes/manifests/../manifests/etcd.yaml")), ("etcd", _write("/etc/kubernetes/manifests/etcd.yaml"))),
    (("certs", _write("/etc/kubernetes//manifests/evil.conf")), ("certs", _write("/etc/kubernetes/admin.conf"))),
    (("certs", _write("/etc/kubernetes/./manifests/evil.conf")), ("certs", _write("/etc/kubernetes/scheduler.conf"))),
]


@pytest.mark.parametrize("refused, control", CASES, ids=[f"{r[0]}:{r[1].id}" for r, _ in CASES])
def test_a_kind_does_only_what_its_rows_allow(refused: tuple[str, Step], control: tuple[str, Step]) -> None:
    why = _refusal(*refused)
    assert why is not None and why.startswith(f"step {refused[1].id}: "), why
    assert _refusal(*control) is None


def test_a_refusal_names_what_may_do_it() -> None:
    why = _refusal("certs", _write("/etc/systemd/system/kubelet.service"))
    assert why == ("step write:/etc/systemd/system/kubelet.service: certs commands may not write "
                   "/etc/systemd/system/kubelet.service (a unit file) (only node-env, upgrade:masters-runtime, "
                   "upgrade:workers commands may; bke.core.host_actions.HOST_ACTIONS)")
    assert file_class("/etc/kubernetes/manifests/etcd.yaml") == "manifest" and file_class("/opt/cni/bin/bridge") == "binary"
    assert file_class("/etc/kubernetes/admin.conf") == "config" and file_class("/etc/kubernetes/x", executable=True) == "script"


# ---- modprobe takes module names only; sysctl applies BKE's file only ----

@pytest.mark.parametrize("argv, env", [
    (["modprobe", "-C", "/etc/kubernetes/evil.conf", "overlay"], {}),
    (["modprobe", "--config=/tmp/x", "overlay"], {}),
    (["modprobe", "-a", "-C", "/tmp/x", "overlay"], {}),
    (["modprobe", "overlay", "param=1"], {}),
    (["modprobe", "-a"], {}),
    (["modprobe", "../../tmp/evil"], {}),
    (["modprobe", "-a", "overlay"], {"MODPROBE_OPTIONS": "-C /tmp/x"}),
    (["sysctl", "-w", "kernel.core_pattern=|/tmp/evil"], {}),
    (["sysctl", "-p", "/etc/kubernetes/evil.conf"], {}),
    (["/usr/sbin/modprobe", "-C", "/tmp/x", "br_netfilter"], {}),
])
def test_modprobe_and_sysctl_take_only_what_bke_sends(argv: list[str], env: dict[str, str]) -> None:
    why = _refusal("node-env", RunProgram(id="kernel", argv=argv, env=env))
    assert why is not None and ("modprobe" in why or "sysctl" in why), why


@pytest.mark.parametrize("argv", [["modprobe", "-a", "overlay", "br_netfilter", "ip_vs_rr", "nf_conntrack"],
                                  ["modprobe", "nf_conntrack_ipv4"], ["sysctl", "-p", "/etc/sysctl.d/99-bke.conf"]])
def test_what_the_node_env_phase_sends_runs(argv: list[str]) -> None:
    assert _refusal("node-env", RunProgram(id="kernel", argv=argv)) is None


async def test_the_host_agent_passes_no_modprobe_options_on(tmp_path: Path) -> None:
    backend = HostBackend(tmp_path, env={"PATH": "/usr/bin:/bin", "MODPROBE_OPTIONS": "-C /tmp/x", "KEEP": "1"})
    backend.programs = {"printenv": "test"}
    cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="p", issued_at="t",
                       steps=[RunProgram(id="env", argv=["printenv"])])
    [res] = (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps
    assert res.status == "Succeeded" and "KEEP=1" in res.stdout and "MODPROBE_OPTIONS" not in res.stdout
    bad = cmd.model_copy(update={"steps": [RunProgram(id="env", argv=["printenv"], env={"MODPROBE_OPTIONS": "-C /x"})]})
    [refused] = (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(bad)).steps
    assert refused.status == "Failed" and "MODPROBE_OPTIONS: may not be set" in refused.stderr


# ---- kubeconfigs: no exec, no auth-provider ----

KUBECONFIG = render_kubeconfig(cluster="c", server="https://10.0.0.1:6443", ca_pem=b"CA", cert_pem=b"CERT",
                               key_pem=b"KEY", user="system:node:m1")
EXEC = KUBECONFIG.replace(b"    client-certificate-data:", b"    exec: {command: /bin/sh, apiVersion: v1}\n"
                                                            b"    client-certificate-data:")


@pytest.mark.parametrize("text", [
    EXEC,
    KUBECONFIG.replace(b"    client-key-data:", b"    auth-provider: {name: oidc}\n    client-key-data:"),
    KUBECONFIG.replace(b"    client-key-data:", b"    Exec: {command: id}\n    client-key-data:"),
    KUBECONFIG.replace(b"    client-key-data:", b'    "\\x65xec": {command: id}\n    client-key-data:'),
    KUBECONFIG.replace(b"users:\n", b"users: []\nusers:\n"),  # a key twice: readers disagree on which wins
    b'{"apiVersion": "v1", "users": [{"name": "u", "user": {"exec": {"command": "id"}}}]}',
    b"not: [a kubeconfig",
])
def test_a_kubeconfig_naming_a_program_is_refused(text: bytes) -> None:
    assert kubeconfig_problems(text)
    assert kubeconfig_refusal("/etc/kubernetes/admin.conf", text) is not None


def test_a_kubeconfig_bke_writes_passes_and_other_files_are_not_read_as_one() -> None:
    assert kubeconfig_problems(KUBECONFIG) == [] and kubeconfig_refusal("/etc/kubernetes/kubelet.conf", KUBECONFIG) is None
    assert kubeconfig_refusal("/etc/kubernetes/pki/ca.crt", b"-----BEGIN CERTIFICATE-----\n") is None
    # a kubeconfig by its text, wherever it is written
    assert kubeconfig_refusal("/etc/containerd/x.yaml", EXEC) is not None


def test_bke_never_renders_a_kubeconfig_that_names_a_program() -> None:
    with pytest.raises(ValueError, match="not a plain https URL"):  # a value that would add a key
        render_kubeconfig(cluster="c", server="https://10.0.0.1:6443\n    exec: {command: id}", ca_pem=b"CA",
                          cert_pem=b"C", key_pem=b"K", user="u")
    # a name is one quoted scalar, whatever it holds; text that mentions a forbidden key is
    # parsed back in full, and a document that does not read is refused too
    with pytest.raises(ValueError, match="not a kubeconfig"):
        render_kubeconfig(cluster="c", server="https://[fd00::1]:6443", ca_pem=b"CA", cert_pem=b"C", key_pem=b"K",
                          user="u\n    exec: {command: id}")
    assert kubeconfig_problems(render_kubeconfig(cluster="c", server="https://[fd00::1]:6443", ca_pem=b"CA",
                                                 cert_pem=b"C", key_pem=b"K", user="system:node:m1")) == []
    from bke.core.render.validate import validate_addon

    configmap = ("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kube-proxy, namespace: kube-system}\ndata:\n"
                 "  kubeconfig.conf: |\n    apiVersion: v1\n    kind: Config\n    users:\n    - name: default\n"
                 "      user:\n        exec: {command: id}\n")
    assert any("exec" in p for p in validate_addon(configmap, "1.33"))
    assert not [p for p in validate_addon(configmap.replace("exec: {command: id}", "tokenFile: /t"), "1.33") if "kubeconfig" in p]


async def test_the_agent_writes_no_kubeconfig_that_names_a_program(tmp_path: Path) -> None:
    """Checked on the clear bytes (sealed or not), before the file is written; the legitimate
    kubeconfig is written."""
    identity = AgentIdentity.ephemeral()
    backend = LabBackend(tmp_path, "127.0.0.1", state_dir=tmp_path / "var/lib/bke-agent")
    sealed = seal(public_key_from_raw(base64.b64decode(identity.public_key_b64)), EXEC)
    steps: list[Step] = [
        _write("/etc/kubernetes/admin.conf", EXEC, 0o600),
        WriteFile(id="sealed", path="/etc/kubernetes/scheduler.conf", mode=0o600,
                  sealed_b64=base64.b64encode(sealed).decode(), sha256=hashlib.sha256(EXEC).hexdigest()),
        ReplaceFiles(id="sealed-replace", files=[NewFile(path="/etc/kubernetes/admin.conf", sealed_b64=base64.b64encode(sealed).decode(),
                                                         sha256=hashlib.sha256(EXEC).hexdigest())]),
    ]
    steps.append(ReplaceFiles(id="replace", files=[NewFile(path="/etc/kubernetes/controller-manager.conf",
                                                           content_b64=base64.b64encode(EXEC).decode(),
                                                           sha256=hashlib.sha256(EXEC).hexdigest())]))
    executor = Executor(backend, identity, now=lambda: NOW)
    for step in steps:
        cmd = AgentCommand(command_id=f"c/p/n/{step.id}", cluster="c", node="n", phase="certs", issued_at="t", steps=[step])
        [res] = (await executor.run(cmd)).steps
        assert res.status == "Failed" and "refused" in res.stderr and "exec" in res.stderr, res
        assert not list((tmp_path / "etc/kubernetes").glob("*.conf")), step.id
    ok = AgentCommand(command_id="c/p/n/ok", cluster="c", node="n", phase="certs", issued_at="t",
                      steps=[_write("/etc/kubernetes/admin.conf", KUBECONFIG, 0o600)])
    [res] = (await executor.run(ok)).steps
    assert res.status == "Succeeded" and (tmp_path / "etc/kubernetes/admin.conf").read_bytes() == KUBECONFIG


# ---- health probes: the node's own endpoints, BKE's TLS files, a status and never a body ----

@pytest.mark.parametrize("url", [
    "http://169.254.169.254:10248/healthz",  # a metadata service
    "http://10.0.0.9:2381/health",  # another node
    "http://127.0.0.1:22/",  # no component's port
    "http://127.0.0.1:6443/livez",  # the apiserver answers https
    "https://127.0.0.1:6443/api/v1/secrets",  # not a health path
    "https://127.0.0.1:6443/livez?verbose",
    "https://user:pw@127.0.0.1:6443/livez",
    "http://localhost.evil:10248/healthz",
])
def test_a_probe_asks_only_the_nodes_own_endpoints(url: str) -> None:
    assert health_url_refusal(url, "10.0.0.1") is not None
    assert _refusal("health", WaitHealth(id="h", url=url)) is not None
    assert _refusal("rotate@r1", RestartStaticPod(id="r", manifest="/etc/kubernetes/manifests/kube-scheduler.yaml",
                                                 health_url=url)) is not None
    assert _refusal("upgrade:kube-apiserver", ReplaceFiles(id="r", files=[NewFile(path="/etc/kubernetes/manifests/kube-apiserver.yaml",
                                                                                  content_b64="eA==", sha256=SUM)],
                                                          probes=[HealthProbe(url=url)])) is not None


def test_the_endpoints_bke_probes_are_allowed() -> None:
    from bke.core.plan import ETCD_LAYOUT
    from bke.core.render.layout import PORTS

    assert {p for p in HEALTH_ENDPOINTS} == {e.metrics for e in ETCD_LAYOUT.values()} | {
        PORTS[c] for c in ("kubelet-healthz", "haproxy-healthz", "kube-apiserver", "kube-controller-manager", "kube-scheduler")}
    for url in ("https://127.0.0.1:6443/livez", "http://127.0.0.1:2384/health", "http://[::1]:10248/healthz"):
        assert _refusal("health", WaitHealth(id="h", url=url)) is None
    assert health_url_refusal("https://10.0.0.1:10257/healthz", "10.0.0.1") is None  # the node's own address


@pytest.mark.parametrize("tls", [
    TlsFiles(ca="/etc/shadow", cert="/etc/kubernetes/pki/etcd/healthcheck-client.crt", key="/etc/kubernetes/pki/etcd/healthcheck-client.key"),
    TlsFiles(ca="/etc/kubernetes/pki/../../shadow", cert="/etc/kubernetes/pki/a.crt", key="/etc/kubernetes/pki/a.key"),
    TlsFiles(ca="/etc/kubernetes/pki/ca.crt", cert="/etc/kubernetes/pki/a.crt", key="/root/.ssh/id_rsa"),
])
def test_a_probe_reads_only_bkes_pki_as_tls_material(tls: TlsFiles) -> None:
    assert _refusal("health", WaitHealth(id="h", url="https://127.0.0.1:6443/livez", tls=tls)) is not None
    ok = TlsFiles(ca="/etc/kubernetes/pki/etcd/ca.crt", cert="/etc/kubernetes/pki/etcd/healthcheck-client.crt",
                  key="/etc/kubernetes/pki/etcd/healthcheck-client.key")
    assert _refusal("health", WaitHealth(id="h", url="https://127.0.0.1:6443/livez", tls=ok)) is None


async def test_a_probes_answer_carries_its_status_never_the_body(tmp_path: Path) -> None:
    secret = b"password=hunter2"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        body = b"ok " + secret if b"/good" in head else secret
        status = b"200 OK" if b"/good" in head else b"500 Oops"
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    backend = HostBackend(tmp_path, env={})
    try:
        steps: list[Step] = [WaitHealth(id="good", url=f"http://127.0.0.1:{port}/good", expect_body="ok", timeout_s=2),
                             WaitHealth(id="bad", url=f"http://127.0.0.1:{port}/bad", timeout_s=1)]
        cmd = AgentCommand(command_id="c/p/n/0", cluster="c", node="n", phase="health", issued_at="t", steps=steps)
        good, bad = (await Executor(backend, AgentIdentity.ephemeral(), now=lambda: NOW).run(cmd)).steps
    finally:
        server.close()
    assert good.status == "Succeeded" and "HTTP 200 in" in good.stdout and " ms" in good.stdout
    assert bad.status == "Failed" and "HTTP 500 in" in bad.stderr
    assert b"hunter2" not in (good.stdout + good.stderr + bad.stdout + bad.stderr).encode()


# ---- the agent refuses such a command as a whole, before any step runs ----

def _signed(phase: str, *steps: Step) -> bytes:
    return signed(AgentCommand(command_id=command_id_for(phase, "c1", "n1"), cluster="c1", node="n1", phase=phase,
                               issued_at=NOW.isoformat(), steps=list(steps))).to_bytes()


async def test_the_agent_refuses_the_whole_command_before_any_step_runs() -> None:
    events: list[str] = []
    js = FakeJS(events)
    loop, backend = _loop(events, js)
    # a first step it may run, then one its kind may not: nothing runs
    await loop._on_msg(FakeMsg(_signed("certs", _write("/etc/kubernetes/pki/ca.crt"),
                                       _write("/etc/systemd/system/evil.service")), events))  # type: ignore[arg-type]
    assert events == ["publish:refused", "term"] and backend.steps_run == 0
    assert b"certs commands may not write /etc/systemd/system/evil.service" in js.published[-1][1]
    events.clear()
    await loop._on_msg(FakeMsg(_signed("certs", _write("/etc/kubernetes/pki/ca.crt")), events))  # type: ignore[arg-type]
    assert events == ["store", "publish:result", "ack"] and backend.steps_run == 1


def test_docs_agent_md_holds_the_tables() -> None:
    from bke.core.host_actions.docs import generated_docs

    doc = (Path(__file__).resolve().parents[3] / "docs" / "agent.md").read_text()
    assert generated_docs() in doc, ("docs/agent.md drifted from bke.core.host_actions; paste "
                                     "`python -c 'from bke.core.host_actions.docs import generated_docs; print(generated_docs())'`")


@pytest.mark.parametrize("kind, action, target, ok", [
    ("node-env", "program", "modprobe", True),
    ("node-env", "program", "modprobex", False),  # a name is matched whole
    ("node-env", "unit", "/etc/systemd/system/kubelet.service", True),
    ("node-env", "unit", "/etc/systemd/system/kubelet.service.d/evil.conf", False),
    ("certs", "config", "/etc/kubernetes/admin.conf", True),
    ("certs", "config", "/etc/kubernetes/bke-restore-parked/evil.conf", False),  # `*` within one component
    ("certs", "config", "/etc/kubernetes/pki/etcd-events/server.key", True),  # a final `/*`: anything below
    ("upgrade:etcd", "config", "/etc/kubernetes/pki/etcd-pods/peer.key", True),
    ("upgrade:etcd", "config", "/etc/kubernetes/pki/apiserver.key", False),
])
def test_the_tables_patterns(kind: str, action: str, target: str, ok: bool) -> None:
    from bke.core.host_actions import allowed

    assert allowed(kind, action, target) is ok
