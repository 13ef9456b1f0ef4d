"""The node agent loads neither faststream, redis nor the Kubernetes client, at run time.

import-linter (run by `dev.py test`) checks the static import graph; this checks what Python
really loads, package `__init__`s included, in a fresh interpreter. It also guards the lazy
re-exports of `bke.adapters.bus` and `bke.adapters.runtime` that make the first check hold.
"""
from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

AGENT_MUST_NOT_LOAD = ("faststream", "redis", "kubernetes")


def _loaded_after(code: str) -> set[str]:
    """Top-level package names in sys.modules after running `code` in a fresh interpreter."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(out.stdout.splitlines()[-1]))


@pytest.mark.parametrize("entry", ["bke_agent.main", "bke_agent"])
def test_agent_entry_loads_no_bus_framework_redis_or_kubernetes(entry: str) -> None:
    loaded = _loaded_after(f"import {entry}")
    assert entry.split(".")[0] in loaded
    assert loaded.isdisjoint(AGENT_MUST_NOT_LOAD), sorted(loaded & set(AGENT_MUST_NOT_LOAD))


def test_probe_sees_what_a_service_side_module_loads() -> None:
    # the same probe notices faststream and redis when a module that needs them is imported
    loaded = _loaded_after("import bke.adapters.bus.delivery, bke.adapters.runtime.embedded")
    assert {"faststream", "redis"} <= loaded


@pytest.mark.parametrize("package", ["bke.adapters.bus", "bke.adapters.runtime"])
def test_lazy_exports_match_all_and_resolve_to_their_submodule(package: str) -> None:
    mod = importlib.import_module(package)
    exports: dict[str, str] = mod._EXPORTS
    assert set(exports) == set(mod.__all__)
    for name, submodule in exports.items():
        assert getattr(mod, name) is getattr(importlib.import_module(f"{package}.{submodule}"), name)


def test_unknown_lazy_export_names_itself() -> None:
    import bke.adapters.bus

    with pytest.raises(AttributeError, match="'bke.adapters.bus' has no attribute 'no_such_name'"):
        _ = bke.adapters.bus.no_such_name
