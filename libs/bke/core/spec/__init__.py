"""The cluster spec: models, loading, validation."""
from .errors import FieldError, format_errors
from .limits import SpecTooLarge, read_capped
from .loader import MAX_NODES, MAX_SPEC_BYTES, LoadResult, load_spec
from .models import API_VERSION, KEY_ALGORITHMS, ROLES, BKECluster, BKENode, ClusterSpec
from .validate import ValidationReport, validate_spec

__all__ = [
    "API_VERSION",
    "KEY_ALGORITHMS",
    "MAX_NODES",
    "MAX_SPEC_BYTES",
    "ROLES",
    "BKECluster",
    "BKENode",
    "ClusterSpec",
    "FieldError",
    "LoadResult",
    "SpecTooLarge",
    "ValidationReport",
    "format_errors",
    "load_spec",
    "read_capped",
    "validate_spec",
]
