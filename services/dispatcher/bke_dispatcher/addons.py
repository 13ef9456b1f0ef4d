"""The addons phase's work lives in `bke.cluster_api.addons` (the upgrader applies addons too)."""
from bke.cluster_api.addons import AddonsWork, LabApplier, load_addon_objects, validate_objects

__all__ = ["AddonsWork", "LabApplier", "load_addon_objects", "validate_objects"]
