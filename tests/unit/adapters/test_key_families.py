"""The Redis key families (bke.adapters.state.keys): one module per owner, nothing in the package's
`__init__`, every builder in exactly one family, every family but the common building blocks held
by an import-linter contract (pyproject.toml), and each family's keys writable by the service
users it names as writers, and by nobody else but the co-writers named here (the Redis ACL table,
bke.adapters.runtime.redis_acl)."""
from __future__ import annotations

import ast
import inspect
import tomllib
from pathlib import Path

import pytest

import bke.adapters.state.keys as key_package
from bke.adapters.runtime.redis_acl import ADMIN, RENEWER, USERS
from bke.adapters.state.keys.inventory import builders, family_modules

ROOT = Path(__file__).resolve().parents[3]
SAMPLE_ARGS = {"cluster": "c1", "slug": "etcd", "part": "manifest", "request_id": "r1", "owner": "dispatcher",
               "writer": "plan"}

# family -> the service users that write its keys; None: the admin side (no service user writes all of them)
WRITERS: dict[str, frozenset[str] | None] = {
    "planner": frozenset({"bke-planner"}),
    "plan": frozenset({"bke-planner", "bke-upgrader"}),
    "certs": frozenset({"bke-certs"}),
    "renderer": frozenset({"bke-renderer"}),
    "dispatcher": frozenset({"bke-dispatcher"}),
    "shared": frozenset({"bke-dispatcher"}),  # with the sample arguments: the dispatcher's slot, lease, flag
    "upgrader": frozenset({"bke-upgrader"}),
    "common": None, "auth": None, "trust": None,
}
# keys another service also writes, by design (redis_acl's USERS says why)
CO_WRITERS: dict[str, frozenset[str]] = {
    "bke:c1:operation": frozenset({"bke-certs", "bke-upgrader"}),
    "bke:c1:addons": frozenset({"bke-upgrader"}),
    "bke:c1:node-labels": frozenset({"bke-upgrader"}),
    # Not by design: a Redis glob's `*` crosses `:`, so the dispatcher's `bke:*:agents` and
    # `bke:*:lease:*` also match these two keys of certs. Listed so that no other overlap comes unseen.
    "bke:c1:certs:agents": frozenset({"bke-dispatcher"}),
    "bke:c1:certs:lease:etcd": frozenset({"bke-dispatcher"}),
}


def _service_writers(key: str) -> frozenset[str]:
    return frozenset(u.name for u in USERS if u.name not in (ADMIN, RENEWER) and u.access(key) == "rw")


def _sample_keys(module: object) -> list[str]:
    out = []
    for name in module.__all__:  # type: ignore[attr-defined]
        fn = getattr(module, name)
        if inspect.isfunction(fn) and name not in ("cluster_key", "all_keys_pattern"):
            out.append(fn(*(SAMPLE_ARGS[p] for p in inspect.signature(fn).parameters)))
    return out


def test_the_package_init_holds_a_docstring_and_nothing_else() -> None:
    body = ast.parse(Path(key_package.__file__).read_text()).body
    assert len(body) == 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)


def test_every_builder_is_public_in_one_family() -> None:
    every = builders()  # ValueError if two families define one name
    for family, module in family_modules().items():
        defined = {n for n, f in inspect.getmembers(module, inspect.isfunction) if f.__module__ == module.__name__}
        assert defined <= set(module.__all__), (family, defined - set(module.__all__))
    assert "plan_key" in every and "vrrp_password_key" in every


def test_every_family_but_the_common_one_is_held_by_a_contract() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    protected = {m for c in contracts if c["type"] == "protected" for m in c["protected_modules"]}
    package = key_package.__name__
    families = {f"{package}.{name}" for name in family_modules() if name != "common"}
    assert {m for m in protected if m.startswith(f"{package}.")} == {*families, f"{package}.inventory"}
    assert set(family_modules()) == {*WRITERS, "node_files"}  # node_files: by source, its own test


@pytest.mark.parametrize("family", sorted(WRITERS))
def test_a_familys_keys_are_written_by_its_writers_and_only_by_them(family: str) -> None:
    writers = WRITERS[family]
    for key in _sample_keys(family_modules()[family]):
        found = _service_writers(key)
        if writers is None:  # the admin side's: at most the one service that makes it on first use
            assert len(found) <= 1, (key, found)
            continue
        assert found == writers | CO_WRITERS.get(key, frozenset()), key


@pytest.mark.parametrize("source", ["certs", "render"])
def test_each_source_of_the_node_files_is_written_by_its_service_alone(source: str) -> None:
    module = family_modules()["node_files"]
    for name in module.__all__:
        key = getattr(module, name)("c1", source)
        assert _service_writers(key) == {f"bke-{'renderer' if source == 'render' else 'certs'}"}, key
