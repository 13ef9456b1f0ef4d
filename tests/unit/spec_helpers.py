"""Building small specs in tests: a base cluster plus per-node role lists."""
from __future__ import annotations

import copy
from typing import Any

import yaml

from bke.core.spec.synth import synth_docs

__all__ = ["docs_with_roles", "to_text"]


def docs_with_roles(*roles: list[str], endpoint: tuple[str, int] | None = None, **cluster: Any) -> list[dict]:
    docs = synth_docs(len(roles))
    for doc, r in zip(docs[1:], roles):
        doc["spec"]["role"] = list(r)
    if endpoint:
        docs[0]["spec"]["controlPlaneEndpoint"] = {"host": endpoint[0], "port": endpoint[1]}
    else:
        masters = [d for d in docs[1:] if {"master", "master/node"} & set(d["spec"]["role"])]
        split = [d for d in masters if "apiserver" in d["spec"]["role"]]
        master = (split or masters or docs[1:])[0]
        docs[0]["spec"]["controlPlaneEndpoint"] = {"host": master["spec"]["ip"], "port": 6443}
    docs[0]["spec"]["clusterConfig"]["cluster"].update(copy.deepcopy(cluster))
    return docs


def to_text(docs: list[dict]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False)
