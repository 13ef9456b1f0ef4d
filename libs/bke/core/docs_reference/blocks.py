"""Generated blocks inside hand-written pages: the text between `<!-- NAME:start -->` and
`<!-- NAME:end -->` is the generator's, the rest of the page is the writer's.

Why blocks as well as whole pages: a concepts page explains in prose and shows a table the code
can write (who sends which subject, who writes which record). A block keeps that table in the
page that explains it, and the same check as for a whole page (`python -m bke_cli.docs_reference
--check`) fails when the code and the block differ.

`block_text` and `splice` raise ValueError for a page without exactly one pair of the block's
markers, in that order: a block is never added or moved by the generator, only refilled.
"""
from __future__ import annotations

__all__ = ["block_text", "markers", "splice"]


def markers(name: str) -> tuple[str, str]:
    """The two comment lines that enclose block `name` (Markdown renders neither)."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def _bounds(text: str, name: str) -> tuple[int, int]:
    """Where the block's body starts (after its start line) and ends (at its end line)."""
    start, end = markers(name)
    lines = text.splitlines(keepends=True)
    found = {m: [i for i, line in enumerate(lines) if line.strip() == m] for m in (start, end)}
    if len(found[start]) != 1 or len(found[end]) != 1 or found[start][0] > found[end][0]:
        raise ValueError(f"block {name}: the page needs one {start!r} line and, after it, one {end!r} line")
    offset = [0]
    for line in lines:
        offset.append(offset[-1] + len(line))
    return offset[found[start][0] + 1], offset[found[end][0]]


def block_text(text: str, name: str) -> str:
    """The body of block `name` in a page's text, without its markers."""
    body_start, body_end = _bounds(text, name)
    return text[body_start:body_end]


def splice(text: str, name: str, body: str) -> str:
    """The page's text with block `name`'s body replaced by `body`, set off from the markers by a
    blank line on each side (Markdown takes the lines right after a comment as part of it). A
    page is up to date when splicing changes nothing."""
    body_start, body_end = _bounds(text, name)
    return text[:body_start] + "\n" + body.strip("\n") + "\n\n" + text[body_end:]
