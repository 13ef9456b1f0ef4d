"""Package `__init__`s that re-export names without importing every submodule up front.

Why: the node agent imports `bke.adapters.bus.streams` and `bke.adapters.runtime.processes`, and Python runs the
package `__init__` first. An eager `__init__` would load what its siblings need (faststream for
delivery settlement, redis for the embedded runtime), and the agent must load neither. A package
lists `{name: submodule}` and its module-level `__getattr__` (PEP 562) calls `load_export`, so
`from bke.adapters.bus import settle` still works and imports only `bke.adapters.bus.delivery`, on first use.
Type checkers see the same names through an `if TYPE_CHECKING:` import block in each package.
"""
from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping

__all__ = ["load_export"]


def load_export(package: str, exports: Mapping[str, str], name: str) -> object:
    """`package`'s export `name`, from the submodule `exports` maps it to; cached on the package."""
    submodule = exports.get(name)
    if submodule is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
    setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
    return value
