"""End to end with a real control plane: the split example at a built release, installed by BKE
into a lab whose kubelet stand-ins run the real kube-apiserver, kube-controller-manager,
kube-scheduler and etcd from the rendered manifests, real haproxy in front of the apiservers,
and kwok in place of the kubelets. Every check asks the components themselves (the apiserver,
etcd with etcdctl), not BKE's records."""
from __future__ import annotations

import asyncio
import contextlib
import base64
import json
import os
import warnings
import ssl
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
import yaml

from bke.lab.kube_binaries import locate
from bke.lab.netns_ops import netns_unavailable
from bke.core.plan import plan_spec_text
from bke.core.versions import KUBERNETES, parse_version
from bke_agent.journal import read_executions
from bke_agent.lablayout import LabLayout, write_refusal
from bke_agent.settings import LAB_STATE_SUBDIR

from .lab_helpers import Lab, kill_upgrader_once
from .real_cp_helpers import ETCD, ETCD_35, MINORS, api_until, etcdctl, kubectl, kubectl_json, need_binaries, real_spec
from .real_cp_vip import VipCrash, VipHolders, lab_network, vip_failures_explained
from .real_cp_watch import EndpointProbe, VersionWatch, admin_tls, version_tuple

pytestmark = pytest.mark.e2e
OLDER, NEWER = MINORS[0], MINORS[-1]
NET = "127.0.40"  # this module's lab addresses (no other test uses them)
# the same lab with its control plane in network namespaces and real VRRP (bke.lab.netns) wherever
# the host allows it (BKE_TEST_NETNS=0 asks for the loopback lab): the upgrade test then crashes
# the VIP holder's keepalived and apiserver. Where it cannot, the lab is on loopback addresses with
# keepalived simulated, and the fixture says why.
NETNS_NET = "198.18.40"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    need_binaries(OLDER)
    tmp = tmp_path_factory.mktemp("real-cp")
    # etcd 3.5 at first: the module ends with the upgrade to the newer minor and etcd 3.6
    why_not = "BKE_TEST_NETNS=0" if os.environ.get("BKE_TEST_NETNS") == "0" else netns_unavailable()
    if why_not:
        warnings.warn(f"real-control-plane lab on loopback, keepalived simulated: {why_not}", stacklevel=1)
    net = NET if why_not else NETNS_NET
    spec = real_spec(Path("examples/split-etcd.yaml"), tmp / "split.yaml", OLDER, net, etcd=ETCD_35)
    lab = Lab(tmp / "lab", spec, control_plane="real")
    try:  # a lab that fails to start is taken down too (its namespaces are the kernel's, not the temp dir's)
        lab.start()
        code = asyncio.run(lab.install(timeout=300.0))
        assert code == 0, lab.out.getvalue()
        yield lab
    finally:
        lab.down()


def admin_conf(lab: Lab) -> Path:
    return lab.host("m1") / "etc/kubernetes/admin.conf"


def cluster_ca(lab: Lab) -> bytes:
    doc = yaml.safe_load(admin_conf(lab).read_text())
    return base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"])


def test_every_apiserver_answers_readyz_through_the_endpoint_verified_with_the_cluster_ca(lab):
    ca = ssl.create_default_context(cadata=cluster_ca(lab).decode())
    endpoint = f"https://{lab.plan.control_plane_endpoint}"
    apiservers = [n for n in lab.plan.nodes if "kube-apiserver" in n.components]
    assert len(apiservers) == 3
    with httpx.Client(verify=ca, trust_env=False, timeout=10.0) as http:
        for node in apiservers:  # each apiserver on its own address, its serving certificate checked
            r = http.get(f"https://{node.ip}:6443/readyz")
            assert r.status_code == 200 and r.text == "ok", (node.hostname, r.text)
        # through haproxy on the endpoint: several connections, each verified (a wrong SAN fails here)
        answers = [http.get(f"{endpoint}/readyz", headers={"Connection": "close"}) for _ in range(6)]
        assert all(a.status_code == 200 and a.text == "ok" for a in answers)
        version = http.get(f"{endpoint}/version").json()
        assert version["gitVersion"] == f"v{OLDER}"


def test_admin_conf_can_do_everything_and_the_controllers_hold_their_leases(lab):
    can = kubectl(OLDER, admin_conf(lab), "auth", "can-i", "*", "*", "--all-namespaces")
    assert can.returncode == 0 and can.stdout.strip() == "yes", can.stdout + can.stderr
    for name in ("kube-controller-manager", "kube-scheduler"):
        lease = kubectl_json(OLDER, admin_conf(lab), "-n", "kube-system", "get", "lease", name)
        assert lease["spec"]["holderIdentity"], name
        renewed = datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
        assert (datetime.now(timezone.utc) - renewed).total_seconds() < 60, (name, lease["spec"])


