"""extraArgs: the merge order and stable flag output.

Merge order, per flag (a later layer replaces one flag and keeps the others):

    built-in defaults < size presets < cluster extraArgs < node extraArgs

`feature-gates` is merged per gate, so a user gate does not drop the ones BKE sets.
The output is sorted by flag name: the same input always gives the same bytes (the original's
manifests churned because its map was iterated unsorted).

What a user may not set (the denylist, the version gates, the `allowUnsafeFlags` escape hatch)
is judged by `bke.core.spec.extra_args.check_extra_args` over the tables of `bke.core.flagrules`; they
are re-exported here for the renderer's modules.
"""
from __future__ import annotations

from collections.abc import Mapping

from bke.core.flagrules import DENYLIST, DenyRule
from bke.core.spec.extra_args import COMPONENT_FIELDS, check_extra_args, split_gates

__all__ = [
    "COMPONENT_FIELDS",
    "DENYLIST",
    "DenyRule",
    "check_extra_args",
    "format_flags",
    "merge_args",
]


# List flags a later layer adds to and never replaces: BKE's required admission plugins
# (NodeRestriction) stay whatever the user's extraArgs list; removing one is the denylist's
# `disable-admission-plugins`, refused for NodeRestriction.
UNION_FLAGS = frozenset({"enable-admission-plugins"})


def merge_args(*layers: Mapping[str, str]) -> dict[str, str]:
    """Merge flag layers, later wins per flag; `feature-gates` merges per gate (sorted), and a
    UNION_FLAGS list keeps every layer's items, earlier layers' first, each once."""
    out: dict[str, str] = {}
    gates: dict[str, str] = {}
    unions: dict[str, dict[str, None]] = {}
    for layer in layers:
        for name, value in layer.items():
            if name == "feature-gates":
                gates.update(split_gates(value))
            elif name in UNION_FLAGS:
                unions.setdefault(name, {}).update(dict.fromkeys(i.strip() for i in value.split(",") if i.strip()))
                out[name] = ",".join(unions[name])
            else:
                out[name] = value
    if gates:
        out["feature-gates"] = ",".join(f"{k}={v}" for k, v in sorted(gates.items()))
    return out


def format_flags(args: Mapping[str, str]) -> list[str]:
    """`--name=value`, sorted by name: stable bytes for the same input."""
    return [f"--{k}={args[k]}" for k in sorted(args)]
