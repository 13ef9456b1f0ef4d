"""Every key builder of every family, for the inventories that must see them all: the generated
reference of the docs (bke_cli.docs_reference) and the tests that hold each key to the ACL table
and to the stored-data table (bke.core.state.schema).

Found by walking the package, so a new family module is in every inventory at once. Nothing else
imports this: a reader that took its builders from here would slip past the family contracts
(pyproject.toml), so a contract of its own names its one importer.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from types import ModuleType

__all__ = ["builders", "family_modules"]

_PACKAGE = __name__.rpartition(".")[0]


def family_modules() -> dict[str, ModuleType]:
    """Family name (its module's) -> the module, every module of the package but this one."""
    package = importlib.import_module(_PACKAGE)
    names = sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name != __name__.rpartition(".")[2])
    return {name: importlib.import_module(f"{_PACKAGE}.{name}") for name in names}


def builders() -> dict[str, Callable[..., str]]:
    """Builder name -> the function, over every family's `__all__`. ValueError for a name that two
    families define: a key has one family."""
    out: dict[str, Callable[..., str]] = {}
    for family, module in family_modules().items():
        for name in module.__all__:
            fn = getattr(module, name)
            if not inspect.isfunction(fn):
                continue
            if name in out:
                raise ValueError(f"key builder {name} is defined by two families ({family} and another)")
            out[name] = fn
    return out