def test_a_service_account_token_is_issued_and_passes_a_token_review(lab):
    token = kubectl(OLDER, admin_conf(lab), "-n", "kube-system", "create", "token", "coredns")
    assert token.returncode == 0, token.stderr
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token.stdout.strip()}}
    out = kubectl(OLDER, admin_conf(lab), "create", "-o", "json", "-f", "-", stdin=json.dumps(review))
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)["status"]
    assert status["authenticated"] is True
    assert status["user"]["username"] == "system:serviceaccount:kube-system:coredns"
    forged = kubectl(OLDER, admin_conf(lab), "create", "-o", "json", "-f", "-",
                     stdin=json.dumps({**review, "spec": {"token": token.stdout.strip()[:-4] + "AAAA"}}))
    assert json.loads(forged.stdout)["status"].get("authenticated") is not True


def _etcd_tls(lab: Lab, hostname: str, cluster_dir: str) -> tuple[Path, Path, Path]:
    pki = lab.host(hostname) / "etc/kubernetes/pki" / cluster_dir
    return pki / "ca.crt", pki / "healthcheck-client.crt", pki / "healthcheck-client.key"


def test_events_leases_and_pods_live_in_their_own_etcd_clusters(lab):
    # something of each kind exists: the DaemonSets' pods, the scheduler's events, the leases
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "bke-split-proof", "namespace": "default"},
             "involvedObject": {"kind": "Namespace", "name": "default"}, "reason": "Proof", "message": "split etcd"}
    made = kubectl(OLDER, admin_conf(lab), "create", "-f", "-", stdin=json.dumps(event))
    assert made.returncode == 0, made.stderr
    clusters = {c.name: c for c in lab.plan.etcd_clusters}
    first = {name: next(n for n in lab.plan.nodes if name in n.components) for name in clusters}
    dirs = {"etcd-data": "etcd", "etcd-events": "etcd-events", "etcd-pods": "etcd-pods"}

    def keys(cluster: str, prefix: str) -> list[str]:
        node = first[cluster]
        endpoint = f"https://{node.ip}:{clusters[cluster].client_port}"
        return etcdctl(endpoint, _etcd_tls(lab, node.hostname, dirs[cluster]), "get", "--prefix", prefix, "--keys-only")

    assert "/registry/events/default/bke-split-proof" in keys("etcd-events", "/registry/events/")
    assert keys("etcd-data", "/registry/events/") == []
    assert any(k.startswith("/registry/leases/kube-system/kube-scheduler") for k in keys("etcd-events", "/registry/leases/"))
    assert keys("etcd-data", "/registry/leases/") == []
    pods = keys("etcd-pods", "/registry/pods/")
    assert any(k.startswith("/registry/pods/kube-system/kube-proxy-") for k in pods), pods
    assert keys("etcd-data", "/registry/pods/") == [] and keys("etcd-events", "/registry/pods/") == []
    # and the rest stays in etcd-data
    assert "/registry/namespaces/kube-system" in keys("etcd-data", "/registry/namespaces/")


