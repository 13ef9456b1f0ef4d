"""Parse the multi-document YAML into a `ClusterSpec`, collecting structural errors.

Errors carry the field paths the CLI and the `*.rejected` events show: `cluster.spec...`
for the BKECluster, `nodes[i].spec...` with `i` the index among BKENode documents in file
order, and `<source>:<line>:<column>` for YAML syntax errors.
"""
from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .errors import FieldError
from .models import API_VERSION, BKECluster, BKENode, ClusterSpec

__all__ = ["MAX_NODES", "MAX_SPEC_BYTES", "LoadResult", "load_spec", "loc_to_path"]

MAX_SPEC_BYTES = 8 * 1024 * 1024
MAX_NODES = 10_000
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


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
    raw = text.encode() if isinstance(text, str) else text
    if len(raw) > MAX_SPEC_BYTES:
        return LoadResult(
            spec=None,
            errors=[FieldError(path=source, message=f"spec is {len(raw)} bytes; the limit is {MAX_SPEC_BYTES} (8 MiB)")],
        )
    try:
        docs = [d for d in yaml.load_all(raw, Loader=_Loader) if d is not None]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = exc.problem or exc.context or "invalid YAML"
        return LoadResult(spec=None, errors=[FieldError(path=where, message=f"YAML syntax error: {problem}")])
    except yaml.YAMLError as exc:
        return LoadResult(spec=None, errors=[FieldError(path=source, message=f"YAML error: {exc}")])

    errors: list[FieldError] = []
    cluster_docs: list[tuple[int, dict]] = []
    node_docs: list[dict] = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            errors.append(FieldError(path=f"documents[{i}]", message="expected a mapping (a Kubernetes-style resource)"))
            continue
        kind = doc.get("kind")
        if kind == "BKECluster":
            cluster_docs.append((i, doc))
        elif kind == "BKENode":
            node_docs.append(doc)
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
            cluster = BKECluster.model_validate(doc)
        except ValidationError as exc:
            errors += [e for e in _pydantic_errors("cluster", exc) if e.path != "cluster.apiVersion"]
    nodes: list[BKENode] = []
    for i, doc in enumerate(node_docs):
        errors += _api_version_error(f"nodes[{i}]", doc)
        try:
            nodes.append(BKENode.model_validate(doc))
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
