"""docs/concepts/architecture.md against the code: the generated blocks' sources agree with each
other (every component of the channel table has a column, every durable consumer filters a
subject its service hears, every operation kind has one runner), the one hand-written mapping
names real kinds and records, and every stream and full subject the prose names exists.

That the committed blocks equal what the code generates is tests/unit/docs/test_docs_reference.py's."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bke.adapters.bus.streams import STREAMS
from bke.adapters.state.operation_slot import KINDS
from bke.contracts.subjects import CHANNELS
from bke.core.docs_reference.architecture import HELD_IN, Part, render_records_block
from bke.core.docs_reference.blocks import block_text, markers, splice
from bke.core.state.schema import RECORDS
from bke.adapters.state.keys.inventory import family_modules
from bke_cli.docs_reference import ARCHITECTURE_PAGE, BLOCKS, architecture_parts, key_families, main

ROOT = Path(__file__).resolve().parents[3]
PAGE = (ROOT / ARCHITECTURE_PAGE).read_text(encoding="utf-8")
PARTS = architecture_parts()


def _pattern(subject: str) -> str:
    """A channel's subject as a consumer filters it: each placeholder one `*`."""
    return re.sub(r"\{[a-z]+\}", "*", subject)


def test_every_component_of_the_channel_table_has_a_column() -> None:
    components = {c for ch in CHANNELS for c in (*ch.senders, *ch.receivers)}
    assert components == {p.component for p in PARTS if p.component}
    assert [p.title for p in PARTS] == ["planner", "certs", "renderer", "dispatcher", "upgrader", "agent", "CLI",
                                        "renewer", "dashboards"]


def test_the_dashboards_may_send_only_requests_that_change_nothing() -> None:
    dashboards = next(p for p in PARTS if p.title == "dashboards")
    by_subject = {ch.subject: ch for ch in CHANNELS}
    assert dashboards.may_send and dashboards.may_hear
    assert all(by_subject[s].kind == "request" and (by_subject[s].reads or not by_subject[s].senders)
               for s in dashboards.may_send)


@pytest.mark.parametrize("part", [p for p in PARTS if p.consumers], ids=lambda p: p.title)
def test_every_durable_consumer_filters_a_subject_its_part_hears(part: Part) -> None:
    heard = {_pattern(ch.subject) for ch in CHANNELS if part.component in ch.receivers}
    for _, durable, subject in part.consumers:
        assert _pattern(subject) in heard, (durable, subject)


def test_the_operations_held_in_another_record_name_real_kinds_and_records() -> None:
    records = {r.name for r in RECORDS}
    assert set(HELD_IN) <= set(KINDS) and not set(HELD_IN) & records
    assert set(HELD_IN.values()) <= records
    assert all(kind in records or kind in HELD_IN for kind in KINDS)


def test_every_operation_has_one_runner_and_a_second_writer_is_refused() -> None:
    text = block_text(PAGE, "records")
    assert all(f"`{kind}`" in text for kind in KINDS)
    planner = Part("planner", "planner", component="planner", writes=("bke:*:install",))
    dispatcher = Part("dispatcher", "dispatcher", component="dispatcher", writes=("bke:*:install",))
    with pytest.raises(ValueError, match="operation install: its record must have one writer"):
        render_records_block([planner, dispatcher], ["install"], [])


def test_every_stream_and_subject_the_page_names_exists() -> None:
    streams = {s.name for s in STREAMS}
    named = set(re.findall(r"\bBKE_[A-Z]+\b(?!_)", PAGE))
    assert named and named <= streams, named - streams
    subjects = {_pattern(ch.subject) for ch in CHANNELS}
    for subject in set(re.findall(r"bke\.v1\.[A-Za-z0-9_.<>{}*-]+[A-Za-z0-9>}*]", PAGE)):
        assert re.sub(r"<[a-z]+>", "*", _pattern(subject)) in subjects, subject


def test_a_block_is_refilled_between_its_markers_only() -> None:
    start, end = markers("b")
    page = f"# T\n\n{start}\nold\n{end}\n\nprose\n"
    assert splice(page, "b", "new") == f"# T\n\n{start}\n\nnew\n\n{end}\n\nprose\n"
    assert splice(splice(page, "b", "new"), "b", "new") == splice(page, "b", "new")
    for bad in ("# T\n", f"{end}\n{start}\n", f"{start}\n{start}\n{end}\n"):
        with pytest.raises(ValueError, match="block b: the page needs one"):
            splice(bad, "b", "new")


def test_writing_a_page_that_lost_its_markers_fails_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / ARCHITECTURE_PAGE
    page.parent.mkdir(parents=True)
    page.write_text("# Architecture\n", encoding="utf-8")
    assert main(["--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert all(f"ERROR block {name}: the page needs one" in err for _, name in BLOCKS)
    assert page.read_text(encoding="utf-8") == "# Architecture\n"


def test_the_key_families_block_lists_every_family_and_each_key_under_one() -> None:
    families = key_families()
    assert [f.name for f in families] == sorted(family_modules())
    every = [k for f in families for k in f.keys]
    assert len(every) == len(set(every)), "a key under two families"
    assert "bke:<c>:plan" in every and "bke:<c>:paused" in every and "bke:<c>:upgrade:paused" in every
    block = block_text(PAGE, "key-families")
    assert all(f"`{f.module}`" in block for f in families)