def test_every_node_is_ready_with_bkes_labels_and_taints_and_the_addons_run(lab):
    nodes = {n["metadata"]["name"]: n for n in kubectl_json(OLDER, admin_conf(lab), "get", "nodes")["items"]}
    registered = [n for n in lab.plan.nodes if n.registers]
    assert set(nodes) == {n.hostname for n in registered}
    for node in registered:
        obj = nodes[node.hostname]
        ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True", node.hostname
        labels = obj["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in node.labels.items()), (node.hostname, labels)
        assert obj["status"]["nodeInfo"]["kubeletVersion"] == f"v{OLDER}"
    assert nodes["m1"]["spec"]["taints"] == [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]
    assert "taints" not in nodes["worker1"]["spec"]
    for ds in ("kube-proxy", "calico-node"):
        st = kubectl_json(OLDER, admin_conf(lab), "-n", "kube-system", "get", "daemonset", ds)["status"]
        assert st["desiredNumberScheduled"] == st["numberReady"] == len(registered), (ds, st)
    coredns = kubectl_json(OLDER, admin_conf(lab), "-n", "kube-system", "get", "deployment", "coredns")["status"]
    assert coredns.get("availableReplicas", 0) >= 1 and coredns["availableReplicas"] == coredns["replicas"]


def test_a_node_cannot_touch_another_nodes_object(lab):
    """NodeRestriction and the Node authorizer hold for the identities BKE issued."""
    kubelet_conf = lab.host("worker1") / "etc/kubernetes/kubelet.conf"
    own = kubectl(OLDER, kubelet_conf, "label", "node", "worker1", "bke-proof=1", "--overwrite")
    other = kubectl(OLDER, kubelet_conf, "label", "node", "worker2", "bke-proof=1", "--overwrite")
    assert own.returncode == 0, own.stderr
    assert other.returncode != 0 and "forbidden" in other.stderr.lower(), other.stderr


def test_an_unknown_flag_is_refused_at_plan_time_and_by_the_real_apiserver(lab, tmp_path):
    text = lab.spec.decode().replace('extraArgs: {max-requests-inflight: "800"}',
                                     'extraArgs: {max-requests-inflight: "800", no-such-flag: "1"}')
    outcome = plan_spec_text(text.encode())
    assert not outcome.ok
    assert any("apiServer.extraArgs.no-such-flag" in str(e) for e in outcome.errors)
    apiserver = locate("kube-apiserver", f"v{OLDER}")
    proc = subprocess.run([str(apiserver), "--no-such-flag=1"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "unknown flag: --no-such-flag" in proc.stderr


def test_what_ran_is_the_built_release(lab):
    for hostname, pod in (("m1", "kube-apiserver"), ("m4", "kube-controller-manager"), ("etcd1", "etcd")):
        status = json.loads((lab.host(hostname) / f"var/lib/bke-lab/pods/{pod}.json").read_text())
        assert status["mode"] == "real" and status["phase"] == "Running" and status["ready"], status
    assert ETCD_35.startswith("3.5") and ETCD.startswith("3.6")


def test_the_controllers_report_the_built_release_in_their_metrics(lab):
    """kube-controller-manager and kube-scheduler serve no /version: their `kubernetes_build_info`
    (read with admin.conf's client certificate, which they authorise through the apiserver)."""
    doc = yaml.safe_load(admin_conf(lab).read_text())
    user = doc["users"][0]["user"]
    pair = lab.workdir / "admin-pair.pem"
    pair.write_bytes(base64.b64decode(user["client-certificate-data"]) + b"\n" + base64.b64decode(user["client-key-data"]))
    pair.chmod(0o600)
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # their serving certificates are self-signed
    ctx.load_cert_chain(pair)
    m4 = next(n for n in lab.plan.nodes if n.hostname == "m4")
    with httpx.Client(verify=ctx, trust_env=False, timeout=10.0) as http:
        for port in (10257, 10259):
            r = http.get(f"https://{m4.ip}:{port}/metrics")
            assert r.status_code == 200, (port, r.status_code, r.text[:200])
            info = next(line for line in r.text.splitlines() if line.startswith("kubernetes_build_info{"))
            assert f'git_version="v{OLDER}"' in info, info


def _serving_serial(ip: str) -> int:
    pem = ssl.get_server_certificate((ip, 6443))
    from cryptography import x509

    return x509.load_pem_x509_certificate(pem.encode()).serial_number


async def test_a_renewed_apiserver_certificate_is_served_and_the_endpoint_never_stopped_answering(lab):
    """`bke certs renew apiserver --cluster`: every apiserver serves its new certificate, and
    /readyz through the endpoint, verified with the cluster CA, answered all along."""
    from cryptography import x509

    ca = ssl.create_default_context(cadata=cluster_ca(lab).decode())
    endpoint = f"https://{lab.plan.control_plane_endpoint}/readyz"
    apiservers = [n for n in lab.plan.nodes if "kube-apiserver" in n.components]
    before = {n.hostname: _serving_serial(n.ip) for n in apiservers}
    stop, answers, failures = asyncio.Event(), [0], []

    async def probe() -> None:
        async with httpx.AsyncClient(verify=ca, trust_env=False, timeout=5.0) as http:
            while not stop.is_set():
                try:
                    r = await http.get(endpoint, headers={"Connection": "close"})
                    if r.status_code != 200:
                        failures.append(f"{r.status_code} {r.text[:100]}")
                except httpx.HTTPError as exc:
                    failures.append(f"{type(exc).__name__}: {exc}")
                answers[0] += 1
                await asyncio.sleep(0.1)  # a client's pace, not synchronisation

    prober = asyncio.create_task(probe())
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bke_cli.main", "certs", "renew", "apiserver", "--cluster", lab.plan.cluster,
            "--workdir", str(lab.workdir), "--timeout", "240", stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 300)
    finally:
        stop.set()
        await prober
    assert proc.returncode == 0, out.decode()
    assert answers[0] >= 10 and not failures, (answers, failures[:5])
    for node in apiservers:
        on_disk = x509.load_pem_x509_certificate(
            (lab.host(node.hostname) / "etc/kubernetes/pki/apiserver.crt").read_bytes()).serial_number
        served = _serving_serial(node.ip)
        assert served == on_disk != before[node.hostname], node.hostname


PINNED = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: pinned, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: pinned}}
  template:
    metadata: {labels: {app: pinned}}
    spec:
      nodeSelector: {kubernetes.io/hostname: worker1}
      containers: [{name: pinned, image: registry.k8s.io/pause:3.10.1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pinned, namespace: default}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: pinned}}
"""

UNSAFE = """
apiVersion: v1
kind: Pod
metadata: {name: bare, namespace: default}
spec:
  nodeName: worker2
  containers: [{name: bare, image: registry.k8s.io/pause:3.10.1}]
---
apiVersion: v1
kind: Pod
metadata:
  name: mirror-like
  namespace: default
  annotations: {kubernetes.io/config.mirror: "0123456789abcdef"}
