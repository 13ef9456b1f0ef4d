"""Parse YAML back ~3x faster than yaml.load(CSafeLoader), with exactly PyYAML's results.

Why: parse-back is most of the renderer's cost (a kube-apiserver manifest takes ~1.5 ms with
CSafeLoader, whose C parser feeds a pure-Python node graph and constructor). We build objects
straight from the C parser's events instead, and resolve each plain scalar with PyYAML's own
resolver and SafeConstructor (cached per distinct string: flag values repeat across thousands of
pods), so types come out exactly as PyYAML would make them. Anything outside that simple subset
(anchors, aliases, explicit tags, merge keys) falls back to yaml.load_all itself. A unit test
compares both loaders on every file the renderer produces.
"""
from __future__ import annotations

import functools
from typing import Any

import yaml
from yaml import events as ev

__all__ = ["load_all"]

_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_RESOLVER = yaml.resolver.Resolver()
_CONSTRUCTOR = yaml.constructor.SafeConstructor()
_SKIP = (ev.StreamStartEvent, ev.StreamEndEvent, ev.DocumentStartEvent, ev.DocumentEndEvent)


_KEY = object()  # "the open mapping waits for a key"


class _Fallback(Exception):
    pass


@functools.lru_cache(maxsize=1 << 16)
def _plain(value: str) -> Any:
    """A plain (unquoted) scalar, resolved and constructed by PyYAML itself; results are immutable."""
    tag = _RESOLVER.resolve(yaml.ScalarNode, value, (True, False))
    # The tag's constructor function directly: construct_object() would remember every node.
    return _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, yaml.ScalarNode(tag, value))


def _scalar(e: ev.ScalarEvent) -> Any:
    if e.anchor is not None or (e.tag is not None and e.tag != "!"):
        raise _Fallback
    return _plain(e.value) if e.implicit[0] else e.value


def _fast(text: str) -> list[Any]:
    docs: list[Any] = []
    stack: list[Any] = []
    pending: list[Any] = []  # per open mapping: the key waiting for its value, or _KEY
    # Any: events are told apart by exact type (`type(e) is`, cheaper than isinstance on this
    # hot path), which type checkers do not narrow on
    e: Any
    for e in yaml.parse(text, Loader=_Loader):
        t = type(e)
        if t is ev.ScalarEvent:
            value = _scalar(e)
        elif t is ev.MappingStartEvent or t is ev.SequenceStartEvent:
            if e.anchor is not None or (e.tag is not None and e.tag != "!"):
                raise _Fallback
            stack.append({} if t is ev.MappingStartEvent else [])
            pending.append(_KEY)
            continue
        elif t is ev.MappingEndEvent or t is ev.SequenceEndEvent:
            value = stack.pop()
            pending.pop()
        elif t in _SKIP:
            continue
        else:  # aliases
            raise _Fallback
        if not stack:
            docs.append(value)
            continue
        top = stack[-1]
        if type(top) is list:
            top.append(value)
        elif pending[-1] is _KEY:
            if value == "<<" or isinstance(value, (dict, list)):
                raise _Fallback  # merge keys and complex keys: let PyYAML decide
            pending[-1] = value
        else:
            top[pending[-1]] = value
            pending[-1] = _KEY
    return docs



def load_all(text: str) -> list[Any]:
    """Every non-empty document, as yaml.load_all(text, CSafeLoader) would return it."""
    try:
        docs = _fast(text)
    except _Fallback:
        docs = list(yaml.load_all(text, Loader=_Loader))
    return [d for d in docs if d is not None]
