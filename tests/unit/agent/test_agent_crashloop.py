"""A replaced static pod that keeps exiting: the component's own last error line picked from its
log (never key material), the container runtime's record read from recorded crictl outputs,
and a ReplaceFiles step that fails early, rolled back, with that line in its reason."""
from __future__ import annotations

import base64
import hashlib
import json
import time
from pathlib import Path

import pytest

from bke.contracts.agent import AgentCommand
from bke.contracts.agent_steps import HealthProbe, NewFile, ReplaceFiles
from bke_agent import AgentIdentity, Executor, HostBackend, LabBackend
from bke_agent.backends import crashloop
from bke_agent.backends.crashloop import CRASH_EXITS, Exits, crash_reason
from bke_agent.backends.cri import CriExits, exit_code_of, exits_of, pod_names
from bke_agent.backends.errorlines import MAX_CHARS, error_lines
from bke_agent.backends.proc import ProgramRun
from bke_agent.errors import NotHealthy, PathRefused
from bke_agent.kubelet import KubeletStandIn
from bke_agent.kubelet.pods import plan_pod
from bke_agent.kubelet.running import RealPod, SimulatedPod
from bke_agent.lablayout import REFUSED_ARG, LabLayout, write_fault, write_refusal

MANIFEST = "/etc/kubernetes/manifests/kube-apiserver.yaml"
KLOG_ERROR = ('E1205 07:31:49.864488   25305 run.go:72] "command failed" err="--storage-backend invalid, '
              "allowed values: etcd3. If not specified, it will default to 'etcd3'\"")
KEY_B64 = "MHcCAQEEIBkYyq2p0Ua8Vw3XJ0dD3f1L9q7mZtPq0YwZrQ5x8gNnoAoGCCqGSM49AwEHoUQDQgAE"


# --- the component's own error line -------------------------------------------------------

def test_a_klog_error_is_chosen_over_the_info_and_warning_lines_around_it() -> None:
    log = "\n".join([
        "I1205 07:31:49.585523   25305 options.go:369] external host was not specified",
        "W1205 07:31:49.863998   25305 authentication.go:841] AnonymousAuth is not allowed",
        KLOG_ERROR,
        "I1205 07:31:49.900000   25305 server.go:1] shutting down",
    ])
    assert error_lines(log) == [KLOG_ERROR]


def test_cobras_error_after_a_page_of_usage_and_one_line_per_restart() -> None:
    usage = "\n".join(f"      --flag-{i} string   some help text, unknown to no one" for i in range(30))
    once = f"Usage:\n  kube-controller-manager [flags]\n{usage}\nError: unknown flag: --bke-lab-refused-on-purpose\n"
    assert error_lines(once * 3) == ["Error: unknown flag: --bke-lab-refused-on-purpose"]


def test_etcds_json_fatal_line_and_gos_flag_error_in_words() -> None:
    zap = json.dumps({"level": "fatal", "ts": "2026-12-05T07:31:49Z", "caller": "etcdmain/etcd.go:204",
                      "msg": "discovery failed", "error": "listen tcp 127.0.0.1:2379: bind: address already in use"})
    info = json.dumps({"level": "info", "msg": "starting"})
    assert error_lines(f"{info}\n{zap}\n") == [
        "fatal: discovery failed listen tcp 127.0.0.1:2379: bind: address already in use"]
    flag = "flag provided but not defined: -bke-lab-refused-on-purpose\nUsage:\n\n  etcd [flags]\n    Start an etcd server.\n"
    assert error_lines(flag) == ["flag provided but not defined: -bke-lab-refused-on-purpose"]


def test_without_any_error_line_the_last_lines_it_wrote_and_nothing_for_an_empty_log() -> None:
    assert error_lines("starting\nlistening on 6443\nbye\n") == ["listening on 6443", "bye"]
    assert error_lines("") == [] and error_lines("\n\n") == []


def test_the_last_two_distinct_errors_oldest_first_each_bounded() -> None:
    log = "\n".join(["Error: first", "Error: second", "E1205 07:31:49.1 1 a.go:1] third " + "x" * 500,
                     "E1205 07:31:50.2 1 a.go:1] third " + "x" * 500])
    lines = error_lines(log)
    assert len(lines) == 2 and lines[0] == "Error: second"
    assert lines[1].startswith("E1205 07:31:50.2") and len(lines[1]) == MAX_CHARS and lines[1].endswith("…")


