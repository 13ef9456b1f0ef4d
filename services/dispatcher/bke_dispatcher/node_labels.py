"""The `node-labels` phase lives in `bke.cluster_api.node_labels` (the upgrader's run of a
changed spec sets labels and taints with the same code)."""
from bke.cluster_api.node_labels import (
    BATCH,
    REGISTER_TIMEOUT_S,
    LabNodes,
    NodeLabelsWork,
    NodeMarker,
    NodesApplied,
)

__all__ = ["BATCH", "LabNodes", "NodeLabelsWork", "NodeMarker", "NodesApplied", "REGISTER_TIMEOUT_S"]
