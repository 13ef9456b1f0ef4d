"""Kubeconfigs BKE writes carry credentials, never a program to run.

Why: a kubeconfig's user may name an `exec` credential plugin or an `auth-provider`; kubectl,
the kubelet and the control plane's components run or load it when they read the file, so a
kubeconfig is a way to run any program as whoever uses it (root, for the node's own). BKE's
kubeconfigs embed a client certificate and key (bke.core.pki.kubeconfig) or name a token file
(kube-proxy's), so any key named `exec` or `auth-provider` (in any letter case, anywhere in the
document) is refused, as is a document with a key twice (readers disagree on which one wins).
Checked where they are made (bke.core.pki.kubeconfig, the renderer's addons) and by the agent before
it writes a kubeconfig-like file: one at a kubeconfig's path, or whose text has a `users` key.
"""
from __future__ import annotations

import fnmatch
import re
from typing import Any

import yaml

__all__ = ["KUBECONFIG_PATHS", "FORBIDDEN_KEYS", "is_kubeconfig_path", "kubeconfig_problems", "kubeconfig_refusal",
           "may_name_a_program"]

KUBECONFIG_PATHS = ("/etc/kubernetes/*.conf", "*kubeconfig*")
_KUBECONFIG_PATH = re.compile("|".join(fnmatch.translate(p) for p in KUBECONFIG_PATHS))
FORBIDDEN_KEYS = frozenset({"exec", "auth-provider"})
_USERS_KEY = re.compile(rb"""(?i)["']?\busers\b["']?\s*:""")
_BASE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):
    """The safe loader (libyaml's when built), refusing a key given twice in one mapping."""


def _no_duplicates(loader: Any, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    out: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=deep)
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def may_name_a_program(data: bytes) -> bool:
    """A cheap look at the text: False when no key of FORBIDDEN_KEYS can be in it as written
    (for text whose structure its maker knows; an escaped key is found by the parse only)."""
    low = data.lower()
    return any(k.encode() in low for k in FORBIDDEN_KEYS)


def is_kubeconfig_path(path: str) -> bool:
    return _KUBECONFIG_PATH.match(path) is not None


def _forbidden(doc: Any, where: str) -> list[str]:
    if isinstance(doc, dict):
        out = []
        for k, v in doc.items():
            here = f"{where}.{k}" if where else str(k)
            if isinstance(k, str) and k.casefold() in FORBIDDEN_KEYS:
                out.append(f"{here}: a kubeconfig BKE writes names no {k.casefold()} (it runs a program)")
            out += _forbidden(v, here)
        return out
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _forbidden(v, f"{where}[{i}]")]
    return []


def kubeconfig_problems(text: bytes | str, *, strict: bool = True) -> list[str]:
    """What makes `text` not a kubeconfig BKE writes: not one YAML mapping, a key given twice,
    a key named `exec` or `auth-provider`. Empty when it is fine. Not `strict`: only the keys
    are checked, in whatever YAML documents `text` holds (text that is no YAML passes)."""
    try:
        docs = list(yaml.load_all(text, Loader=_Loader))
    except yaml.YAMLError as exc:
        return [f"not a kubeconfig: {str(exc).splitlines()[0]}"] if strict else []
    if strict and (len(docs) != 1 or not isinstance(docs[0], dict)):
        return ["not a kubeconfig: one YAML mapping expected"]
    return [p for i, doc in enumerate(docs) for p in _forbidden(doc, "" if len(docs) == 1 else f"document {i}")]


def kubeconfig_refusal(path: str, data: bytes) -> str | None:
    """Why the agent does not write `data` at `path` (None if it may): a file at a kubeconfig's
    path that is not a kubeconfig BKE writes, or any file with a `users` key in its text that
    names an exec plugin or an auth provider."""
    at_path = is_kubeconfig_path(path)
    if not (at_path or (b"users" in data.lower() and _USERS_KEY.search(data))):  # the cheap test first
        return None
    problems = kubeconfig_problems(data, strict=at_path)
    return f"{path}: {'; '.join(problems)[:300]}" if problems else None