def test_key_material_never_comes_out() -> None:
    log = "\n".join([
        "Error: could not parse the key below",
        "-----BEGIN EC PRIVATE KEY-----", KEY_B64, "-----END EC PRIVATE KEY-----",
        f'E1205 07:31:49.1 1 a.go:1] "bad kubeconfig" client-key-data: {KEY_B64} token=abc.def.ghi password="p4ss word"',
        f"Error: cannot load {KEY_B64}Zz9 from /etc/kubernetes/pki/apiserver-etcd-client.key",
    ])
    out = " ".join(error_lines(log, max_lines=5))
    assert KEY_B64 not in out and "PRIVATE KEY" not in out and "abc.def.ghi" not in out and "p4ss" not in out
    assert "client-key-data: [redacted]" in out and "token=[redacted]" in out
    # paths and digests are one case only: kept
    assert "/etc/kubernetes/pki/apiserver-etcd-client.key" in out
    digest = hashlib.sha256(b"x").hexdigest()
    assert error_lines(f"Error: sha256 {digest} does not match") == [f"Error: sha256 {digest} does not match"]


def test_the_reason_names_the_component_the_exits_the_code_and_its_line() -> None:
    reason = crash_reason(MANIFEST, Exits(3, 1, f"I1205 07:31:49.1 1 a.go:1] starting\n{KLOG_ERROR}\n"))
    assert reason == (f"kube-apiserver exited 3 times since its new manifest was written, last with exit code 1; "
                      f"its last error: {KLOG_ERROR}")
    assert crash_reason(MANIFEST, Exits(4)).endswith("exited 4 times since its new manifest was written; it logged nothing")


# --- the container runtime's record (crictl), from recorded outputs ------------------------

SINCE = 1_765_000_000.0
NS = int(SINCE * 1e9)


def _container(cid: str, pod: str, attempt: int, state: str, created_ns: int, name: str = "kube-apiserver") -> dict:
    """One entry of `crictl ps -a -o json` as crictl prints it (protojson: lowerCamelCase, int64
    as a string, the state's enum name, the kubelet's labels)."""
    return {
        "id": cid, "podSandboxId": f"sandbox-{pod}", "metadata": {"name": name, "attempt": attempt},
        "image": {"image": "sha256:0d1a", "annotations": {}, "userSpecifiedImage": "", "runtimeHandler": ""},
        "imageRef": "sha256:0d1a", "state": state, "createdAt": str(created_ns),
        "labels": {"io.kubernetes.container.name": name, "io.kubernetes.pod.name": pod,
                   "io.kubernetes.pod.namespace": "kube-system", "io.kubernetes.pod.uid": f"uid-{pod}"},
        "annotations": {"io.kubernetes.container.restartCount": str(attempt)}, "imageId": "",
    }


PS_CRASHING = {"containers": [
    _container("c3", "kube-apiserver-m1", 2, "CONTAINER_EXITED", NS + 40_000_000_000),
    _container("c2", "kube-apiserver-m1", 1, "CONTAINER_EXITED", NS + 10_000_000_000),
    _container("c0", "kube-apiserver-m1", 7, "CONTAINER_EXITED", NS - 60_000_000_000),  # the old pod's
]}
INSPECT = {"status": {"id": "c3", "metadata": {"name": "kube-apiserver", "attempt": 2}, "state": "CONTAINER_EXITED",
                      "createdAt": "2026-12-05T07:31:49.1Z", "startedAt": "2026-12-05T07:31:49.2Z",
                      "finishedAt": "2026-12-05T07:31:50Z", "exitCode": 1, "reason": "Error", "message": "",
                      "labels": {}, "annotations": {}, "mounts": [], "logPath": "/var/log/pods/x/0.log"}}


