"""The lab has no httpRepo: a stand-in for upstream's calico.yaml, with the same shape.

NOT calico's manifest and not a copy of it: a few calico-shaped objects written here from
scratch (ServiceAccounts, a ClusterRole and its binding, the calico-config ConfigMap, the
DaemonSet kube-system/calico-node with its calico-node container, the Deployment
calico-kube-controllers), so that the lab exercises the same wiring (pod CIDR, images, data
plane), validation, checksum and record as a real install. A service in lab mode fetches it
(bke.lab.standins.manifests), and the `bundle` helper's fake upstream serves the same bytes.
"""
from __future__ import annotations

import hashlib
from typing import Any

import yaml

__all__ = ["lab_calico_manifest", "lab_calico_sha256"]

_NS = "kube-system"
# A CNI configuration template of the shape calico.yaml's has (written here, not copied): a conflist
# whose calico plugin names calico-ipam, with install-cni's placeholders, one of them unquoted, so
# that it is not JSON until install-cni fills it in - which is why bke.core.calico edits its IPAM by text.
_CNI_TEMPLATE = """{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {
      "type": "calico",
      "datastore_type": "kubernetes",
      "nodename": "__KUBERNETES_NODE_NAME__",
      "mtu": __CNI_MTU__,
      "ipam": {
          "type": "calico-ipam"
      },
      "policy": {"type": "k8s"},
      "kubernetes": {"kubeconfig": "__KUBECONFIG_FILEPATH__"}
    },
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}}
  ]
}"""


def _sa(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": _NS}}


def _objects(version: str) -> list[dict[str, Any]]:
    tag = f"v{version.lstrip('v')}"
    labels = {"k8s-app": "calico-node"}
    return [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "calico-config", "namespace": _NS},
         "data": {"calico_backend": "bird", "veth_mtu": "0", "note": "bke lab stand-in, not calico's manifest",
                  "cni_network_config": _CNI_TEMPLATE}},
        _sa("calico-node"),
        _sa("calico-kube-controllers"),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "calico-node"},
         "rules": [{"apiGroups": [""], "resources": ["pods", "nodes", "namespaces"], "verbs": ["get", "list", "watch"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "calico-node"},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "calico-node"},
         "subjects": [{"kind": "ServiceAccount", "name": "calico-node", "namespace": _NS}]},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "calico-node", "namespace": _NS, "labels": labels},
         "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
             "hostNetwork": True, "serviceAccountName": "calico-node", "priorityClassName": "system-node-critical",
             "tolerations": [{"operator": "Exists"}],
             "initContainers": [{"name": "install-cni", "image": f"docker.io/calico/cni:{tag}",
                                 "command": ["/opt/cni/bin/install"]}],
             "containers": [{"name": "calico-node", "image": f"docker.io/calico/node:{tag}",
                             "env": [{"name": "DATASTORE_TYPE", "value": "kubernetes"},
                                     {"name": "CALICO_NETWORKING_BACKEND", "valueFrom": {"configMapKeyRef": {
                                         "name": "calico-config", "key": "calico_backend"}}}],
                             "securityContext": {"privileged": True}}]}}}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "calico-kube-controllers", "namespace": _NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": {"k8s-app": "calico-kube-controllers"}},
                  "template": {"metadata": {"labels": {"k8s-app": "calico-kube-controllers"}}, "spec": {
                      "serviceAccountName": "calico-kube-controllers", "priorityClassName": "system-cluster-critical",
                      "containers": [{"name": "calico-kube-controllers",
                                      "image": f"docker.io/calico/kube-controllers:{tag}"}]}}}},
    ]


def lab_calico_manifest(version: str) -> bytes:
    """The stand-in's bytes for one calico version (deterministic: same version, same bytes)."""
    header = f"# bke lab stand-in for calico {version}: calico-shaped objects, not calico's manifest\n"
    return (header + "---\n".join(yaml.safe_dump(o, sort_keys=True) for o in _objects(version))).encode()


def lab_calico_sha256(version: str) -> str:
    return hashlib.sha256(lab_calico_manifest(version)).hexdigest()
