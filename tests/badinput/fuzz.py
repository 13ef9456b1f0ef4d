"""Hypothesis budget for the fuzzers, and valid bus messages generated from each contract.

Default (`.ci/run`): a few examples per fuzzer, so the suite stays fast. The long run:

    BKE_FUZZ=long .venv/bin/python -m pytest -q tests/badinput      # 2,000 examples per fuzzer
    BKE_FUZZ_EXAMPLES=10000 .venv/bin/python -m pytest -q tests/badinput

Messages are drawn from the model's own JSON schema (what `docs/asyncapi.yaml` publishes), so
a new field or contract is fuzzed without touching this file.
"""
from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["FUZZ", "from_schema", "json_values"]

_EXAMPLES = int(os.environ.get("BKE_FUZZ_EXAMPLES") or (2000 if os.environ.get("BKE_FUZZ") == "long" else 25))
FUZZ = settings(max_examples=_EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])

_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20)
# Any JSON value: what a forger or a broken client can put anywhere.
json_values = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)


def from_schema(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """JSON documents that follow a pydantic JSON schema (the subset pydantic emits)."""
    defs = schema.get("$defs", {})

    def of(s: dict[str, Any]) -> st.SearchStrategy[Any]:
        if "$ref" in s:
            return st.deferred(lambda: of(defs[s["$ref"].rsplit("/", 1)[1]]))
        if "const" in s:
            return st.just(s["const"])
        if "enum" in s:
            return st.sampled_from(s["enum"])
        for key in ("anyOf", "oneOf"):
            if key in s:
                return st.one_of([of(x) for x in s[key]])
        t = s.get("type")
        if t == "string":
            if "pattern" in s:
                return st.from_regex(s["pattern"], fullmatch=True).filter(lambda v: len(v) <= s.get("maxLength", 10**6))
            lo = s.get("minLength", 0)  # short texts, unless the contract needs longer (a base64 key)
            return st.text(min_size=lo, max_size=max(lo, min(s.get("maxLength", 24), 24)))
        if t == "integer":
            lo = s.get("minimum", s["exclusiveMinimum"] + 1 if "exclusiveMinimum" in s else -(2**40))
            return st.integers(lo, s.get("maximum", 2**40))
        if t == "number":
            lo = s.get("minimum", s.get("exclusiveMinimum", -1e9))
            return st.floats(lo, s.get("maximum", 1e9), exclude_min="exclusiveMinimum" in s, allow_nan=False)
        if t == "boolean":
            return st.booleans()
        if t == "null":
            return st.none()
        if t == "array":
            lo = s.get("minItems", 0)
            return st.lists(of(s.get("items", {})), min_size=lo, max_size=max(lo, 3))
        if t == "object" or "properties" in s:
            return _object(s, of)
        return json_values

    return of(schema)


def _object(s: dict[str, Any], of: Any) -> st.SearchStrategy[dict[str, Any]]:
    props: dict[str, Any] = s.get("properties", {})
    if not props:
        extra = s.get("additionalProperties")
        values = of(extra) if isinstance(extra, dict) else json_values
        return st.dictionaries(st.text(min_size=1, max_size=12), values, max_size=3)
    # a const (a union's tag, `type: write_file`) is always sent, as the models do
    required = set(s.get("required", ())) | {k for k, v in props.items() if "const" in v}
    return st.fixed_dictionaries(
        {k: of(v) for k, v in props.items() if k in required},
        optional={k: of(v) for k, v in props.items() if k not in required},
    )
