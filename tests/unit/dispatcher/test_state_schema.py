"""The stored-data table and the pure core of a conversion (bke.core.state.schema, bke.adapters.state.conversion):
every key is in the inventory, the readers' rule, the converter chain, the minimal writes."""
from __future__ import annotations

import dataclasses
import inspect
import json
from fnmatch import fnmatchcase
from pathlib import Path

import pytest

from bke.core.pki.manifest import Manifest
from bke.adapters.state.keys.inventory import builders
from bke.adapters.state.conversion import CONVERTERS, ConversionError, Converter, Write, convert, header_version, register, writes
from bke.core.state.schema import (
    RECORDS,
    UNVERSIONED,
    StoredVersionTooNew,
    StoredVersionTooOld,
    check_readable,
    record_kind,
)

FIXTURE = Path(__file__).parents[2] / "fixtures" / "state" / "v0" / "seed.json"


def _fixture_record(kind_name: str) -> dict:
    """The fixture's members of one record, as ensure_current reads them."""
    doc = json.loads(FIXTURE.read_text())
    base = f"bke:{doc['cluster']}:"
    kind = record_kind(kind_name)
    out: dict = {}
    for e in doc["keys"]:
        name = e["key"].removeprefix(base)
        if e["key"].startswith(base) and any(fnmatchcase(name, p) for p in kind.members):
            out[name] = frozenset(e["value"]) if e["type"] == "set" else e["value"]
    return out