spec:
  nodeName: worker2
  containers: [{name: m, image: registry.k8s.io/pause:3.10.1}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: cache, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: cache}}
  template:
    metadata: {labels: {app: cache}}
    spec:
      nodeSelector: {kubernetes.io/hostname: worker2}
      volumes: [{name: scratch, emptyDir: {}}]
      containers: [{name: cache, image: registry.k8s.io/pause:3.10.1, volumeMounts: [{name: scratch, mountPath: /scratch}]}]
"""


def _drainer(lab: Lab):
    from bke.adapters.drain import KubernetesDrainer

    doc = yaml.safe_load(admin_conf(lab).read_text())

    async def kubeconfig(_plan):
        return doc

    return KubernetesDrainer(kubeconfig)


def _pods_on(lab: Lab, node: str) -> dict[str, dict]:
    pods = kubectl_json(OLDER, admin_conf(lab), "get", "pods", "-A", "--field-selector", f"spec.nodeName={node}")["items"]
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p for p in pods}


def _running(lab: Lab, node: str, prefix: str, count: int):
    return api_until(lambda: _pods_on(lab, node), lambda pods: sum(
        ref.startswith(prefix) and p["status"].get("phase") == "Running" for ref, p in pods.items()) >= count)


async def test_a_drain_a_budget_blocks_fails_naming_the_budget_and_goes_through_once_it_allows(lab):
    """kubectl's rule for a PodDisruptionBudget: every eviction it refuses (429) is tried again with
    backoff until the drain's timeout; the failure names the budget in the API's own words and
    evicts nothing. The same drain goes through once the budget allows it (the positive control)."""
    conf = admin_conf(lab)
    made = kubectl(OLDER, conf, "apply", "-f", "-", stdin=PINNED)
    assert made.returncode == 0, made.stderr
    try:
        await _running(lab, "worker1", "default/pinned-", 2)
        before = {ref for ref in _pods_on(lab, "worker1") if ref.startswith("default/pinned-")}
        why = await _drainer(lab).cordon_and_drain(lab.plan, ["worker1"], 8.0)
        assert "drain not done within 8s" in why and "The disruption budget pinned " in why, why
        assert before <= set(_pods_on(lab, "worker1")), "a pod the budget protects was evicted"
        assert kubectl_json(OLDER, conf, "get", "node", "worker1")["spec"].get("unschedulable") is True
        relaxed = kubectl(OLDER, conf, "patch", "pdb", "pinned", "--type=merge", "-p", '{"spec":{"minAvailable":0}}')
        assert relaxed.returncode == 0, relaxed.stderr
        assert await _drainer(lab).cordon_and_drain(lab.plan, ["worker1"], 60.0) == ""
        assert not before & set(_pods_on(lab, "worker1"))
    finally:
        kubectl(OLDER, conf, "delete", "deployment,pdb", "pinned", "--ignore-not-found")
        await _drainer(lab).uncordon(lab.plan, ["worker1"])


async def test_a_drain_refuses_bare_and_emptydir_pods_unless_forced_and_never_touches_daemonset_or_mirror_pods(lab):
    """kubectl drain --ignore-daemonsets's rules: a pod no controller owns and a pod with emptyDir
    refuse the node's whole drain (nothing evicted, both named); with force and delete-emptydir-data
    the drain evicts them. DaemonSet pods and a mirror pod stay either way."""
    from bke.contracts.drain import DrainOptions

    conf = admin_conf(lab)
    made = kubectl(OLDER, conf, "apply", "-f", "-", stdin=UNSAFE)
    assert made.returncode == 0, made.stderr
    try:
        await _running(lab, "worker2", "default/cache-", 1)
        await _running(lab, "worker2", "default/bare", 1)
        pods = _pods_on(lab, "worker2")
        daemons = {ref for ref, p in pods.items()
                   if any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences", []))}
        assert daemons, "the addons' DaemonSets run a pod on every worker"
        why = await _drainer(lab).cordon_and_drain(lab.plan, ["worker2"], 30.0)
        assert "drain refused, nothing evicted: 2 pod(s)" in why, why
        assert "default/bare has no controller (force)" in why and "uses emptyDir (delete-emptydir-data)" in why, why
        assert set(pods) <= set(_pods_on(lab, "worker2")), "a refused drain evicted a pod"
        forced = DrainOptions(force=True, delete_emptydir_data=True)
        assert await _drainer(lab).cordon_and_drain(lab.plan, ["worker2"], 60.0, forced) == ""
        left = set(_pods_on(lab, "worker2"))
        assert "default/bare" not in left and not any(ref.startswith("default/cache-") for ref in left), left
        assert daemons | {"default/mirror-like"} <= left, left
    finally:
        kubectl(OLDER, conf, "delete", "deployment", "cache", "--ignore-not-found")
        kubectl(OLDER, conf, "delete", "pod", "bare", "mirror-like", "--ignore-not-found", "--grace-period=0", "--force")
        await _drainer(lab).uncordon(lab.plan, ["worker2"])


@pytest.mark.timeout(600)  # its own work is under a minute; the module's install may be counted in
async def test_an_apiserver_that_refuses_to_start_is_rolled_back_fast_with_its_own_error_line(lab):
    """Kubernetes alone to the newer minor (etcd stays), with every apiserver's new version made to
    refuse to start below the plan-time checks (a lab fault: `--storage-backend=etcd2` appended,
    a value the apiserver validates only when it starts). The first apiserver's step fails as soon
    as it has exited three times, not after its 180 s; the reason carries the apiserver's own
    error line; its old manifest is back and it answers /readyz at the old release; the others
    were never touched. The module's upgrade then runs from this state unchanged."""
    need_binaries(NEWER)
    apiservers = [n for n in lab.plan.nodes if "kube-apiserver" in n.components]
    manifests = {n.hostname: lab.host(n.hostname) / "etc/kubernetes/manifests/kube-apiserver.yaml" for n in apiservers}
    before = {h: p.read_bytes() for h, p in manifests.items()}
    pids = {n.hostname: json.loads((lab.host(n.hostname) / "var/lib/bke-lab/pods/kube-apiserver.json").read_text())["pid"]
            for n in apiservers}
    for n in apiservers:
        write_refusal(lab.host(n.hostname), "kube-apiserver", f"v{NEWER}", "--storage-backend=etcd2")
    try:
        t0 = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "bke_cli.main", "lab", "upgrade", str(lab.spec_path), "--to", NEWER,
            "--etcd-version", ETCD_35, "--no-certificate-renewal", "--workdir", str(lab.workdir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = (b.decode() for b in await asyncio.wait_for(proc.communicate(), 240))
        took = time.monotonic() - t0
    finally:
        for n in apiservers:
            LabLayout(lab.host(n.hostname)).faults_file.unlink(missing_ok=True)
    assert proc.returncode == 1, out + err
    bad = next(n for n in apiservers if f"node {n.hostname} rolled back" in err)
    assert "kube-apiserver exited 3 times since its new manifest was written" in err, err
    assert '"command failed" err="--storage-backend invalid, allowed values: etcd3' in err, err
    assert "the previous files are back and healthy" in err, err
    print(err)
    step = next(r for r in read_executions(lab.host(bad.hostname) / LAB_STATE_SUBDIR) if "@kube-apiserver/" in r.commandId)
    spent = (datetime.fromisoformat(step.finishedAt) - datetime.fromisoformat(step.startedAt)).total_seconds()
    # the old one's graceful stop, three exits (seconds), the rollback and the old one ready again:
    # about half a minute on a quiet machine. Without the exits counted, the rollback could not
    # even begin before the step's 180 s were over
    assert spent < 150, (spent, took)
    print(f"\nrefused apiserver: step {spent:.1f} s (timeout 180 s), whole upgrade command {took:.1f} s")
    assert {h: p.read_bytes() for h, p in manifests.items()} == before  # rolled back; the others untouched
    ca = ssl.create_default_context(cadata=cluster_ca(lab).decode())
    with httpx.Client(verify=ca, trust_env=False, timeout=10.0) as http:
        for n in apiservers:
            assert http.get(f"https://{n.ip}:6443/readyz").text == "ok", n.hostname
            assert http.get(f"https://{n.ip}:6443/version").json()["gitVersion"] == f"v{OLDER}", n.hostname
    for n in apiservers:
        pid = json.loads((lab.host(n.hostname) / "var/lib/bke-lab/pods/kube-apiserver.json").read_text())["pid"]
        assert (pid == pids[n.hostname]) is (n is not bad), n.hostname  # only the failed one restarted
    # a health round that caught the failed apiserver down would refuse the next upgrade
    # (ClusterHealthy) until the following round: the module's upgrade starts from a healthy one
    await lab.wait_status(lambda doc: doc["nodeHealth"]["unhealthy"] == 0, 90, "every node healthy again")


@pytest.mark.timeout(900)  # the upgrade of 18 nodes: 3 to 5 minutes beside the other tests
async def test_a_minor_upgrade_rolls_every_component_keeping_the_skew_rules_quorum_data_and_the_endpoint(lab):
    """`bke lab upgrade` to the newer built minor and etcd 3.6, on the real control plane. Asked of
    the components themselves while it runs: no controller-manager or scheduler is ever newer than
    the oldest apiserver; every etcd cluster keeps quorum; a client asking through the endpoint
    every 100 ms, each time on a new connection, sees no failure (apiservers stop with
    --shutdown-delay-duration behind haproxy's /readyz check). After it, every component reports
    the new release and what was written before is still there. The removal and the restore
    after it run on the upgraded cluster."""
    from bke.adapters.runtime.etcd import mtls_context
    from bke.adapters.upgrade.quorum import MemberEndpoints, QuorumSampler

    need_binaries(NEWER)
    conf = admin_conf(lab)
    kept = kubectl(OLDER, conf, "create", "configmap", "before-upgrade", "--from-literal=kept=yes")
    assert kept.returncode == 0, kept.stderr
    pki = lab.host("m1") / "etc/kubernetes/pki"
    etcd_tls = mtls_context(pki / "etcd/ca.crt", pki / "apiserver-etcd-client.crt", pki / "apiserver-etcd-client.key")
    quorum = {c.name: QuorumSampler([MemberEndpoints(m.hostname, f"http://{m.client_url.split('//')[1].rsplit(':', 1)[0]}"
                                                     f":{c.metrics_port}/health", m.client_url) for m in c.members],
                                    every_s=0.2, timeout_s=1.0, client_tls=etcd_tls) for c in lab.plan.etcd_clusters}
    verified, blind = admin_tls(conf, lab.workdir)
    net, crash = lab_network(lab.workdir), None  # masters in namespaces: the VIP holder crashes mid-upgrade
    async with contextlib.AsyncExitStack() as stack:
        for sampler in quorum.values():
            await stack.enter_async_context(sampler)
        if net is not None:
            holders = stack.enter_context(VipHolders(net, [n.hostname for n in lab.plan.nodes if "keepalived" in n.components]))
            crash = VipCrash(lab.workdir, holders, NEWER, [n.hostname for n in lab.plan.nodes
                                                           if "kube-apiserver" in n.components]).start()
        with EndpointProbe(lab.plan.control_plane_endpoint, verified) as probe, \
                VersionWatch(lab.plan, verified, blind) as watch:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bke_cli.main", "lab", "upgrade", str(lab.spec_path), "--to", NEWER,
                "--etcd-version", ETCD, "--workdir", str(lab.workdir), stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT)
            out, _ = await asyncio.wait_for(proc.communicate(), 900)
    assert proc.returncode == 0 and "upgrade Succeeded" in out.decode(), out.decode()

    assert watch.samples >= 20 and not watch.skew, (watch.samples, watch.skew[:5])
    assert set(watch.seen.values()) == {NEWER}, watch.seen
    apiserver_ups = [t for t, who, v in watch.changes if who.endswith("/kube-apiserver") and v == NEWER]
    controller_ups = [t for t, who, v in watch.changes if not who.endswith("/kube-apiserver") and v == NEWER]
    assert len(apiserver_ups) == 3 and max(apiserver_ups) < min(controller_ups), watch.changes
    if crash is None:
        assert probe.answers >= 300 and not probe.failures, (probe.answers, len(probe.failures), probe.failures[:5])
    else:
        crash.join()
        print(f"VIP crash: {crash.events}; holders {holders.changes}; {probe.answers} answers, failures {probe.failures}")
        assert not crash.error and crash.holder, (crash.error, crash.events, holders.changes)
        assert any(set(now) - {crash.holder} for _, now in holders.changes), holders.changes  # the VIP moved
        assert probe.answers >= 300, probe.answers
        unexplained = vip_failures_explained(probe.failures, holders.moves(), crash.events)
        assert not unexplained, (unexplained, holders.changes, crash.events)
    for name, sampler in quorum.items():
        assert len(sampler.samples) >= 10 and not sampler.below(), (name, sampler.below()[:1])
        for dip in sampler.dips():
            assert dip.end - dip.start < 3.0, (name, dip)
    for c in lab.plan.etcd_clusters:
        node = next(n for n in lab.plan.nodes if n.hostname == c.members[0].hostname)
        dirs = {"etcd-data": "etcd", "etcd-events": "etcd-events", "etcd-pods": "etcd-pods"}
        status = json.loads(etcdctl(f"https://{node.ip}:{c.client_port}", _etcd_tls(lab, node.hostname, dirs[c.name]),
                                    "endpoint", "status", "--cluster", "-w", "json")[0])
        assert {s["Status"]["version"] for s in status} == {ETCD}, (c.name, status)
    after = kubectl_json(NEWER, conf, "get", "configmap", "before-upgrade")
    assert after["data"] == {"kept": "yes"}
    assert version_tuple(kubectl_json(NEWER, conf, "version")["serverVersion"]["gitVersion"]) == version_tuple(NEWER)


