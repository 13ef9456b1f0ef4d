"""The install phase table: order, targets, file routing, step building (pure)."""
from __future__ import annotations

from bke.contracts.agent_steps import CheckHost, FetchFile, SystemdUnit, WaitHealth, WriteFile
from bke.core.plan import plan_spec_text
from bke.core.state.nodefiles import file_from_bytes
from bke.adapters.checksums import artefact_urls
from bke_dispatcher.command_ids import command_id, parse_command_id
from bke.contracts.statuses import PhaseNeed
from bke_dispatcher.phases import PHASES, NodeInputs, init_node, phase_by_slug
from bke.core.node_steps import file_phase

SEED = plan_spec_text(open("examples/seed-3m1w.yaml").read()).plan
BIG = plan_spec_text(open("examples/split-etcd.yaml").read()).plan


def test_table_order_and_summaries():
    assert all(p.summary for p in PHASES) and len({p.slug for p in PHASES}) == len(PHASES)
    assert [p.slug for p in PHASES][:5] == ["agents", "node-env", "certs", "load-balancer", "etcd"]
    # etcd strictly before any apiserver
    slugs = [p.slug for p in PHASES]
    assert slugs.index("etcd") < slugs.index("control-plane-init") < slugs.index("control-plane-join")


def test_targets():
    names = lambda slug, plan: [n.hostname for n in phase_by_slug(slug).targets(plan)]  # noqa: E731
    assert names("etcd", SEED) == ["master1", "master2", "master3"]
    assert names("control-plane-init", SEED) == ["master1"]  # the endpoint's node
    assert names("control-plane-join", SEED) == ["master2", "master3"]
    assert names("workers", SEED) == ["node1"]
    assert not phase_by_slug("load-balancer").run_if(SEED) and phase_by_slug("load-balancer").run_if(BIG)
    assert names("etcd", BIG) == [f"etcd{i}" for i in (1, 2, 3)] + [f"events{i}" for i in (1, 2, 3)] + [f"pods{i}" for i in (1, 2, 3)]
    assert init_node(BIG).hostname == "m1"  # VIP endpoint: the first apiserver node
    assert names("control-plane-join", BIG) == ["m2", "m3", "m4", "m5"]
    assert names("workers", BIG) == ["worker1", "worker2", "worker3", "worker4"]


def test_files_are_routed_to_their_phase():
    assert file_phase("/etc/kubernetes/manifests/etcd-events.yaml") == "etcd"
    assert file_phase("/etc/kubernetes/manifests/kube-apiserver.yaml") == "control-plane"
    assert file_phase("/etc/kubernetes/manifests/haproxy.yaml") == "load-balancer"
    assert file_phase("/etc/keepalived/keepalived.conf") == "load-balancer"
    assert file_phase("/etc/containerd/config.toml") == "node-env"
    assert file_phase("/var/lib/kubelet/config.yaml") == "node-env"


def test_steps_for_a_master():
    node = SEED.node("master1")
    files = [
        file_from_bytes("/etc/containerd/config.toml", b"version = 3\n"),
        file_from_bytes("/etc/kubernetes/manifests/etcd.yaml", b"kind: Pod\n"),
        file_from_bytes("/etc/kubernetes/manifests/kube-apiserver.yaml", b"kind: Pod\n"),
    ]
    sums = {url: "0" * 64 for url in artefact_urls(SEED)}
    inp = NodeInputs(render=files, certs=[], checksums=sums)
    env = phase_by_slug("node-env").build(SEED, node, inp)
    assert isinstance(env[0], CheckHost) and 2379 in env[0].ports and 6443 in env[0].ports
    fetched = [s.path for s in env if isinstance(s, FetchFile)]
    assert fetched[:5] == ["/usr/local/bin/containerd", "/usr/local/bin/containerd-shim-runc-v2", "/usr/local/sbin/runc",
                           "/usr/bin/kubelet", "/usr/bin/kubectl"]  # and crictl, the CNI plugins (test_node_env)
    assert [s.path for s in env if isinstance(s, WriteFile)] == ["/etc/containerd/config.toml"]
    assert isinstance(env[-1], SystemdUnit) and env[-1].unit == "kubelet.service"  # kubelet before any static pod
    etcd = phase_by_slug("etcd").build(SEED, node, inp)
    assert [s.path for s in etcd if isinstance(s, WriteFile)] == ["/etc/kubernetes/manifests/etcd.yaml"]
    assert [s.url for s in etcd if isinstance(s, WaitHealth)] == ["http://127.0.0.1:2381/health"]
    cp = phase_by_slug("control-plane-init").build(SEED, node, inp)
    assert [s.path for s in cp if isinstance(s, WriteFile)] == ["/etc/kubernetes/manifests/kube-apiserver.yaml"]
    assert "https://127.0.0.1:6443/livez" in [s.url for s in cp if isinstance(s, WaitHealth)]


def test_command_ids_are_deterministic_and_parse_back():
    cid = command_id("seed", "etcd", "node.example", 2)
    assert parse_command_id(cid) == ("seed", "etcd", "node.example", 2)


class _Watched(list):  # type: ignore[type-arg]
    """A node's rendered files that remember being looked at."""

    looked = False

    def __iter__(self):  # type: ignore[no-untyped-def]
        self.looked = True
        return super().__iter__()


def test_a_phase_reads_rendered_files_only_when_the_table_says_it_needs_them():
    """The install reads (and checks the signatures of) a chunk's rendered files only for a phase
    that needs "render": a phase whose steps use them without saying so would send nodes no file."""
    sums = {url: "0" * 64 for url in artefact_urls(BIG)}
    said = {p.slug for p in PHASES if PhaseNeed.RENDER in p.needs}
    assert said == {"node-env", "load-balancer", "etcd", "control-plane-init", "control-plane-join"}
    for phase in PHASES:
        if phase.build is None:
            continue
        looked = False
        for node in phase.targets(BIG)[:3]:
            files = _Watched([file_from_bytes("/etc/kubernetes/manifests/etcd.yaml", b"kind: Pod\n")])
            phase.build(BIG, node, NodeInputs(render=files, certs=[], checksums=sums, seal=lambda b: b))
            looked = looked or files.looked
        assert looked == (PhaseNeed.RENDER in phase.needs), phase.slug
