"""Parse the multi-document YAML into a `ClusterSpec`, collecting structural errors.

Errors carry the field paths the CLI and the `*.rejected` events show: `cluster.spec...`
for the BKECluster, `nodes[i].spec...` with `i` the index among BKENode documents in file
order, and `<source>:<line>:<column>` for YAML syntax errors.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import FieldError
from .limits import MAX_NODES, MAX_SPEC_BYTES, too_large_message
from .models import API_VERSION, BKECluster, BKENode, ClusterSpec
from .yaml_read import Document, find_line, read_documents

__all__ = ["MAX_NODES", "MAX_SPEC_BYTES", "LoadResult", "load_spec", "loc_to_path"]


class LoadResult(BaseModel):
    spec: ClusterSpec | None
    errors: list[FieldError]
    cluster_name: str | None = None


def loc_to_path(prefix: str, loc: tuple[Any, ...]) -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _pydantic_errors(prefix: str, exc: ValidationError) -> list[FieldError]:
    out = []
    for err in exc.errors(include_url=False):
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "missing":
            msg = "required field is missing"
        out.append(FieldError(path=loc_to_path(prefix, tuple(err["loc"])), message=msg))
    return out


def load_spec(text: str | bytes, source: str = "<spec>") -> LoadResult:
    """Load and structurally validate a spec. Semantic checks are `validate.validate_spec`."""
    # surrogatepass: a str that is no valid Unicode becomes bytes the reader refuses by position
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    if len(raw) > MAX_SPEC_BYTES:
        return LoadResult(spec=None, errors=[FieldError(path=source, message=too_large_message(len(raw)))])
    docs, errors = read_documents(raw, source)
    if not docs and errors:
        return LoadResult(spec=None, errors=errors)
    return _load_documents(docs, errors)


def _load_documents(docs: list[Document], errors: list[FieldError]) -> LoadResult:
    cluster_docs: list[tuple[int, dict]] = []
    node_docs: list[dict] = []
    node_places: list[Document] = []
    cluster_places: list[Document] = []
    for d in docs:
        i, doc = d.index, d.value
        if not isinstance(doc, dict):
            errors.append(FieldError(path=f"documents[{i}]", message="expected a mapping (a Kubernetes-style resource)"))
            continue
        kind = doc.get("kind")
        if kind == "BKECluster":
            cluster_docs.append((i, doc))
            cluster_places.append(d)
        elif kind == "BKENode":
            node_docs.append(doc)
            node_places.append(d)
        else:
            errors.append(
                FieldError(path=f"documents[{i}].kind", message=f"unknown kind {kind!r} (expected BKECluster or BKENode)")
            )
    if len(node_docs) > MAX_NODES:
        errors.append(FieldError(path="nodes", message=f"{len(node_docs)} nodes; the limit is {MAX_NODES}"))
        return LoadResult(spec=None, errors=errors)
    if not cluster_docs:
        errors.append(FieldError(path="cluster", message="no BKECluster document in the spec"))
    for i, _ in cluster_docs[1:]:
        errors.append(FieldError(path=f"documents[{i}]", message="a second BKECluster document; one spec describes one cluster"))
    errors += _duplicate_names(cluster_places, "documents", by_index=True)
    errors += _duplicate_names(node_places, "nodes", by_index=False)
    if not node_docs:
        errors.append(FieldError(path="nodes", message="no BKENode document in the spec"))

    cluster: BKECluster | None = None
    cluster_name: str | None = None
    if cluster_docs:
        doc = cluster_docs[0][1]
        meta = doc.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str):
            cluster_name = meta["name"]
        errors += _api_version_error("cluster", doc)
        try:
            cluster = BKECluster.model_validate(doc, by_alias=True, by_name=False)
        except ValidationError as exc:
            errors += [e for e in _pydantic_errors("cluster", exc) if e.path != "cluster.apiVersion"]
    nodes: list[BKENode] = []
    for i, doc in enumerate(node_docs):
        errors += _api_version_error(f"nodes[{i}]", doc)
        try:
            nodes.append(BKENode.model_validate(doc, by_alias=True, by_name=False))
        except ValidationError as exc:
            errors += [e for e in _pydantic_errors(f"nodes[{i}]", exc) if e.path != f"nodes[{i}].apiVersion"]
    spec = None
    if cluster is not None and len(nodes) == len(node_docs) and nodes:
        spec = ClusterSpec(cluster=cluster, nodes=nodes)
    return LoadResult(spec=spec, errors=errors, cluster_name=cluster_name)


def _api_version_error(prefix: str, doc: dict) -> list[FieldError]:
    got = doc.get("apiVersion")
    if got != API_VERSION:
        return [FieldError(path=f"{prefix}.apiVersion", message=f"expected {API_VERSION!r}, got {got!r}")]
    return []


def _duplicate_names(places: list[Document], label: str, by_index: bool) -> list[FieldError]:
    """`nodes[3].metadata.name: duplicate of nodes[1] (line 40)`: both places, never last-wins."""
    errs: list[FieldError] = []
    first: dict[str, tuple[str, int | None]] = {}
    for pos, d in enumerate(places):
        meta = d.value.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str):
            continue
        here = f"{label}[{d.index if by_index else pos}]"
        line = find_line(d.node, "metadata", "name")
        if name in first:
            other, other_line = first[name]
            at = f" (line {other_line})" if other_line else ""
            errs.append(FieldError(path=f"{here}.metadata.name", message=f"duplicate of {other}{at}: both are named {name!r}"))
        else:
            first[name] = (here, line)
    return errs
