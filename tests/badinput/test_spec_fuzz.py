"""Hypothesis fuzzers over the spec loader: random bytes, random YAML-shaped documents and
mutations of a valid spec never raise; each yields a plan or errors that name a place and say
what is wrong in a readable line. Budget: tests/badinput/fuzz.py (BKE_FUZZ=long)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml
from hypothesis import given
from hypothesis import strategies as st

from bke.core.plan import PlanOutcome, plan_spec_text

from .fuzz import FUZZ, json_values

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
SEED = Path("examples/seed-3m1w.yaml").read_bytes()
SEED_DOCS = list(yaml.safe_load_all(SEED))


def well_formed(outcome: PlanOutcome) -> None:
    assert outcome.ok != bool(outcome.errors)
    for e in outcome.errors:
        assert e.path and e.message
        assert not CONTROL.search(e.path) and not CONTROL.search(e.message), e  # one readable line each
        assert len(e.path) <= 2000 and len(e.message) <= 2000, e.message[:200]


@FUZZ
@given(st.binary(max_size=2048))
def test_random_bytes(raw: bytes) -> None:
    well_formed(plan_spec_text(raw, "spec.yaml"))


@FUZZ
@given(st.text(max_size=512))
def test_random_text(text: str) -> None:  # surrogates included: they come back as "not UTF-8"
    well_formed(plan_spec_text(text, "spec.yaml"))


@FUZZ
@given(st.lists(json_values, min_size=1, max_size=4))
def test_random_documents(docs: list) -> None:
    well_formed(plan_spec_text(yaml.safe_dump_all(docs), "spec.yaml"))


@FUZZ
@given(st.integers(0, len(SEED_DOCS) - 1), st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=4), json_values)
def test_a_value_anywhere_in_a_valid_spec_replaced(doc: int, path: list[str], value: object) -> None:
    """Set a (possibly new) key at a random depth to any JSON value: a plan, or errors with paths."""
    docs = [dict(d) for d in SEED_DOCS]
    node = docs[doc]
    keys = ["spec", "clusterConfig", "cluster"]
    for k in keys[: len(path) - 1]:
        node[k] = dict(node.get(k) or {}) if isinstance(node.get(k), dict) else {}
        node = node[k]
    node[path[-1]] = value
    well_formed(plan_spec_text(yaml.safe_dump_all(docs), "spec.yaml"))


@FUZZ
@given(st.data())
def test_bytes_of_a_valid_spec_mutated(data: st.DataObject) -> None:
    raw = bytearray(SEED)
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(raw) - 1))
        how = data.draw(st.sampled_from(["flip", "delete", "insert", "duplicate-line"]))
        if how == "flip":
            raw[at] = data.draw(st.integers(0, 255))
        elif how == "delete":
            del raw[at]
        elif how == "insert":
            raw[at:at] = data.draw(st.sampled_from([b"&a ", b"*a", b"[", b"{", b"\n- ", b": ", b"---\n", b"\t", b"<<: *a\n", b"!!binary "]))
        else:
            lines = raw.split(b"\n")
            i = data.draw(st.integers(0, len(lines) - 1))
            lines.insert(i, lines[i])
            raw = bytearray(b"\n".join(lines))
    well_formed(plan_spec_text(bytes(raw), "spec.yaml"))
