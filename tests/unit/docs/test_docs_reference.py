"""The generated reference pages (docs/reference/) and the generated blocks of hand-written pages
equal what the code generates now; `bke spec schema` prints the committed schema; that schema
takes every example document and refuses what the loader refuses (a misspelled field at any
level, an unknown kind or role)."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from bke.core.docs_reference.blocks import block_text, markers, splice
from bke.core.docs_reference.markdown import anchor, cell
from bke.core.spec import load_spec, validate_spec
from bke.core.spec.json_schema import SCHEMA_FILE, spec_schema
from bke_cli.docs_reference import BLOCKS, REGENERATE, all_pages, main
from bke_cli.main import app

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
PAGES = all_pages()


@pytest.mark.parametrize("rel", list(PAGES))
def test_committed_page_is_generated(rel: str) -> None:
    committed = (ROOT / rel).read_text(encoding="utf-8")
    assert committed == PAGES[rel](), f"{rel} is stale; regenerate: {REGENERATE}"


@pytest.mark.parametrize(("rel", "name"), list(BLOCKS), ids=[f"{rel}:{name}" for rel, name in BLOCKS])
def test_committed_block_is_generated(rel: str, name: str) -> None:
    committed = (ROOT / rel).read_text(encoding="utf-8")
    fresh = splice(committed, name, BLOCKS[(rel, name)]())
    assert block_text(committed, name) == block_text(fresh, name), f"{rel} block {name} is stale; regenerate: {REGENERATE}"
    assert committed == fresh, f"{rel} block {name}: set it off by a blank line from its markers; regenerate: {REGENERATE}"


def _pages_with_empty_blocks(root: Path) -> None:
    """The hand-written pages that hold blocks, as a writer leaves them: markers, nothing between."""
    for rel in {rel for rel, _ in BLOCKS}:
        text = (ROOT / rel).read_text(encoding="utf-8")
        for name in [n for r, n in BLOCKS if r == rel]:
            start, end = markers(name)
            text = text.replace(block_text(text, name), "\n")
            assert f"{start}\n\n{end}" in text
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def test_check_names_stale_pages_and_writing_fixes_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _pages_with_empty_blocks(tmp_path)
    assert main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert all(f"ERROR {rel} is stale" in err for rel in PAGES)
    assert all(f"ERROR {rel} (block {name}) is stale" in err for rel, name in BLOCKS)
    assert main(["--root", str(tmp_path)]) == 0
    assert all((tmp_path / rel).read_text(encoding="utf-8") == (ROOT / rel).read_text(encoding="utf-8") for rel, _ in BLOCKS)
    assert main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / "docs/reference/flags.md").write_text("# edited by hand\n")
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == f"ERROR docs/reference/flags.md is stale; regenerate: {REGENERATE}"


def test_bke_spec_schema_prints_the_committed_schema() -> None:
    result = CliRunner().invoke(app, ["spec", "schema"])
    assert result.exit_code == 0, result.output
    assert result.stdout == (ROOT / SCHEMA_FILE).read_text(encoding="utf-8"), f"regenerate: {REGENERATE}"


def _validators() -> list[jsonschema.protocols.Validator]:
    """The schema as written (2020-12), and as a draft-07 validator reads it (the YAML language
    server implements draft-07 and older): the docs say both check the same."""
    schema = spec_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return [jsonschema.Draft202012Validator(schema),
            jsonschema.Draft7Validator({**schema, "$schema": "http://json-schema.org/draft-07/schema#"})]


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_schema_takes_every_example_document(example: Path) -> None:
    docs = _documents(example)
    assert {d["kind"] for d in docs} == {"BKECluster", "BKENode"}
    for validator in _validators():
        for i, doc in enumerate(docs):
            assert not list(validator.iter_errors(doc)), f"{example.name} document {i}"


def test_every_object_of_the_schema_is_closed() -> None:
    for name, schema in spec_schema()["$defs"].items():
        assert schema.get("additionalProperties") is False, name


def _spec_errors(docs: list[dict[str, Any]]) -> list[str]:
    """What the loader and the validator say of a spec made of these documents."""
    loaded = load_spec(yaml.safe_dump_all(docs))
    if loaded.spec is None:
        return [e.path for e in loaded.errors]
    return [e.path for e in loaded.errors + validate_spec(loaded.spec).errors]


def _mutate(docs: list[dict[str, Any]], index: int, change: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(docs)
    change(out[index])
    return out


def _rename(mapping: dict[str, Any], old: str, new: str) -> None:
    mapping[new] = mapping.pop(old)


SPLIT = ROOT / "examples/split-etcd.yaml"
# (what, document index, change): the schema and the loader (or, for roles, the validator) both refuse
MUTATIONS = [
    ("misspelled top-level field", 0, lambda d: _rename(d, "metadata", "metdata")),
    ("misspelled field of the cluster's spec", 0,
     lambda d: _rename(d["spec"]["clusterConfig"]["cluster"]["loadBalancer"], "virtualRouterId", "virtualRouterID")),
    ("misspelled nested field of a BKENode", 1, lambda d: _rename(d["spec"]["apiServer"], "extraArgs", "extraArg")),
    ("misspelled field of a BKENode's spec", 1, lambda d: _rename(d["spec"], "hostname", "hostName")),
    ("unknown role", 1, lambda d: d["spec"].update(role=["master", "mastr"])),
    ("unknown kind", 1, lambda d: d.update(kind="BKENodes")),
]


@pytest.mark.parametrize(("index", "change"), [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_schema_refuses_what_bke_refuses(index: int, change: Any) -> None:
    docs = _documents(SPLIT)
    bad = _mutate(docs, index, change)
    for validator in _validators():
        assert list(validator.iter_errors(bad[index])), f"the schema ({validator.META_SCHEMA['$schema']}) took it"
    assert _spec_errors(bad), "bke took it"
    assert not _spec_errors(docs)


def test_anchors_are_the_toc_extension_ids() -> None:
    toc = pytest.importorskip("markdown.extensions.toc")
    for heading in ("bke upgrade apply", "bke certs check-expiration", "`bke.v1.install.{cluster}.phase`", "WriteFile"):
        assert anchor(heading) == toc.slugify(heading.replace("`", ""), "-")


def test_cells_escape_markup_outside_code_only() -> None:
    assert cell("a | b `x|y` <host> *") == "a \\| b `x|y` &lt;host&gt; \\*"
    assert cell("") == "-"
