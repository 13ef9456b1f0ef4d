"""kubernetes-validate --strict, fast enough for thousands of objects.

`kubernetes_validate.validate(obj, version, strict=True)` re-reads the kind's schema and the
1 MB `_definitions.json` on every call (~10 ms). We use the very same schema files, but compile
each (version, kind) once into a tree of small Python checks (~0.05 ms per Pod). The compiler
knows exactly the JSON-Schema keywords these files use and refuses any other keyword at compile
time, so it can never silently skip a rule. When the fast check says "invalid", the object is
passed to `kubernetes_validate.validate` itself, whose message (path + reason) is the one we
report; a unit test compares both on valid and mutated objects.

Semantics follow jsonschema's Draft 2020-12 validator as kubernetes-validate runs it: `format` is
not asserted, `integer` accepts integral floats, booleans are neither integers nor numbers,
`enum` compares with bool/int kept apart.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import kubernetes_validate
from kubernetes_validate import utils as kv_utils

__all__ = ["UnsupportedSchema", "precompile", "schema_version_for", "strict_error", "strict_valid"]

Check = Callable[[Any], bool]
_IGNORED = {"description", "format", "$schema", "$id", "x-kubernetes-group-version-kind", "x-kubernetes-list-type",
            "x-kubernetes-list-map-keys", "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key",
            "x-kubernetes-map-type", "x-kubernetes-unions", "x-kubernetes-int-or-string",
            "x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "default"}


class UnsupportedSchema(RuntimeError):
    """A schema keyword the compiler does not know: use kubernetes_validate for that kind."""


_PY = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _type_check(types: list[str]) -> Check:
    """One isinstance call for the plain types; integer/number need bool excluded."""
    plain = tuple(_PY[t] for t in types if t in _PY)
    if len(plain) + sum(t in ("integer", "number") for t in types) != len(types):
        raise UnsupportedSchema(f"type {types!r}")
    if "number" in types:
        return lambda x: isinstance(x, plain) or (isinstance(x, (int, float)) and not isinstance(x, bool))
    if "integer" in types:
        return lambda x: isinstance(x, plain) or (isinstance(x, int) and not isinstance(x, bool)) or (
            isinstance(x, float) and x.is_integer())
    return lambda x: isinstance(x, plain)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


class _Compiler:
    def __init__(self, defs: dict[str, Any]):
        self.defs = defs
        self.refs: dict[str, Check] = {}

    def ref(self, ref: str) -> Check:
        # Kind schemas point into `/api/_definitions.json#/$defs/...`; the definitions file
        # points into itself with `#/$defs/...`. Both name one entry of the same table.
        doc, sep, name = ref.partition("#/$defs/")
        if not sep or doc not in ("", "/api/_definitions.json") or name not in self.defs:
            raise UnsupportedSchema(f"$ref {ref!r}")
        if name not in self.refs:
            box: list[Check] = []
            self.refs[name] = lambda x: box[0](x)  # placeholder: definitions may be recursive
            box.append(self.compile(self.defs[name]))
        return self.refs[name]

    def compile(self, s: dict[str, Any]) -> Check:
        unknown = set(s) - _IGNORED - {"type", "$ref", "properties", "required", "enum", "items", "oneOf",
                                       "additionalProperties"}
        if unknown:
            raise UnsupportedSchema(f"keywords {sorted(unknown)}")
        type_ok = _type_check(s["type"] if isinstance(s["type"], list) else [s["type"]]) if "type" in s else None
        ref = self.ref(s["$ref"]) if "$ref" in s else None
        if set(s) - _IGNORED == {"$ref"}:
            return ref  # type: ignore[return-value]  # a pure reference: no extra call level
        props = {k: self.compile(v) for k, v in s.get("properties", {}).items()}
        extra = s.get("additionalProperties", True)
        other: Check | None = None if extra is True or extra is False else self.compile(extra)
        closed = extra is False
        objects = bool(props) or extra is not True
        required = tuple(s.get("required", ()))
        items = self.compile(s["items"]) if "items" in s else None
        enum = tuple(s["enum"]) if "enum" in s else None
        one_of = [self.compile(v) for v in s["oneOf"]] if "oneOf" in s else None

        def check(x: Any) -> bool:
            if type_ok is not None and not type_ok(x):
                return False
            if ref is not None and not ref(x):
                return False
            if isinstance(x, dict):
                for r in required:
                    if r not in x:
                        return False
                if objects:
                    for k, v in x.items():
                        c = props.get(k, other)
                        if c is None:
                            if closed:
                                return False
                        elif not c(v):
                            return False
            elif items is not None and isinstance(x, list):
                for i in x:
                    if not items(i):
                        return False
            if enum is not None and not any(_same(x, o) for o in enum):
                return False
            if one_of is not None and sum(1 for c in one_of if c(x)) != 1:
                return False
            return True

        return check


@functools.lru_cache(maxsize=None)
def schema_version_for(k8s_minor: str) -> str:
    """The schema set kubernetes-validate would use: the newest one not newer than `k8s_minor`."""
    key = tuple(int(p) for p in k8s_minor.split(".")[:2])
    found = [v for v in kv_utils.all_versions() if tuple(int(p) for p in v.split(".")[:2]) <= key]
    if not found:
        raise kubernetes_validate.utils.VersionNotSupportedError(version=k8s_minor)
    return found[-1]


_GROUP = re.compile(r"^([^./]*)(?:\.[^/]*)?/")


@functools.lru_cache(maxsize=None)
def _defs(schema_version: str) -> dict[str, Any]:
    return kv_utils.schema_contents(f"kubernetes-json-schema/v{schema_version}-local-strict/_definitions.json", schema_version)["$defs"]


@functools.lru_cache(maxsize=None)
def _validator(schema_version: str, kind: str, api_version: str) -> Check | None:
    """Compiled check for one kind, or None when kubernetes_validate has no such schema."""
    group = _GROUP.sub(r"\1-", api_version)  # rbac.authorization.k8s.io/v1 -> rbac-v1
    name = f"{kind.lower()}-{group}"
    try:
        schema = kv_utils.schema_contents(f"kubernetes-json-schema/v{schema_version}-local-strict/{name}.json", schema_version)
    except FileNotFoundError:
        return None
    try:
        return _Compiler(_defs(schema_version)).compile(schema)
    except UnsupportedSchema:  # a schema of a shape we do not compile: ask kubernetes-validate each time
        return lambda obj: _slow_valid(obj, schema_version)


def _slow_valid(obj: dict[str, Any], schema_version: str) -> bool:
    try:
        kubernetes_validate.validate(obj, schema_version, strict=True)
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError):
        return False
    return True


def precompile(k8s_minor: str, kinds: list[tuple[str, str]]) -> None:
    """Compile the checks of these (kind, apiVersion) pairs now rather than on first use."""
    for kind, api_version in kinds:
        _validator(schema_version_for(k8s_minor), kind, api_version)


def _identity(obj: Any) -> tuple[str, str] | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str) or not isinstance(obj.get("apiVersion"), str):
        return None
    return obj["kind"], obj["apiVersion"]


def strict_valid(obj: dict[str, Any], k8s_minor: str) -> bool:
    """Fast path: True if the object passes the strict schema of its kind for this version."""
    ident = _identity(obj)
    if ident is None:
        return False
    check = _validator(schema_version_for(k8s_minor), *ident)
    return check is not None and check(obj)


def strict_error(obj: dict[str, Any], k8s_minor: str) -> str | None:
    """None if valid; else kubernetes-validate's own message (`path: reason`)."""
    if strict_valid(obj, k8s_minor):
        return None
    if _identity(obj) is None:
        return "not an object with string kind and apiVersion"
    try:
        kubernetes_validate.validate(obj, k8s_minor, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return f"{path}: {exc.message}" if path else exc.message
    except kubernetes_validate.SchemaNotFoundError as exc:
        return exc.message
    return None  # the authority accepts it; our compiled check was stricter
