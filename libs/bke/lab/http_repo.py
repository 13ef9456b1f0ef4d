"""`bke lab install --http-repo URL`: the spec's httpRepo replaced, so a lab fetches from a real
httpRepo (a bundle served by `bke bundle serve`) instead of writing placeholders."""
from __future__ import annotations

import yaml

__all__ = ["with_http_repo"]


def with_http_repo(spec_text: bytes, url: str) -> bytes:
    """The spec with `spec.clusterConfig.cluster.httpRepo` set to `url` in its BKECluster document
    (the other documents unchanged in content; comments are not kept). A spec without a
    BKECluster document is returned as it is: the planner reports that, with its field path."""
    docs = list(yaml.safe_load_all(spec_text))
    for doc in docs:
        if isinstance(doc, dict) and doc.get("kind") == "BKECluster":
            cluster = (((doc.get("spec") or {}).get("clusterConfig") or {}).get("cluster"))
            if isinstance(cluster, dict):
                cluster["httpRepo"] = url
                return yaml.safe_dump_all(docs, sort_keys=False).encode()
    return spec_text
