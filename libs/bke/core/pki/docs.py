"""Generate the tables of docs/certs.md from the certificate table, so the docs cannot drift.

docs/certs.md keeps hand-written prose outside the markers
``<!-- BEGIN GENERATED: certs -->`` / ``<!-- END GENERATED: certs -->``; between them sits
:func:`generated_docs` output. tests/unit/core/pki/test_pki_docs.py fails when they differ and says how
to regenerate (``splice_generated``).
"""
from __future__ import annotations

from bke.core.plan import Plan
from bke.core.spec.roles import is_master
from .instances import node_file_refs
from .subjects import RULES
from .table import CERTS, CertSpec, Place

__all__ = ["BEGIN", "END", "generated_docs", "splice_generated"]

BEGIN = "<!-- BEGIN GENERATED: certs -->"
END = "<!-- END GENERATED: certs -->"

_WHERE = {
    "all": "every node",
    "master": "masters",
    "registers": "registering nodes",
    "owner": "its node",
}
_SANS = {
    "none": "-",
    "ca": "DNS: its CN",
    "apiserver": "node name + IP, kubernetes, kubernetes.default, kubernetes.default.svc, "
                 "kubernetes.default.svc.&lt;dnsDomain&gt;, 1st service IP, endpoint host, 127.0.0.1, certSANs",
    "etcd-member": "node name + IP, localhost, 127.0.0.1, ::1",
}


def _where(word: str) -> str:
    return _WHERE.get(word, f"`{word}` nodes")


def _places(places: tuple[Place, ...]) -> str:
    return "<br>".join(f"`{p.path}` ({_where(p.where)})" for p in places) or "no node"


def _instances(spec: CertSpec) -> str:
    who = {"master": "master", "registers": "registering"}.get(spec.needs, f"`{spec.needs}`")
    scope = "one per cluster" if spec.per == "cluster" else f"one per {who} node"
    return scope + (f", only if {spec.etcd} is planned" if spec.etcd and spec.etcd != "etcd-data" else "")


def _usage(spec: CertSpec) -> str:
    return {"ca": "CA", "server": "serverAuth", "client": "clientAuth", "server+client": "serverAuth, clientAuth"}[spec.usage]


def _o(spec: CertSpec) -> str:
    o = ", ".join(spec.o) or "-"
    if not spec.o_rule:
        return o
    rule = RULES[spec.o_rule]
    return f"{o} (none from {', '.join(rule.first_release)} on: {rule.source})"


def certificate_table() -> list[str]:
    lines = [
        "| name | kind | CA | CN | O | SANs | EKU | validity | instances | certificate / kubeconfig | private key |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in CERTS:
        lines.append(
            f"| `{s.name}` | {s.kind} | {s.ca or ('self' if s.is_ca else '-')} | {s.cn or '-'} | {_o(s)} "
            f"| {_SANS[s.sans]} | {_usage(s) if s.kind != 'keypair' else '-'} "
            f"| {'caValidityDays' if s.validity == 'ca' and s.kind != 'keypair' else '-' if s.kind == 'keypair' else 'validityDays'} "
            f"| {_instances(s)} | {_places(s.cert)} | {_places(s.key) if s.kind != 'kubeconfig' else '(embedded)'} |"
        )
    return lines


def node_files(plan: Plan) -> list[str]:
    lines = []
    files = node_file_refs(plan)
    for node in plan.nodes:
        kind = "master" if is_master(node.roles) else "worker" if node.registers else "etcd-only"
        lines += ["", f"**{node.hostname}** ({kind}; roles {', '.join(node.roles)}; runs {', '.join(node.components)})", ""]
        lines += [f"- `{f.path}` {f.mode:04o} ← `{f.instance}`" for f in files[node.hostname]]
    return lines


def generated_docs(example: Plan, example_name: str) -> str:
    lines = [BEGIN, "", "### The certificate table (`bke.core.pki.table.CERTS`, CA rows first)", ""]
    lines += certificate_table()
    lines += ["", f"### Files per node for `{example_name}` (`bke certs files {example_name}`)"]
    lines += node_files(example)
    lines += ["", END]
    return "\n".join(lines) + "\n"


def splice_generated(doc: str, generated: str) -> str:
    """Replace the generated section of ``doc`` (markers included) with ``generated``."""
    start, end = doc.index(BEGIN), doc.index(END) + len(END)
    return doc[:start] + generated.rstrip("\n") + doc[end:]
