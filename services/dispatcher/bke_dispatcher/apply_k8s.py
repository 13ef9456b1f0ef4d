"""Server-side apply lives in `bke.cluster_api.apply_k8s` (the upgrader uses it too)."""
from bke.cluster_api.apply_k8s import FIELD_MANAGER, KubernetesApplier, kube_system_pods

__all__ = ["FIELD_MANAGER", "KubernetesApplier", "kube_system_pods"]
