"""Node labels and taints live in `bke.cluster_api.labels` (the upgrader sets them too)."""
from bke.cluster_api.labels import Marks, marks_from_record, node_patch, record, wanted

__all__ = ["Marks", "marks_from_record", "node_patch", "record", "wanted"]
