"""The renderer's public surface and its generated documentation."""
from __future__ import annotations

import os
from pathlib import Path

import bke.core.nodemap
import bke.core.render
from bke.core.render.docs import replace_tables

DOC = Path(__file__).resolve().parents[4] / "docs" / "renderer.md"


def test_public_surface() -> None:
    assert sorted(bke.core.render.__all__) == sorted([
        "DENYLIST", "FILES", "GATES", "PRESETS", "TEMPLATE_RANGES", "TIERS", "ClusterFacts", "DeniedFlagError",
        "DenyRule", "EtcdJoin", "Finding", "Gate", "InvalidOutputError", "MissingInputError", "NodeDiff", "NodeFiles", "Preset",
        "RenderError", "RenderInputs", "RenderRejected", "RenderedCluster", "RenderedFile", "TemplateRange", "Tier",
        "UnsupportedVersionError", "VersionSet", "diff_rendered", "format_flags", "gate_open", "generate_vrrp_password",
        "merge_args", "preset_args", "render_cluster", "resolve_versions", "tier_for", "preload_templates"])
    assert all(hasattr(bke.core.render, n) for n in bke.core.render.__all__)
    assert sorted(bke.core.nodemap.__all__) == ["LocalPod", "LocalVolume", "NotRunnable", "SHARED_MACHINE_FLAGS", "SharedMachineFlag",
                                          "localize_pod", "shared_machine_argv", "shared_machine_markdown"]


def test_errors_say_what_the_bus_should_do() -> None:
    from bke.core.errors import PermanentError, RejectedInput

    assert issubclass(bke.core.render.DeniedFlagError, RejectedInput)
    assert issubclass(bke.core.render.UnsupportedVersionError, RejectedInput)
    assert issubclass(bke.core.render.InvalidOutputError, PermanentError)


def test_docs_tables_match_the_data() -> None:
    text = DOC.read_text()
    if os.environ.get("BKE_UPDATE_GOLDEN") == "1":
        DOC.write_text(replace_tables(text))
        text = DOC.read_text()
    assert replace_tables(text) == text, "docs/renderer.md tables drifted (BKE_UPDATE_GOLDEN=1 to regenerate)"
    for preset in bke.core.render.PRESETS:
        assert preset.source.replace("|", "\\|") in text


def test_preload_templates_loads_every_template_set_once() -> None:
    # kubernetes 1 range x etcd 2 ranges x containerd 2 ranges
    assert bke.core.render.preload_templates() == 4
