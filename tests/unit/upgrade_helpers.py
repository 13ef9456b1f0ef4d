"""Plans for the upgrade tests: the repository's examples with their versions replaced."""
from __future__ import annotations

from pathlib import Path

from bke.core.plan import Plan, plan_spec_text

__all__ = ["SEED", "SPLIT", "events_spec", "plan_of"]

EXAMPLES = Path(__file__).parent.parent.parent / "examples"
SEED = EXAMPLES / "seed-3m1w.yaml"
SPLIT = EXAMPLES / "split-etcd.yaml"


def plan_of(example: Path, kubernetes: str = "v1.33.2", etcd: str = "v3.5.1", containerd: str = "v2.1.1",
            extra: tuple[str, str] | None = None) -> Plan:
    text = (example.read_text()
            .replace("kubernetesVersion: v1.33.2", f"kubernetesVersion: {kubernetes}")
            # kube-proxy is listed at the Kubernetes version, and must stay within its skew
            .replace("{name: kube-proxy, version: v1.33.2}", f"{{name: kube-proxy, version: {kubernetes}}}")
            .replace("etcdVersion: v3.5.1", f"etcdVersion: {etcd}")
            .replace("containerdVersion: v2.1.1", f"containerdVersion: {containerd}"))
    if extra:
        assert extra[0] in text
        text = text.replace(*extra)
    outcome = plan_spec_text(text, str(example))
    assert outcome.plan is not None, outcome.errors
    return outcome.plan


def events_spec(name: str, net: str, events: tuple[str, ...]) -> str:
    """A split cluster `name` on the lab network `net` (three octets): one master, one etcd-data
    member, and the etcd-events members `events` on nodes of their own (`eventsN` at `net.2N`)."""
    head = f"""apiVersion: bke.bocloud.com/v1beta1
kind: BKECluster
metadata: {{name: {name}}}
spec:
  controlPlaneEndpoint: {{host: {net}.1, port: 6443}}
  clusterConfig:
    cluster:
      kubernetesVersion: v1.33.2
      etcdVersion: v3.5.1
      containerdVersion: v2.1.1
      certificates: {{keyAlgorithm: ECDSA-P256}}
"""
    nodes = [("m1", f"{net}.1", "[master/node]"), ("etcd1", f"{net}.11", "[etcd]")]
    nodes += [(h, f"{net}.{20 + int(h[-1])}", "[etcd-event]") for h in events]
    return head + "".join(f"---\napiVersion: bke.bocloud.com/v1beta1\nkind: BKENode\nmetadata: {{name: {name}-{h}}}\n"
                          f"spec: {{hostname: {h}, ip: {ip}, role: {role}}}\n" for h, ip, role in nodes)
