"""End to end: real NATS, Redis and etcd; planner, certs, renderer, dispatcher and one agent per
node, each its own OS process. Every scenario ends with the install complete and no completed
command run twice (counted from the agents' own execution logs)."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import jsonschema
import pytest
import redis

from bke.adapters.runtime.etcd import etcd_put_get, wait_etcd_healthy
from bke.adapters.runtime.processes import pid_alive, poll_until
from bke.adapters.state.keys.dispatcher import accepted_agents_key
from bke_agent.lablayout import LabLayout
from bke.core.plan import parse_overrides

from .node_env_checks import assert_complete_node_environment

pytestmark = pytest.mark.e2e
SEED = "examples/seed-3m1w.yaml"
SPLIT = "examples/split-etcd.yaml"


def assert_ran_once(lab):
    counts = lab.executions()
    assert counts, "agents recorded no executions"
    twice = {cid: n for cid, n in counts.items() if n > 1}
    assert not twice, f"completed commands ran more than once: {twice}"
    return counts


def flag(manifest, name):
    cmd = manifest["spec"]["containers"][0]["command"]
    return next(a.split("=", 1)[1] for a in cmd if a.startswith(f"--{name}="))


async def test_split_etcd_install_files_and_real_etcd(lab_factory):
    lab = lab_factory(SPLIT)
    assert await lab.install() == 0, lab.out.getvalue()
    doc = await lab.status()
    assert doc["status"] == "Succeeded"
    assert {p["name"]: p["status"] for p in doc["phases"]} == {p["name"]: "Succeeded" for p in doc["phases"]}
    assert all(n["status"] == "Succeeded" for n in doc["nodes"])
    # the addons phase, in the addon table's order, each validated for the cluster's minor and recorded
    assert list(doc["addons"]) == ["rbac", "kube-proxy", "calico", "coredns"]
    assert all(a["status"] == "Validated" for a in doc["addons"].values())
    # what an operator sees: `bke status NAME --nats URL -o json`, NATS only, as the schema says
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("BKE_")}, **lab.operator_env()}
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "bke"), "status", lab.plan.cluster, "--nats", lab.info.nats_url, "-o", "json",
        "--nodes", "all", env=env, stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    assert proc.returncode == 0
    cli_doc = json.loads(out)
    jsonschema.Draft202012Validator(json.loads(Path("docs/status.schema.json").read_text())).validate(cli_doc)
    assert cli_doc["status"] == "Succeeded" and cli_doc["nodeCounts"]["succeeded"] == len(lab.plan.nodes) == len(cli_doc["nodes"])
    # every registered node's labels, split roles included, as recorded by the node-labels phase
    # (the lab has no apiserver); etcd-only nodes have no Node object and no labels
    split_roles = {"m1": {"apiserver"}, "m4": {"controller-manager", "scheduler"}, "events1": set(), "worker1": set()}
    rows = {n["hostname"]: n for n in cli_doc["nodes"]}
    for node in lab.plan.nodes:
        row = rows[node.hostname]
        if not node.registers:
            assert row["labels"] is None and row["taints"] is None, node.hostname
        else:
            assert row["labels"] == node.labels and node.labels, node.hostname
        for role in split_roles.get(node.hostname, ()):
            assert row["labels"][f"node-role.kubernetes.io/{role}"] == "", (node.hostname, role)
        # health for every node: its kubelet (and what else it runs) answered the health phase
        assert row["health"]["status"] == "Healthy" and row["health"]["failing"] == [], node.hostname
    assert rows["m1"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "value": "", "effect": "NoSchedule"}]
    assert cli_doc["nodeHealth"]["healthy"] == len(lab.plan.nodes)
    assert cli_doc["labelled"] == sum(1 for n in lab.plan.nodes if n.registers)

    # least privilege on disk: what each node's role needs, nothing else
    pki = "etc/kubernetes/pki"
    worker, etcd_only, apiserver, cm = lab.host("worker1"), lab.host("events1"), lab.host("m1"), lab.host("m4")
    assert (worker / "etc/kubernetes/kubelet.conf").exists() and (worker / pki / "ca.crt").exists()
    assert not (worker / pki / "ca.key").exists() and not (worker / "etc/kubernetes/admin.conf").exists()
    assert sorted(p.name for p in (worker / pki).iterdir()) == ["ca.crt"]
    assert not (etcd_only / "etc/kubernetes/admin.conf").exists() and not (etcd_only / pki / "ca.key").exists()
    assert not any(lab.host(n.hostname).joinpath("etc/kubernetes/super-admin.conf").exists() for n in lab.plan.nodes)
    assert (etcd_only / pki / "etcd-events/peer.key").stat().st_mode & 0o777 == 0o600
    assert not (etcd_only / pki / "etcd").exists()  # a member of etcd-events only
    assert (cm / pki / "ca.key").exists() and not (apiserver / pki / "ca.key").exists()
    for host in ("m1", "m4", "etcd1", "worker1"):
        assert not any("etcd-ca.key" in p.name or p.name == "front-proxy-ca.key" for p in lab.host(host).rglob("*.key"))

    # the etcd clusters are real, healthy, and reachable with the apiserver's client
    # certificate at exactly the URLs of the rendered apiserver manifest
    api = lab.manifest("m1", "kube-apiserver.yaml")
    data_urls = flag(api, "etcd-servers").split(",")
    overrides = parse_overrides(flag(api, "etcd-servers-overrides"))
    assert len(data_urls) == 3 and set(overrides) == {"/events", "coordination.k8s.io/leases", "/pods"}
    ca, cert, key = (str(apiserver / pki / f) for f in ("etcd/ca.crt", "apiserver-etcd-client.crt", "apiserver-etcd-client.key"))
    for url in data_urls + overrides["/events"] + overrides["/pods"]:
        await asyncio.to_thread(wait_etcd_healthy, url, ca, cert, key, 30)
        assert await asyncio.to_thread(etcd_put_get, url, ca, cert, key, f"/e2e/{url}", "ok") == "ok"
    assert_ran_once(lab)

    # every line the services and agents wrote is one JSON object, FastStream's own included
    logs = sorted((lab.workdir / "logs").glob("*.log"))
    assert {p.stem for p in logs} >= {"planner", "certs", "renderer", "dispatcher", "agent-m1"}
    for path in logs:
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        assert lines, path
        for line in lines:
            assert json.loads(line)["service"], f"{path.name}: not a JSON log line: {line[:120]!r}"
    assert any("FastStream app started" in line for line in (lab.workdir / "logs" / "certs.log").read_text().splitlines())


async def test_seed_install_with_dispatcher_killed_in_the_etcd_phase_then_health_kept_current(lab_factory, monkeypatch):
    monkeypatch.setenv("BKE_DISPATCHER_HEALTH_INTERVAL_S", "1")  # the health part below: rounds every second
    lab = lab_factory(SEED)
    install = asyncio.create_task(lab.install())
    await lab.wait_status(lambda d: lab.phase(d, "etcd")["status"] == "Running", 120, "the etcd phase")
    pid = lab.sup.pids()["services"]["dispatcher"]
    os.kill(pid, signal.SIGKILL)
    poll_until(lambda: True if not pid_alive(pid) else None, timeout=10, what="the dispatcher to die")
    lab.sup.ensure_services(lab.info, only=("dispatcher",))  # a new process, same Redis state
    assert lab.sup.pids()["services"]["dispatcher"] != pid
    assert await install == 0, lab.out.getvalue()
    doc = await lab.status()
    assert [p["status"] for p in doc["phases"]].count("Succeeded") == 10  # load-balancer Skipped
    assert lab.phase(doc, "load-balancer")["status"] == "Skipped"
    counts = assert_ran_once(lab)
    assert sum(1 for c in counts if "/etcd/" in c) == 3
    # the seed lists kube-proxy and coredns with their versions; RBAC and calico come by default
    addons = doc["addons"]
    assert list(addons) == ["rbac", "kube-proxy", "calico", "coredns"]
    assert {n: (a["status"], a["version"]) for n, a in addons.items()} == {
        "rbac": ("Validated", "1.33.2"), "kube-proxy": ("Validated", "v1.33.2"),
        "calico": ("Validated", "3.31.3"), "coredns": ("Validated", "v1.12.0")}
    assert addons["calico"]["objects"] == 7  # the lab stand-in, wired and validated
    assert_complete_node_environment(lab)
    await _health_kept_current(lab)


async def _accepted(lab, node: str, timeout: float = 60.0) -> None:
    """Wait until the dispatcher holds `node`'s agent as accepted (what the certs service's
    `agents.accepted` event leads to; read from Redis, since it may have come before this call,
    and the operator's identity may not read the events' stream)."""
    r = redis.Redis.from_url(lab.info.redis_url, decode_responses=True, socket_timeout=5.0)
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while not r.hget(accepted_agents_key(lab.plan.cluster), node):
            assert asyncio.get_running_loop().time() < deadline, f"{node}'s agent not accepted within {timeout:.0f} s"
            await asyncio.sleep(0.2)  # polling Redis under a deadline
    finally:
        r.close()


async def test_agent_stopped_for_a_while_then_restarted(lab_factory):
    lab = lab_factory(SEED)
    # node1's agent registered with its provisioned key, then stops before the install: its
    # commands wait in its durable consumer (stopping it after the agents phase raced node-env)
    await _accepted(lab, "node1")
    assert lab.sup.stop_agent("node1")
    install = asyncio.create_task(lab.install())
    # the others finish node-env; node1's command waits in its durable consumer
    doc = await lab.wait_status(lambda d: lab.phase(d, "node-env")["done"] == 3, 120, "3/4 nodes through node-env")
    assert lab.phase(doc, "node-env")["status"] == "Running" and not install.done()
    lab.sup.ensure_agents(lab.info, lab.plan, only=["node1"])
    assert await install == 0, lab.out.getvalue()
    assert_ran_once(lab)


async def test_failed_step_reported_then_fixed_and_retried(lab_factory):
    lab = lab_factory(SEED, agents=False)
    node1 = lab.plan.node("node1")
    blocker = socket.socket()
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind((node1.ip, 10250))  # the kubelet's port, taken: preflight must fail on node1 only
    blocker.listen()
    try:
        lab.sup.ensure_agents(lab.info, lab.plan)
        assert await lab.install() == 1
        doc = await lab.status()
        failed = lab.phase(doc, "node-env")
        assert doc["status"] == "Failed" and failed["status"] == "Failed"
        assert "node1" in failed["message"] and "10250" in failed["message"] and "master1" not in failed["message"]
        assert [n["status"] for n in doc["nodes"] if n["hostname"] == "node1"] == ["Failed"]
    finally:
        blocker.close()
    before = lab.executions()
    from bke_cli.status_cmd import retry  # the CLI path, as an operator would run it

    with pytest.raises(BaseException) as exc:  # typer.Exit carries the follow's exit code
        await asyncio.to_thread(retry, "seed", None, lab.workdir, None, True, 240.0)
    assert getattr(exc.value, "exit_code", None) == 0, lab.out.getvalue()
    doc = await lab.status()
    assert doc["status"] == "Succeeded"
    after = assert_ran_once(lab)
    # succeeded work was not redone: every node-env command of the first attempt ran once
    assert all(after[c] == 1 for c in before)
    assert "seed/node-env/node1/1" in after and "seed/node-env/master1/1" not in after


async def _health_kept_current(lab) -> None:
    """After the install, the dispatcher's health rounds keep `bke status` current: a master's
    apiserver and the worker's kubelet made unhealthy are reported so, by name, then healthy again."""
    every = {"master1", "master2", "master3", "node1"}  # the worker too: its kubelet's /healthz

    def healthy(doc, wanted):
        health = {n["hostname"]: n["health"] for n in doc["nodes"] if n["health"]}
        return set(health) == every and all(health[h]["status"] == wanted.get(h, "Healthy") for h in every)

    def failing(doc, host):
        return next(n["health"]["failing"] for n in doc["nodes"] if n["hostname"] == host)

    await lab.wait_status(lambda d: healthy(d, {}), 60, "every node healthy")
    flag_file = LabLayout(lab.host("master2")).unhealthy_file("kube-apiserver")
    flag_file.parent.mkdir(parents=True, exist_ok=True)
    flag_file.write_text("made unhealthy by the test\n")
    kubelet_flag = LabLayout(lab.host("node1")).unhealthy_file("kubelet")
    kubelet_flag.write_text("made unhealthy by the test\n")
    doc = await lab.wait_status(lambda d: healthy(d, {"master2": "Unhealthy", "node1": "Unhealthy"}), 60,
                                "master2 and the worker node1 reported unhealthy")
    assert failing(doc, "master2") == ["health:kube-apiserver"] and failing(doc, "node1") == ["health:kubelet"]
    assert doc["nodeHealth"]["unhealthy"] == 2 and doc["nodeHealth"]["unhealthyNodes"] == ["master2", "node1"]
    flag_file.unlink()
    kubelet_flag.unlink()
    await lab.wait_status(lambda d: healthy(d, {}), 60, "every node healthy again")


async def test_whole_lab_killed_mid_install_then_started_again(lab_factory):
    lab = lab_factory(SEED)
    install = asyncio.create_task(lab.install())
    await lab.wait_status(lambda d: lab.phase(d, "etcd")["status"] == "Running", 120, "the etcd phase")
    install.cancel()
    pids = lab.sup.pids()
    runtime = lab.sup.runtime.info
    everyone = [*pids["agents"].values(), *pids["services"].values(), runtime.nats_pid, runtime.redis_pid]
    for pid in everyone:  # the machine "loses" every process at once
        os.kill(pid, signal.SIGKILL)
    for pid in everyone:
        poll_until(lambda p=pid: True if not pid_alive(p) else None, timeout=10, what=f"pid {pid} to die")
    # kubelet stand-ins died with their agents; their etcd children are found by the next agent
    again = type(lab)(lab.workdir, lab.spec_path).start()  # same workdir: same JetStream store, Redis AOF, journals
    try:
        assert await again.install() == 0, again.out.getvalue()
        doc = await again.status()
        assert doc["status"] == "Succeeded"
        assert_ran_once(again)
    finally:
        again.down()
