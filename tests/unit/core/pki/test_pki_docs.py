"""docs/certs.md is generated from the table: fail when it drifts."""
from __future__ import annotations

from tests.unit.core.pki.test_pki_support import ROOT, SPLIT, split_plan

from bke.core.pki.docs import BEGIN, END, generated_docs, splice_generated


def test_docs_certs_md_matches_the_table() -> None:
    doc = (ROOT / "docs" / "certs.md").read_text()
    expected = splice_generated(doc, generated_docs(split_plan(), "examples/split-etcd.yaml"))
    assert doc == expected, (
        "docs/certs.md drifted from bke.core.pki.table.CERTS; regenerate it with the command at the top of docs/certs.md"
    )


def test_generated_section_lists_every_row_and_node() -> None:
    text = generated_docs(split_plan(), SPLIT.name)
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)
    from bke.core.pki import CERTS

    for row in CERTS:
        assert f"| `{row.name}` |" in text
    for node in split_plan().nodes:
        assert f"**{node.hostname}**" in text
