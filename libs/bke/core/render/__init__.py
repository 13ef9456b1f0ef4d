"""The renderer: a plan in, every node's files and the cluster's addon manifests out.

Pure and deterministic (no I/O, clock or randomness): the per-cluster VRRP password is generated
once by the caller (`generate_vrrp_password`) and passed in as an input. See docs/renderer.md.

Public surface (guarded by a test): render_cluster and its inputs/outputs, the data tables (gates,
presets, denylist, template ranges) and the typed errors.
"""
from bke.core.flagrules.gates import GATES, Gate, VersionSet, gate_open

from .args import DENYLIST, DenyRule, format_flags, merge_args
from .context import EtcdJoin, RenderInputs, generate_vrrp_password
from .errors import (DeniedFlagError, Finding, InvalidOutputError, MissingInputError, RenderError, RenderRejected,
                     UnsupportedVersionError)
from .gates import resolve_versions
from .presets import PRESETS, TIERS, ClusterFacts, Preset, Tier, preset_args, tier_for
from .render import FILES, render_cluster, preload_templates
from .result import NodeDiff, NodeFiles, RenderedCluster, RenderedFile, diff_rendered
from .templates import TEMPLATE_RANGES, TemplateRange

__all__ = [
    "DENYLIST",
    "FILES",
    "GATES",
    "PRESETS",
    "TEMPLATE_RANGES",
    "TIERS",
    "ClusterFacts",
    "DeniedFlagError",
    "DenyRule",
    "EtcdJoin",
    "Finding",
    "Gate",
    "InvalidOutputError",
    "MissingInputError",
    "NodeDiff",
    "NodeFiles",
    "Preset",
    "RenderError",
    "RenderInputs",
    "RenderRejected",
    "RenderedCluster",
    "RenderedFile",
    "TemplateRange",
    "Tier",
    "UnsupportedVersionError",
    "VersionSet",
    "diff_rendered",
    "format_flags",
    "gate_open",
    "generate_vrrp_password",
    "merge_args",
    "preset_args",
    "render_cluster",
    "resolve_versions",
    "tier_for",
    "preload_templates",
]