def test_exits_of_the_new_pods_container_only() -> None:
    assert exits_of(PS_CRASHING, "kube-apiserver", NS) == (3, "c3")  # attempts 0, 1, 2 all exited
    running = {"containers": [_container("c4", "kube-apiserver-m1", 2, "CONTAINER_RUNNING", NS + 80_000_000_000),
                              *PS_CRASHING["containers"]]}
    assert exits_of(running, "kube-apiserver", NS) == (2, "c3")  # restarted twice, running now
    assert exits_of(PS_CRASHING, "kube-scheduler", NS) == (0, "")
    assert exits_of(PS_CRASHING, "kube-apiserver", NS + 100_000_000_000) == (0, "")  # all older than the write
    assert exits_of({"containers": []}, "kube-apiserver", NS) == (0, "") == exits_of(None, "kube-apiserver", NS)


def test_exit_code_of_crictl_inspect() -> None:
    assert exit_code_of(INSPECT) == 1
    assert exit_code_of({"status": {"exitCode": 0}}) == 0
    assert exit_code_of({"status": {}}) is None and exit_code_of([]) is None


def test_pod_names_from_a_manifest() -> None:
    doc = {"metadata": {"name": "kube-apiserver", "namespace": "kube-system"},
           "spec": {"containers": [{"name": "kube-apiserver"}]}}
    names = pod_names(json.dumps(doc).encode())
    assert names is not None and (names.pod, names.namespace, names.container) == ("kube-apiserver", "kube-system",
                                                                                   "kube-apiserver")
    assert pod_names(b"not: [a pod") is None and pod_names(b"kind: Pod\n") is None


async def test_cri_exits_asks_crictl_and_reads_its_answers() -> None:
    asked: list[list[str]] = []
    manifest = json.dumps({"metadata": {"name": "kube-apiserver", "namespace": "kube-system"},
                           "spec": {"containers": [{"name": "kube-apiserver"}]}}).encode()

    async def crictl(args: list[str]) -> ProgramRun:
        asked.append(args)
        if args[0] == "ps":
            return ProgramRun(0, json.dumps(PS_CRASHING).encode(), b"")
        if args[0] == "inspect":
            return ProgramRun(0, json.dumps(INSPECT).encode(), b"")
        return ProgramRun(0, b"", f"I1205 07:31:49.1 1 a.go:1] starting\n{KLOG_ERROR}\n".encode())

    source = CriExits(crictl, lambda _p: manifest)
    assert await source.pod_exits(MANIFEST, "sha", SINCE, False) == Exits(3)
    assert asked == [["ps", "-a", "--name", "^kube-apiserver$", "--namespace", "^kube-system$", "-o", "json"]]
    detail = await source.pod_exits(MANIFEST, "sha", SINCE, True)
    assert (detail.count, detail.code) == (3, 1) and KLOG_ERROR in detail.log_tail
    assert asked[-2:] == [["inspect", "--quiet", "-o", "json", "c3"], ["logs", "--tail", "40", "c3"]]


async def test_no_crictl_or_an_answer_it_cannot_read_knows_no_exits() -> None:
    async def absent(_args: list[str]) -> None:
        return None

    async def failing(_args: list[str]) -> ProgramRun:
        return ProgramRun(1, b"not json", b"connect: connection refused")

    manifest = b"metadata: {name: kube-apiserver}\nspec: {containers: [{name: kube-apiserver}]}\n"
    for crictl in (absent, failing):
        assert await CriExits(crictl, lambda _p: manifest).pod_exits(MANIFEST, "sha", SINCE, True) == Exits()

    def gone(_p: str) -> bytes:
        raise FileNotFoundError(_p)

    assert await CriExits(failing, gone).pod_exits(MANIFEST, "sha", SINCE, True) == Exits()


# --- a ReplaceFiles step that ends early ---------------------------------------------------

OLD = b"image: registry.k8s.io/kube-apiserver:v1.36.3\n"
NEW = b"image: registry.k8s.io/kube-apiserver:v1.37.2\n"