async def test_kube_proxy_and_calico_follow_the_upgrade_on_every_node(lab):
    """The addons move with the release: kube-proxy (listed in the spec at the old Kubernetes
    version) to the new one, calico (unlisted) to the new row of the versions table; each
    DaemonSet has rolled its new image out on every kwok node."""
    conf = admin_conf(lab)
    for name, tag in (("kube-proxy", f"v{NEWER}"), ("calico-node", f"v{KUBERNETES[parse_version(NEWER).minor_key].calico}")):
        ds = await api_until(lambda name=name: kubectl_json(NEWER, conf, "-n", "kube-system", "get", "ds", name),
                             lambda ds: ds["status"].get("observedGeneration") == ds["metadata"]["generation"]
                             and ds["status"].get("updatedNumberScheduled") == ds["status"]["desiredNumberScheduled"]
                             == ds["status"].get("numberReady") > 0)
        images = [c["image"] for c in ds["spec"]["template"]["spec"]["containers"]]
        assert images and all(i.endswith(f":{tag}") for i in images), (name, images)


async def test_an_applied_controller_manager_flag_reaches_the_running_processes(lab):
    """`bke lab apply` of the (upgraded) spec with a kube-controller-manager flag added: each
    controller-manager runs again with it, as its process's command line in /proc shows."""
    need_binaries(NEWER)
    text = lab.spec_path.read_text().replace(f"v{OLDER}", f"v{NEWER}").replace(f"etcdVersion: v{ETCD_35}", f"etcdVersion: v{ETCD}")
    text = text.replace("      etcd: {dataDir: /var/lib/etcd}\n",
                        '      controllerManager: {extraArgs: {terminated-pod-gc-threshold: "1000"}}\n'
                        "      etcd: {dataDir: /var/lib/etcd}\n")
    assert "terminated-pod-gc-threshold" in text
    spec = lab.workdir.parent / "split-applied.yaml"
    spec.write_text(text)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bke_cli.main", "lab", "apply", str(spec), "--workdir", str(lab.workdir),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, out.decode()
    # The step ended when the new process answered its probe; the stand-in's own status file
    # follows on its next look, so it is read until it says ready (under a deadline).
    for host in ("m4", "m5"):
        status_file = lab.host(host) / "var/lib/bke-lab/pods/kube-controller-manager.json"
        status = await api_until(lambda f=status_file: json.loads(f.read_text()),
                                 lambda st: st["mode"] == "real" and st["ready"], timeout_s=60.0)
        argv = Path(f"/proc/{status['pid']}/cmdline").read_bytes().split(b"\0")
        assert b"--terminated-pod-gc-threshold=1000" in argv, (host, argv)


