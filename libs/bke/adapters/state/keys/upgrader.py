"""The upgrader's keys: upgrades (and changed specs, `bke apply`) and etcd restores.

    bke:upgrades                         set     clusters with an upgrade record (upgrader)
    bke:<c>:upgrade[:results|:nodes]     string / hash  an upgrade, its answers, the nodes' versions (upgrader)
    bke:<c>:upgrade:certs                string  the renewal's answer to an upgrade (upgrader)
    bke:<c>:etcd-restore                 string  the current or last etcd restore, JSON  (upgrader)
    bke:<c>:etcd-restore:results         hash    command id -> the agent's answer        (upgrader)
    bke:etcd-restores                    set     clusters with an etcd restore record    (upgrader)
"""
from __future__ import annotations

from .common import OperationKeys, cluster_key

__all__ = ["etcd_restore_key", "etcd_restore_results_key", "etcd_restores_index", "upgrade_certs_key", "upgrade_key",
           "upgrade_nodes_key", "upgrade_results_key", "upgrades_index"]


# each resumed after an upgrader restart: an upgrade (bke.core.upgrade.run.UpgradeRun), an etcd
# restore (bke.core.etcdsnap.restore_run.RestoreRun)
upgrade_key, upgrade_results_key, upgrades_index = OperationKeys("upgrade", "upgrades").builders()
etcd_restore_key, etcd_restore_results_key, etcd_restores_index = OperationKeys("etcd-restore", "etcd-restores").builders()


def upgrade_certs_key(cluster: str) -> str:
    """The certs service's answer to the upgrade's renewal (CertsRenewed or CertsFailed, JSON)."""
    return cluster_key(cluster, "upgrade", "certs")


def upgrade_nodes_key(cluster: str) -> str:
    """Node -> the versions its components run, and the target it is behind on (if it is),
    written when an upgrade ends (bke.core.upgrade.node_versions): what `bke retry --nodes` reads."""
    return cluster_key(cluster, "upgrade", "nodes")