def _key_names() -> list[str]:
    """Every key the family modules of bke.adapters.state.keys can name, with sample arguments."""
    names = []
    for fn_name, fn in builders().items():
        params = [p for p in inspect.signature(fn).parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
        if fn_name in ("cluster_key", "all_keys_pattern"):
            continue
        args = {"cluster": "c1", "source": "render", "slug": "etcd", "part": "manifest", "request_id": "r1",
                "owner": "dispatcher", "writer": "plan"}
        names.append(fn(*(args[p.name] for p in params)))
        if fn_name in ("node_files_key", "node_files_digest_key"):
            names.append(fn("c1", "certs"))
        if fn_name == "paused_key":
            names.append(fn("c1", "upgrade"))
        if fn_name == "record_signing_key":
            names.append(fn("render"))
    return names


def test_every_key_bke_names_is_in_the_inventory_once() -> None:
    for name in _key_names():
        rest = name.removeprefix("bke:c1:")
        owners = [k.name for k in RECORDS if name != rest and any(fnmatchcase(rest, p) for p in k.members)]
        global_ = [p for p, _ in UNVERSIONED if fnmatchcase(name, p)]
        assert len(owners) + len(global_) == 1, (name, owners, global_)


def test_every_header_is_a_member_and_every_kind_has_a_converter_from_its_first_form() -> None:
    for k in RECORDS:
        assert k.slot.key in k.members
        assert k.first <= k.readable_from <= k.current
        for v in range(k.first, k.current):
            assert (k.name, v) in CONVERTERS, (k.name, v)


@pytest.mark.parametrize(("kind", "raw", "error"), [
    ("plan", "2", StoredVersionTooNew),
    ("install", b"7", StoredVersionTooNew),
    ("render", "v1", StoredVersionTooNew),  # not a number: refused, never guessed
    ("pki", 0, StoredVersionTooOld),  # the PKI had a version from its first form (1)
])
def test_readers_refuse_a_form_they_do_not_know(kind: str, raw: object, error: type) -> None:
    with pytest.raises(error) as exc:
        check_readable(kind, raw, "the thing")
    assert "the thing" in str(exc.value) or error is StoredVersionTooNew
    assert exc.value.kind == kind


@pytest.mark.parametrize(("kind", "raw", "version"), [("plan", None, 0), ("plan", "1", 1), ("install", b"0", 0),
                                                      ("pki", 1, 1), ("pki", None, 1)])
def test_readers_read_the_versions_they_know(kind: str, raw: object, version: int) -> None:
    assert check_readable(kind, raw, "x") == version


def test_a_newer_pki_manifest_is_refused_with_the_typed_error() -> None:
    with pytest.raises(StoredVersionTooNew, match="newer than this BKE reads"):
        Manifest.from_json(json.dumps({"version": 2, "cluster": "c1"}))


@pytest.mark.parametrize("kind_name", [k.name for k in RECORDS if k.first == 0])
def test_version_0_of_the_fixture_converts_by_stamping_the_header_alone(kind_name: str) -> None:
    kind = record_kind(kind_name)
    old = _fixture_record(kind_name)
    assert header_version(kind, old) == 0
    new, chain = convert(kind, old, 0, CONVERTERS)
    assert [c.from_version for c in chain] == [0]
    assert header_version(kind, new) == kind.current
    todo = writes(old, new)
    assert [w.member for w in todo] == [kind.slot.key]  # one command, however many nodes
    if kind.slot.form == "hash":
        assert todo == [Write(kind.slot.key, "hset", ({"schemaVersion": "1"},))]
    assert convert(kind, new, kind.current, CONVERTERS) == (new, ())  # converting again: nothing
    for c in chain:  # every registered converter is idempotent (see bke.adapters.state.conversion)
        assert c.fn(c.fn(old)) == c.fn(old)


def test_a_chain_runs_in_order_and_a_missing_step_is_refused() -> None:
    kind = dataclasses.replace(record_kind("install"), current=3)

    def rename(rec: dict) -> dict:
        return {**rec, "node": {n: v.replace('"step"', '"stepName"') for n, v in rec["node"].items()}}

    reg = register(Converter("install", 0, "stamp"), Converter("install", 1, "rename", rename, ("node",)),
                   Converter("install", 2, "drop health-meta", lambda r: {k: v for k, v in r.items() if k != "health-meta"}))
    old = {"install": {"status": "Succeeded"}, "node": {"n1": '{"step": null}'}, "health-meta": {"round": "1"}}
    new, chain = convert(kind, old, 0, reg)
    assert [c.summary for c in chain] == ["stamp", "rename", "drop health-meta"]
    assert new == {"install": {"status": "Succeeded", "schemaVersion": "3"}, "node": {"n1": '{"stepName": null}'}}
    assert writes(old, new) == [Write("health-meta", "del"), Write("install", "hset", ({"schemaVersion": "3"},)),
                                Write("node", "hset", ({"n1": '{"stepName": null}'},))]
    new1, _ = convert(kind, old, 1, reg)  # from a later version, only the later steps
    assert "health-meta" not in new1
    with pytest.raises(ConversionError, match="no conversion from version 1 to 2"):
        convert(kind, old, 1, register(Converter("install", 2, "x")))


def test_writes_touch_only_what_changed() -> None:
    old = {"a": "x", "h": {"f": "1", "g": "2"}, "s": frozenset({"n1", "n2"}), "gone": "y"}
    new = {"a": "x", "h": {"f": "1", "g": "3", "k": "4"}, "s": frozenset({"n2", "n3"}), "t": {"f": "v"}}
    assert writes(old, new) == [
        Write("gone", "del"), Write("h", "hset", ({"g": "3", "k": "4"},)), Write("s", "sadd", ("n3",)),
        Write("s", "srem", ("n1",)), Write("t", "hset", ({"f": "v"},))]
    assert writes(new, new) == []


JOIN_V2 = Path(__file__).parents[2] / "fixtures" / "state" / "join-v2" / "seed.json"


def test_version_2_of_a_join_converts_by_adding_agents_since_and_both_forms_read() -> None:
    """tests/fixtures/state/join-v2/seed.json: a join waiting for an agent, as version 2 of the
    form wrote it (commit 3f9f567). Version 3 adds `agents_since` (the agents' deadline's
    start); the reader reads version 2 as is (readable_from 1), and the conversion writes the
    one key."""
    from bke_dispatcher.ops.join.decide import Join

    kind = record_kind("join")
    doc = json.loads(JOIN_V2.read_text())
    old = {"join": doc["keys"][0]["value"]}
    assert header_version(kind, old) == 2 and kind.readable_from == 1 and kind.current == 4
    as_is = Join.from_json(old["join"])
    assert as_is.agents_since == "" and as_is.waiting.startswith("waiting for the agents of node3")
    new, steps = convert(kind, old, 2, CONVERTERS)
    assert [c.from_version for c in steps] == [2, 3] and header_version(kind, new) == 4
    assert json.loads(new["join"])["agents_since"] == ""
    assert [w.member for w in writes(old, new)] == ["join"]
    assert Join.from_json(new["join"]) == as_is  # the same join, in the new form
    assert convert(kind, new, 4, CONVERTERS) == (new, ())
    for c in steps:
        assert c.fn(c.fn(old)) == c.fn(old)
    started = {"join": json.dumps({**json.loads(old["join"]), "agents_since": "t1"})}
    assert steps[0].fn(started) == started  # a value already there is kept
    assert json.loads(Join.from_json(new["join"]).to_json())["schemaVersion"] == 4


JOIN_V3 = Path(__file__).parents[2] / "fixtures" / "state" / "join-v3" / "seed.json"


def test_version_3_of_a_join_converts_by_adding_no_held_ports_and_both_forms_read() -> None:
    """tests/fixtures/state/join-v3/seed.json: a worker's join in its workers phase, as
    version 3 of the form wrote it. Version 4 adds `held_ports` (the ports of the parts a node
    joining again runs already): a join of version 3 joined new nodes only, so none."""
    from bke_dispatcher.ops.join.decide import Join

    kind = record_kind("join")
    old = {"join": json.loads(JOIN_V3.read_text())["keys"][0]["value"]}
    assert header_version(kind, old) == 3
    as_is = Join.from_json(old["join"])
    assert as_is.held_ports == {} and as_is.agents_since and as_is.nodes[0].index == 2
    new, steps = convert(kind, old, 3, CONVERTERS)
    assert [c.from_version for c in steps] == [3] and header_version(kind, new) == 4
    assert json.loads(new["join"])["held_ports"] == {}
    assert [w.member for w in writes(old, new)] == ["join"]
    assert Join.from_json(new["join"]) == as_is
    held = {"join": json.dumps({**json.loads(old["join"]), "held_ports": {"node2": [10250]}})}
    assert steps[0].fn(held) == held  # a value already there is kept
