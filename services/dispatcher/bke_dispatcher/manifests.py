"""Manifest sources live in `bke.cluster_api.manifests` (the upgrader reads them too)."""
from bke.cluster_api.manifests import HttpRepoManifests, LabManifests, cni_artefact, verify_manifest

__all__ = ["HttpRepoManifests", "LabManifests", "cni_artefact", "verify_manifest"]
