"""The flag rules sit below spec validation, which sits below the plan and the renderer: the
planner and `bke plan` judge flags without importing the renderer."""
from __future__ import annotations

import subprocess
import sys


def _bke_modules_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(m for m in sys.modules if m == 'bke' or m.startswith('bke.')))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_flagrules_depend_on_versions_only() -> None:
    assert {m for m in _bke_modules_after("bke.core.flagrules") if not m.startswith("bke.core.flagrules")} == {"bke", "bke.core", "bke.core.versions"}


def test_spec_validation_and_planning_import_no_renderer() -> None:
    loaded = _bke_modules_after("bke.core.plan")
    assert "bke.core.spec.extra_args" in loaded
    assert not [m for m in loaded if m.startswith(("bke.core.render", "bke.core.state", "bke.adapters.state", "bke.adapters.bus"))]
