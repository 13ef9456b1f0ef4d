"""Multi-document YAML in, Python values out, with every hostile shape refused by position.

Two passes over the bytes, so that nothing unbounded is ever built:
1. the parser's event stream (no tree, no recursion) measures nesting depth, scalar sizes and
   how many nodes aliases would expand to, and stops at the first limit passed;
2. only then the documents are composed and constructed, by a loader that records every
   duplicate key with both positions instead of letting the later value silently win (YAML 1.2
   requires unique keys; PyYAML keeps the last one).

Errors are `FieldError`s whose path is `<source>:<line>:<column>` (1-based), the place to edit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode

from .errors import FieldError
from .limits import MAX_ALIAS_NODES, MAX_SCALAR_BYTES, MAX_YAML_DEPTH

__all__ = ["Document", "find_line", "read_documents", "short_repr"]

_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE_TAG = "tag:yaml.org,2002:merge"


@dataclass(frozen=True)
class Document:
    index: int  # position among all documents of the stream, empty ones included
    value: Any
    node: Node  # kept to point at lines (`find_line`)


def short_repr(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _where(source: str, mark: Any) -> str:
    return f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source


class _Error(Exception):
    def __init__(self, error: FieldError):
        super().__init__(str(error))
        self.error = error


def _check_events(raw: bytes, source: str) -> None:
    """Pass 1: raise _Error at the first limit passed. Anchored sizes are remembered so that an
    alias costs what copying its target would cost."""
    anchored: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, expanded node count so far]
    via_alias = 0

    def add(n: int) -> None:
        if stack:
            stack[-1][1] += n

    for ev in yaml.parse(raw, Loader=_Base):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([ev.anchor, 1])
            if len(stack) > MAX_YAML_DEPTH:
                raise _Error(FieldError(path=_where(source, ev.start_mark),
                                        message=f"nesting deeper than {MAX_YAML_DEPTH} levels; a spec needs about 8"))
        elif isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, n = stack.pop()
            if anchor:
                anchored[anchor] = n
            add(n)
        elif isinstance(ev, yaml.ScalarEvent):
            if len(ev.value) > MAX_SCALAR_BYTES:
                raise _Error(FieldError(path=_where(source, ev.start_mark),
                                        message=f"a value of {len(ev.value)} characters; the limit is {MAX_SCALAR_BYTES}"))
            if ev.anchor:
                anchored[ev.anchor] = 1
            add(1)
        elif isinstance(ev, yaml.AliasEvent):
            n = anchored.get(ev.anchor or "", 1)
            via_alias += n
            if via_alias > MAX_ALIAS_NODES:
                raise _Error(FieldError(path=_where(source, ev.start_mark),
                                        message=f"aliases expand to more than {MAX_ALIAS_NODES} values (an alias bomb?)"))
            add(n)


class _DupKeyLoader(_Base):  # _Base is Any: PyYAML picks the C or the Python loader at run time
    """A safe loader that records duplicate keys (both places) instead of keeping the last."""

    def __init__(self, stream: bytes, source: str):
        super().__init__(stream)
        self.source = source
        self.duplicates: list[FieldError] = []

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        first: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == _MERGE_TAG:
                continue  # merge keys (`<<`) override by design; collection keys fail below
            key = self.construct_object(key_node, deep=False)
            try:
                earlier = first.setdefault(key, key_node)
            except TypeError:
                continue
            if earlier is not key_node:
                m = earlier.start_mark
                self.duplicates.append(FieldError(
                    path=_where(self.source, key_node.start_mark),
                    message=f"duplicate key {short_repr(key)} (first at line {m.line + 1}, column {m.column + 1}); "
                    "YAML would keep only the later value",
                ))
        return super().construct_mapping(node, deep=deep)


def read_documents(raw: bytes, source: str) -> tuple[list[Document], list[FieldError]]:
    """Every non-empty document, or no documents and the errors that stopped reading. Duplicate
    keys come back as errors alongside the documents, so that other problems show too."""
    try:
        _check_events(raw, source)
        loader = _DupKeyLoader(raw, source)
        try:
            docs: list[Document] = []
            i = 0
            while loader.check_node():
                node = loader.get_node()
                value = loader.construct_document(node)
                if value is not None:
                    docs.append(Document(i, value, node))
                i += 1
        finally:
            loader.dispose()
    except _Error as exc:
        return [], [exc.error]
    except yaml.MarkedYAMLError as exc:
        problem = exc.problem or exc.context or "invalid YAML"
        return [], [FieldError(path=_where(source, exc.problem_mark or exc.context_mark), message=f"YAML syntax error: {problem}")]
    except yaml.reader.ReaderError as exc:
        what = f"character #x{exc.character:04x}" if isinstance(exc.character, int) else "byte"
        return [], [FieldError(path=source, message=f"not UTF-8 text or a forbidden {what} at byte offset {exc.position}: {exc.reason}")]
    except yaml.YAMLError as exc:
        return [], [FieldError(path=source, message=f"YAML error: {short_repr(str(exc), 200)}")]
    except RecursionError:  # unreachable below MAX_YAML_DEPTH; kept so that it can never crash a service
        return [], [FieldError(path=source, message="nesting too deep")]
    return docs, loader.duplicates


def find_line(node: Node, *keys: str) -> int | None:
    """1-based line of the value at `keys` (e.g. "metadata", "name") in a document's node."""
    for key in keys:
        if not isinstance(node, MappingNode):
            return None
        for k, v in node.value:
            if isinstance(k, ScalarNode) and k.value == key:
                node = v
                break
        else:
            return None
    return int(node.start_mark.line) + 1
