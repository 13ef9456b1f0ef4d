"""The manifest: what a store holds besides the PEMs, so it can be read without the plan.

Why: ``check-expiration`` and ``renew`` work from a store alone (like kubeadm works from
/etc/kubernetes/pki), and must still say on which nodes a certificate lives; the directory store
must know which node file holds which instance. The manifest carries the certificate settings
(algorithm, validity), each instance's CA / nodes / kubeconfig server, and every node's file list.
Serialised as compact, deterministic JSON (the same plan always gives the same bytes).
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from collections.abc import Collection
from dataclasses import dataclass, replace

from bke.core.plan import Plan
from bke.core.state.schema import check_readable
from .errors import StoreError
from .instances import FileRef, Instance, nodes_by_instance

__all__ = ["Entry", "Manifest", "build_manifest"]

_VERSION = 1  # the PKI record's version (bke.core.state.schema "pki": versioned since its first form)


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # table row
    owner: str | None
    ca: str | None
    nodes: tuple[str, ...]
    server: str | None = None  # kubeconfig rows
    user: str = ""  # kubeconfig rows: the user name (the certificate's CN)


@dataclass(frozen=True)
class Manifest:
    cluster: str
    key_algorithm: str
    ca_validity_days: int
    validity_days: int
    entries: Mapping[str, Entry]  # CA rows first
    files: Mapping[str, Sequence[FileRef]]  # hostname -> files

    def to_json(self) -> bytes:
        doc = {
            "version": _VERSION,
            "cluster": self.cluster,
            "keyAlgorithm": self.key_algorithm,
            "caValidityDays": self.ca_validity_days,
            "validityDays": self.validity_days,
            "entries": {i: [e.name, e.owner, e.ca, list(e.nodes), e.server, e.user] for i, e in self.entries.items()},
            "files": {h: [[f.path, f.mode, f.instance, f.part] for f in refs] for h, refs in self.files.items()},
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, raw: bytes | str) -> Manifest:
        try:
            doc = json.loads(raw)
            if isinstance(doc.get("version"), int) and doc["version"] > _VERSION:
                # the readers' rule of bke.core.state.schema: a newer form is refused, never misread
                check_readable("pki", doc["version"], f"the PKI manifest of {doc.get('cluster')}")
            if doc.get("version") != _VERSION:
                raise StoreError(f"PKI manifest version {doc.get('version')!r} is not supported")
            return cls(
                cluster=doc["cluster"],
                key_algorithm=doc["keyAlgorithm"],
                ca_validity_days=int(doc["caValidityDays"]),
                validity_days=int(doc["validityDays"]),
                entries={i: Entry(n, o, ca, tuple(nodes), srv, user)
                         for i, (n, o, ca, nodes, srv, user) in doc["entries"].items()},
                files={h: [FileRef(p, int(m), i, part) for p, m, i, part in refs] for h, refs in doc["files"].items()},
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"unreadable PKI manifest: {type(exc).__name__}") from None

    def refs_by_instance(self) -> dict[str, list[tuple[str, FileRef]]]:
        """instance id -> [(hostname, file)]: where a store finds an instance's PEMs."""
        out: dict[str, list[tuple[str, FileRef]]] = {}
        for host, refs in self.files.items():
            for ref in refs:
                out.setdefault(ref.instance, []).append((host, ref))
        return out

    def without_nodes(self, hosts: Collection[str]) -> tuple[Manifest, tuple[str, ...]]:
        """The manifest once `hosts` have left the cluster, and the instances that go with them
        (those the nodes own: their key pairs and kubeconfigs). Other entries only stop listing
        them; for workers that is what the ensure step builds from a plan without them."""
        gone = set(hosts)
        removed = tuple(sorted(i for i, e in self.entries.items() if e.owner in gone))
        entries = {i: replace(e, nodes=tuple(n for n in e.nodes if n not in gone))
                   for i, e in self.entries.items() if e.owner not in gone}
        files = {h: refs for h, refs in self.files.items() if h not in gone}
        return replace(self, entries=entries, files=files), removed


def build_manifest(plan: Plan, desired: Sequence[Instance], files: Mapping[str, Sequence[FileRef]]) -> Manifest:
    certs = plan.spec.config.certificates
    where = nodes_by_instance(files)  # type: ignore[arg-type]
    return Manifest(
        cluster=plan.cluster,
        key_algorithm=certs.key_algorithm,
        ca_validity_days=certs.ca_validity_days,
        validity_days=certs.validity_days,
        entries={i.id: Entry(i.spec.name, i.owner, i.spec.ca, tuple(where.get(i.id, ())), i.server,
                             i.cn if i.spec.kind == "kubeconfig" else "") for i in desired},
        files=files,
    )