class CrashingNode(LabBackend):
    """The lab backend with a scripted kubelet: the NEW manifest's pod keeps exiting (its pod
    never runs, its probe never answers), the old one runs healthy."""

    def __init__(self, root: Path, exits: int) -> None:
        super().__init__(root, "127.0.0.1")
        self.exits, self.asked = exits, 0

    def _is_new(self, sha256: str) -> bool:
        return sha256 == hashlib.sha256(NEW).hexdigest()

    async def restart_unit(self, unit: str) -> None:
        return None

    async def probe(self, probe: HealthProbe, timeout_s: float) -> None:
        if (self.root / MANIFEST.lstrip("/")).read_bytes() == NEW:
            raise NotHealthy(probe.url, timeout_s, "ConnectError: connection refused")

    async def pod_started(self, node_path: str, sha256: str, since: float) -> str:
        return "CrashLoopBackOff: process exited" if self._is_new(sha256) else ""

    async def pod_exits(self, node_path: str, sha256: str, since: float, detail: bool) -> Exits:
        self.asked += 1
        if not self._is_new(sha256):
            return Exits()
        return Exits(self.exits, None, f"{KLOG_ERROR}\n" if detail else "")


def _replace(timeout_s: float) -> ReplaceFiles:
    return ReplaceFiles(id="replace:kube-apiserver", timeout_s=timeout_s, rollback_timeout_s=5,
                        files=[NewFile(path=MANIFEST, mode=0o600, content_b64=base64.b64encode(NEW).decode(),
                                       sha256=hashlib.sha256(NEW).hexdigest())],
                        probes=[HealthProbe(url="https://127.0.0.1:6443/livez")])


async def _run(node: LabBackend, step: ReplaceFiles):
    cmd = AgentCommand(command_id="c1/upgrade/m1/0", cluster="c1", node="m1", phase="upgrade", issued_at="t", steps=[step])
    [res] = (await Executor(node, AgentIdentity.ephemeral()).run(cmd)).steps
    return res


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "hosts/m1"
    (r / "etc/kubernetes/manifests").mkdir(parents=True)
    (r / MANIFEST.lstrip("/")).write_bytes(OLD)
    return r


async def test_a_pod_that_keeps_exiting_is_rolled_back_early_with_its_own_error_line(root: Path, monkeypatch) -> None:
    monkeypatch.setattr(crashloop, "WATCH_EVERY_S", 0.05)
    node = CrashingNode(root, CRASH_EXITS)
    t0 = time.monotonic()
    res = await _run(node, _replace(timeout_s=60))
    took = time.monotonic() - t0
    assert res.status == "Failed" and took < 10, (took, res.stderr)
    assert res.stderr == (f"rolled back {MANIFEST}: kube-apiserver exited 3 times since its new manifest was written; "
                          f"its last error: {KLOG_ERROR}; the previous files are back and healthy")
    assert (root / MANIFEST.lstrip("/")).read_bytes() == OLD


async def test_fewer_exits_than_the_threshold_wait_the_whole_timeout(root: Path, monkeypatch) -> None:
    monkeypatch.setattr(crashloop, "WATCH_EVERY_S", 0.05)
    node = CrashingNode(root, CRASH_EXITS - 1)
    res = await _run(node, _replace(timeout_s=1))
    assert res.status == "Failed" and node.asked >= 2
    assert res.stderr.startswith(f"rolled back {MANIFEST}: not healthy within 1s (the kubelet runs no pod of the new "
                                 "kube-apiserver.yaml (CrashLoopBackOff: process exited))"), res.stderr
    assert "exited" not in res.stderr.split("(CrashLoopBackOff")[0]


# --- the lab's injection: a real component version that refuses to start --------------------

APISERVER_POD = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "kube-apiserver", "namespace": "kube-system"},
    "spec": {"hostNetwork": True, "containers": [{
        "name": "kube-apiserver", "image": "registry.k8s.io/kube-apiserver:v1.37.2",
        "command": ["kube-apiserver", "--secure-port=6443", "--storage-backend=etcd3"]}]},
}


