"""The tables of docs/agent.md's host actions section, generated from table.py so that the docs
cannot drift: tests/unit/core/test_host_actions.py fails when the text between the markers differs
from `generated_docs()`."""
from __future__ import annotations

from .endpoints import HEALTH_ENDPOINTS, NO_SERVING_CA, SERVING_CAS
from .origins import ORIGINS
from .table import FILE_CLASSES, HOST_ACTIONS

__all__ = ["BEGIN", "END", "generated_docs"]

BEGIN = "<!-- BEGIN GENERATED: host-actions -->"
END = "<!-- END GENERATED: host-actions -->"


def _code(items: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"`{i}`" for i in items)


def _verified(port: int, scheme: str) -> str:
    if scheme != "https":
        return ""
    if port in SERVING_CAS:
        return f"`{SERVING_CAS[port]}` (or the step's TLS files)"
    assert port in NO_SERVING_CA, port
    return "nothing: it signs its own serving certificate (the step's TLS files if given)"


def generated_docs() -> str:
    lines = [BEGIN, "", "| file class | paths (first match wins) | why it is limited |", "|---|---|---|"]
    lines += [f"| {name} | {_code(patterns)} | {why} |" for name, patterns, why in FILE_CLASSES]
    lines += ["| script | any other file written with an execute bit | |",
              "| config | everything else (certificates, kubeconfigs, runtime configuration) | |", "",
              "| command kinds | may | targets | what for |", "|---|---|---|---|"]
    lines += [f"| {_code(row.kinds)} | {row.action} | {_code(row.targets)} | {row.why} |" for row in HOST_ACTIONS]
    lines += ["", "| health port | scheme | paths | answered by | server verified with |", "|---|---|---|---|---|"]
    lines += [f"| {port} | {scheme} | {_code(sorted(paths))} | {what} | {_verified(port, scheme)} |"
              for port, (scheme, paths, what) in sorted(HEALTH_ENDPOINTS.items())]
    lines += ["", "| operation | its commands' id slug | their kinds | |", "|---|---|---|---|"]
    lines += [f"| {o.operation} | `{o.slug}` | {o.kinds} | {o.why} |" for o in ORIGINS]
    return "\n".join([*lines, "", END])