WEB = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 4
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: registry.k8s.io/pause:3.10.1}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  minAvailable: 3
  selector: {matchLabels: {app: web}}
"""


async def test_removing_a_worker_drains_it_through_evictions_and_deletes_its_node(lab):
    """The removal's drain (bke.adapters.drain.KubernetesDrainer) against the real API: the worker is
    cordoned, its pods are evicted (a PodDisruptionBudget allows one at a time) and come back on
    the other workers, then its Node object is deleted."""
    conf = admin_conf(lab)
    made = kubectl(OLDER, conf, "apply", "-f", "-", stdin=WEB)
    assert made.returncode == 0, made.stderr
    await api_until(lambda: kubectl_json(OLDER, conf, "-n", "default", "get", "pods", "-l", "app=web")["items"],
                    lambda pods: sum(p["status"].get("phase") == "Running" for p in pods) == 4)
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "bke"), "lab", "remove-nodes", lab.plan.cluster, "--nodes", "worker4",
        "--workdir", str(lab.workdir), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 600)
    assert proc.returncode == 0, out.decode()
    names = {n["metadata"]["name"] for n in kubectl_json(OLDER, conf, "get", "nodes")["items"]}
    assert "worker4" not in names and "worker3" in names
    pods = kubectl_json(OLDER, conf, "-n", "default", "get", "pods", "-l", "app=web")["items"]
    assert all(p["spec"].get("nodeName") != "worker4" for p in pods), pods
    deploy = kubectl_json(OLDER, conf, "-n", "default", "get", "deployment", "web")["status"]
    assert deploy.get("availableReplicas", 0) >= 3, deploy


async def test_a_snapshot_holds_real_data_and_a_restore_brings_it_back_under_the_running_apiservers(lab):
    """`bke etcd restore` of etcd-data: the upgrader parks every apiserver, restores each member
    with etcdutl (revisions bumped and marked compacted), then starts them again; what was written
    before the snapshot is back, what was written after is gone, and the API answers."""
    from bke.core.etcdsnap.step import snapshot_targets

    from .snapshot_helpers import bke, take_snapshots

    conf = admin_conf(lab)
    for name in ("before-snapshot", "after-snapshot"):
        kubectl(OLDER, conf, "-n", "default", "delete", "configmap", name, "--ignore-not-found")
    made = kubectl(OLDER, conf, "-n", "default", "create", "configmap", "before-snapshot", "--from-literal=k=kept")
    assert made.returncode == 0, made.stderr
    data = lab.plan.etcd_cluster("etcd-data")
    assert data is not None
    targets = [t for t in snapshot_targets(lab.plan) if t.etcd_cluster == "etcd-data"]
    await take_snapshots(lab, targets, "real-restore")
    made = kubectl(OLDER, conf, "-n", "default", "create", "configmap", "after-snapshot", "--from-literal=k=gone")
    assert made.returncode == 0, made.stderr
    node = next(n for n in lab.plan.nodes if n.hostname == data.members[0].hostname)
    tls = _etcd_tls(lab, node.hostname, "etcd")
    status = etcdctl(data.members[0].client_url, tls, "endpoint", "status", "-w", "json")
    revision_before = json.loads(status[0])[0]["Status"]["header"]["revision"]
    assert 0 < revision_before < 1_000_000

    listed = await asyncio.to_thread(bke, lab.operator_env(), "etcd", "snapshots", lab.plan.cluster, "--nats",
                                     lab.info.nats_url, "--etcd-cluster", "etcd-data")
    assert listed.returncode == 0, listed.stderr
    # the newest (ids sort by time): the upgrade before this test took snapshots of its own
    sid = max(w for w in listed.stdout.split() if w.endswith(f"-{targets[0].node}"))
    argv = ("etcd", "restore", lab.plan.cluster, "--etcd-cluster", "etcd-data", "--snapshot", sid, "--workdir",
            str(lab.workdir))
    apiservers = [n.hostname for n in lab.plan.nodes_running("kube-apiserver")]
    api_manifests = [lab.host(n) / "etc/kubernetes/manifests/kube-apiserver.yaml" for n in apiservers]
    # without --yes: what the restore stops and does, then a refusal that stopped nothing
    refused = await asyncio.to_thread(bke, {}, *argv)
    assert refused.returncode != 0 and "Aborted" in refused.stderr, refused.stdout + refused.stderr
    assert f"kube-apiserver on {apiservers[0]}" in refused.stdout and "restore-members" in refused.stdout
    assert all(p.exists() for p in api_manifests)
    # with it, and the upgrader killed once the members are being restored: the run goes on
    # after its restart, and no restore command runs twice
    proc = subprocess.Popen([sys.executable, "-m", "bke_cli.main", *argv, "--yes"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    await kill_upgrader_once(lab, "etcd-restore", "stages",
                             lambda s: s["name"] == "restore-members" and s["status"] != "Pending", "restore-members")
    out, err = await asyncio.to_thread(proc.communicate, timeout=600)
    assert proc.returncode == 0, out + err
    assert "etcd restore Succeeded: stage 6/6" in out, out
    restores = {cid: n for cid, n in lab.executions().items() if "/restore@" in cid}
    assert len(restores) == 5 * len(data.members) and set(restores.values()) == {1}, restores
    for m in data.members:
        host = lab.host(m.hostname)
        assert (host / f"{data.data_dir.lstrip('/')}.before-restore-{sid}/member").is_dir(), m.hostname  # old data kept
        assert not any((host / "var/lib/bke-agent/restore").iterdir()), m.hostname  # nothing received is left
    # restored with --bump-revision 1000000000 --mark-compacted: past every revision a watch has seen
    status = etcdctl(data.members[0].client_url, tls, "endpoint", "status", "-w", "json")
    assert json.loads(status[0])[0]["Status"]["header"]["revision"] > 1_000_000_000
    # the apiservers come back on the restored data
    got = await api_until(lambda: kubectl(OLDER, conf, "-n", "default", "get", "configmap", "before-snapshot", "-o", "json"),
                          lambda answer: answer.returncode == 0)
    assert json.loads(got.stdout)["data"] == {"k": "kept"}
    gone = kubectl(OLDER, conf, "-n", "default", "get", "configmap", "after-snapshot")
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stdout + gone.stderr
    nodes = kubectl_json(OLDER, conf, "get", "nodes")["items"]
    assert nodes and all(next(c for c in n["status"]["conditions"] if c["type"] == "Ready")["status"] == "True"
                         for n in nodes)


@pytest.mark.parametrize("release", MINORS[1:])
async def test_each_other_built_minor_installs_and_every_component_runs(release, tmp_path):
    """One spec per built minor: the seed layout cut to one master and its worker, which runs every
    component kind of the release (apiserver, controller-manager, scheduler, etcd, the worker's
    Node) at a third of the seed's control-plane processes; the split example covers the HA layout."""
    need_binaries(release)
    spec = real_spec(Path("examples/seed-3m1w.yaml"), tmp_path / "seed.yaml", release, "127.0.41", old_net="127.0.10")
    docs = spec.read_text().split("\n---\n")
    spec.write_text("\n---\n".join(d for d in docs if "hostname: master2" not in d and "hostname: master3" not in d))
    lab = Lab(tmp_path / "lab", spec, control_plane="real").start()
    try:
        assert await lab.install(timeout=300.0) == 0, lab.out.getvalue()
        conf = lab.host("master1") / "etc/kubernetes/admin.conf"
        version = kubectl_json(release, conf, "version")
        assert version["serverVersion"]["gitVersion"] == f"v{release}"
        for node in lab.plan.nodes:
            for status_file in (lab.host(node.hostname) / "var/lib/bke-lab/pods").glob("*.json"):
                status = json.loads(status_file.read_text())
                assert status["mode"] == "real" and status["phase"] == "Running" and status["ready"], status
        nodes = kubectl_json(release, conf, "get", "nodes")["items"]
        assert len(nodes) == len(lab.plan.nodes)
        assert all(next(c for c in n["status"]["conditions"] if c["type"] == "Ready")["status"] == "True" for n in nodes)
    finally:
        lab.down()