def test_faults_name_the_argument_a_real_component_version_refuses(tmp_path: Path) -> None:
    layout = LabLayout(tmp_path)
    assert layout.refused_arg("kube-apiserver", "v1.37.2") is None  # no faults.json
    write_refusal(tmp_path, "kube-apiserver", "v1.37.2", "--storage-backend=etcd2")
    write_refusal(tmp_path, "etcd", "3.6.6-0")
    write_refusal(tmp_path, "etcd", "3.6.6-0")  # idempotent
    write_fault(tmp_path, "kube-apiserver", "v1.37.2")  # the simulated kind beside it
    assert layout.refused_arg("kube-apiserver", "v1.37.2") == "--storage-backend=etcd2"
    assert layout.refused_arg("etcd", "3.6.6-0") == REFUSED_ARG
    assert layout.refused_arg("kube-apiserver", "v1.36.3") is None and layout.refused_arg("kube-scheduler", "v1.37.2") is None
    doc = json.loads(layout.faults_file.read_text())
    assert len(doc["refuses"]) == 2 and doc["unhealthy"] == [{"component": "kube-apiserver", "version": "v1.37.2"}]


def test_the_stand_in_starts_only_a_refused_versions_real_process_with_the_argument(tmp_path: Path) -> None:
    kubelet = KubeletStandIn(tmp_path, "127.0.0.1", control_plane="simulated")
    plan = plan_pod(json.dumps(APISERVER_POD).encode(), "kube-apiserver.yaml", tmp_path, "127.0.0.1")
    real = RealPod(plan, kubelet.layout, Path("/usr/local/bin/kube-apiserver"))
    assert kubelet._refusing(real) is real and kubelet._refusing("not built") == "not built"
    write_refusal(tmp_path, "kube-apiserver", "v1.37.2", "--storage-backend=etcd2")
    refused = kubelet._refusing(real)
    assert isinstance(refused, RealPod) and refused.binary == real.binary
    assert refused.plan.local.argv == (*plan.local.argv, "--storage-backend=etcd2")
    # appended: the last value of a flag is the one a Kubernetes binary (pflag) takes; the
    # manifest's own plan is not changed
    assert "--storage-backend=etcd3" in plan.local.argv and "--storage-backend=etcd2" not in plan.local.argv
    simulated = SimulatedPod(plan, kubelet.layout, "127.0.0.1")
    assert kubelet._refusing(simulated) is simulated  # the simulated lab breaks a version with `unhealthy`
    other = plan_pod(json.dumps(APISERVER_POD).replace("v1.37.2", "v1.36.3").encode(), "kube-apiserver.yaml",
                     tmp_path, "127.0.0.1")
    assert kubelet._refusing(RealPod(other, kubelet.layout, real.binary)).plan is other


def test_no_step_can_write_the_lab_faults(tmp_path: Path) -> None:
    """The injection is the lab's own: the lab backend refuses every path under its control files."""
    with pytest.raises(PathRefused):
        LabBackend(tmp_path, "127.0.0.1").policy.local("/var/lib/bke-lab/faults.json")


async def test_the_host_backend_asks_its_crictl_and_without_one_knows_no_exits(tmp_path: Path) -> None:
    """HostBackend.pod_exits through a crictl stand-in script answering with the recorded outputs
    (by subcommand; the container's log on stderr, as crictl passes it through)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    crictl = bindir / "crictl"
    crictl.write_text("#!/bin/sh\ncase \"$1\" in\n"
                      f"ps) cat <<'EOF'\n{json.dumps(PS_CRASHING)}\nEOF\n;;\n"
                      f"inspect) cat <<'EOF'\n{json.dumps(INSPECT)}\nEOF\n;;\n"
                      f"logs) cat >&2 <<'EOF'\n{KLOG_ERROR}\nEOF\n;;\nesac\n")
    crictl.chmod(0o755)
    manifest = tmp_path / MANIFEST.lstrip("/")
    manifest.parent.mkdir(parents=True)
    manifest.write_text("metadata: {name: kube-apiserver, namespace: kube-system}\nspec: {containers: [{name: kube-apiserver}]}\n")
    host = HostBackend(tmp_path, program_dirs=(str(bindir),), state_dir=tmp_path / "state")
    assert await host.pod_exits(MANIFEST, "sha", SINCE, False) == Exits(3)
    detail = await host.pod_exits(MANIFEST, "sha", SINCE, True)
    assert (detail.count, detail.code) == (3, 1)
    assert crash_reason(MANIFEST, detail).endswith(f"last with exit code 1; its last error: {KLOG_ERROR}")
    crictl.chmod(0o644)  # there, but not a program it may run: no count, the step waits its timeout
    assert await host.pod_exits(MANIFEST, "sha", SINCE, True) == Exits()
