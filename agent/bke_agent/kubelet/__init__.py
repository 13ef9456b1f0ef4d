"""The lab's kubelet stand-in (see `standin`)."""
from .standin import KubeletStandIn

__all__ = ["KubeletStandIn"]
