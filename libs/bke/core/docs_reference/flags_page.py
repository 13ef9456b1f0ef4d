"""docs/reference/flags.md: how a user's `extraArgs` flag is judged, per component, from the tables
spec validation and the renderer read (bke.core.flagrules: the denylist, the version gates, the flag
table and the value types)."""
from __future__ import annotations

import functools
from collections import Counter

from bke.core import versions
from bke.core.flagrules import DENYLIST, GATES, Gate, known_flags
from bke.core.flagrules.catalog import Flag
from bke.core.flagrules.flag_table import FLAGS
from bke.core.flagrules.value_check import VALUE_CLASSES
from bke.core.flagrules.value_types import VALUE_TYPES
from .markdown import cell, code, table

__all__ = ["render_flags_page"]

COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "etcd")

_INTRO = """\
# Flag rules

Flags set in a spec's `extraArgs` (cluster-wide, or per node) are judged at plan time, so that
`bke plan` and the planner refuse a spec, with the field path of each refused flag, before
anything reaches a node; the renderer judges them again before it writes a file. Generated from
`bke.core.flagrules` (`python -m bke_cli.docs_reference`). In order:

1. **Denylist**: flags BKE owns (certificate paths, etcd membership, listeners the probes use) or
   that would switch a safety off, refused at any value or at the values listed.
2. **Version gates**: flags and feature gates that exist only in some versions; outside them a
   flag is refused, with what to use instead.
3. **Flag table**: a flag the table does not know in the cluster's version (unknown, removed, or
   not yet added) is refused; a deprecated one is a warning.
4. **Value type**: a value the component would not parse as its flag's type (`max-pods: "lots"`)
   is refused, since the component would not start.

`allowUnsafeFlags` (in `cluster.spec.clusterConfig.cluster`) lets a refused flag through, as a
warning: `flag` for every component, `component/flag` for one (`kubelet/anonymous-auth`). How the
layers merge (defaults, size presets, cluster, node) is in [Renderer](../renderer.md).

Kubernetes components are judged by the cluster's Kubernetes minor, etcd by its full release.
"""

# What each value class accepts, as VALUE_CLASSES checks it (a class added there must be
# explained here: the page fails to generate without it).
_CLASS_TEXT = {
    "bool": "1, t, true, 0, f, false and their capitals (Go's strconv.ParseBool)",
    "int": "an integer (decimal, or 0x, 0o, 0b prefixed)",
    "float": "a number",
    "duration": "a Go duration: 30s, 5m, 1h30m",
    "quantity": "a Kubernetes quantity: 100Mi, 2, 500m",
    "ip": "an IPv4 or IPv6 address",
    "list": "comma-separated integers",
    "map": "comma-separated key=value pairs",
    "range": "a port range: 30000-32767",
}


def _minors() -> list[versions.Version]:
    return [versions.parse_version(f"{m}.0") for m in versions.KUBERNETES]


def _spans(keys: list[str]) -> str:
    """["1.31", "1.32", "1.33"] -> "1.31-1.33" (consecutive supported minors joined)."""
    if not keys:
        return ""
    order = list(versions.KUBERNETES)
    runs: list[list[str]] = []
    for k in keys:
        if runs and order.index(k) == order.index(runs[-1][-1]) + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _denylist(component: str) -> str:
    rows = [[code(f"--{r.flag}"), cell(r.refused_text), cell(r.reason)] for r in DENYLIST if r.component == component]
    if not rows:
        return "No flag is refused outright.\n"
    return table(["flag", "refused values", "why"], rows) + "\n"


def _gate_name(g: Gate) -> str:
    return code(g.name if g.kind != "flag" else f"--{g.name}")


def _gates(component: str) -> str:
    gates = [g for g in GATES if g.component == component]
    if not gates:
        return "No version gates: every flag the flag table knows is accepted in every supported version.\n"
    if component == "etcd":
        rows = [[_gate_name(g), g.kind, cell(g.range_text), cell(g.instead)] for g in gates]
        return table(["name", "kind", "etcd releases", "otherwise"], rows) + "\n"
    minors = _minors()
    rows = [[_gate_name(g), g.kind, *("yes" if g.covers(v) else "-" for v in minors), cell(g.instead)] for g in gates]
    return table(["name", "kind", *versions.KUBERNETES, "otherwise"], rows) + "\n"


def _accepted(f: Flag) -> str:
    if f.component == "etcd":
        since = f"from {f.since}" if f.since else ""
        until = f"before {f.removed}" if f.removed else ""
        return " ".join(p for p in (since, until) if p) or "all"
    keys = [v.minor_key for v in _minors() if f.present(v)]
    if not keys:
        return f"none (removed in {f.removed})" if f.removed else f"none (added in {f.since})"
    return "all" if len(keys) == len(versions.KUBERNETES) else _spans(keys)


def _deprecated(f: Flag) -> str:
    if f.deprecated is None:
        return ""
    return "every supported version" if f.deprecated.startswith("<") else f"from {f.deprecated}"


def _changes(component: str) -> str:
    """The flag table's rows that are not plainly accepted everywhere, grouped by what they say."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for f in FLAGS:
        if f.component != component:
            continue
        key = (_accepted(f), _deprecated(f), f.instead)
        if key == ("all", "", ""):
            continue
        groups.setdefault(key, []).append(code(f"--{f.name}"))
    if not groups:
        return "Every flag of the table is accepted in every supported version.\n"
    rows = [[", ".join(flags), cell(acc), cell(dep), cell(instead)] for (acc, dep, instead), flags in groups.items()]
    return table(["flags", "accepted in", "deprecated (a warning)", "instead"], rows) + "\n"


def _known_counts() -> str:
    minors = _minors()
    rows = [[c, *(str(len(known_flags(c, v))) for v in minors)] for c in COMPONENTS if c != "etcd"]
    etcd = [versions.parse_version(f"{m}.0") for m in versions.ETCD_MINORS]
    etcd_rows = [["etcd", *(str(len(known_flags("etcd", v))) for v in etcd)]]
    return ("## Flags known per version\n\nHow many flags the flag table accepts. It lists every flag BKE renders "
            "and the flags users commonly set, not every flag upstream has; a flag it does not know is refused, and "
            "`allowUnsafeFlags` is the way through.\n\n"
            + table(["component", *versions.KUBERNETES], rows) + "\n\n"
            + table(["component", *(f"{m}.0" for m in versions.ETCD_MINORS)], etcd_rows) + "\n")


@functools.cache
def _value_counts() -> dict[str, tuple[str, Counter[str]]]:
    """Per Kubernetes component: the newest minor whose binaries' types are recorded, and how many
    of its flags fall in each value class ("" for types that are not checked)."""
    out = {}
    for component in COMPONENTS:
        built = sorted((k for k in VALUE_TYPES if k.startswith(component + "@")), key=lambda k: versions.parse_version(k.split("@")[1] + ".0"))
        if not built:
            continue
        types = VALUE_TYPES[built[-1]]
        out[component] = (built[-1].split("@")[1], Counter(VALUE_CLASSES[t][0] if t in VALUE_CLASSES else "" for t in types.values()))
    return out


def _value_types() -> str:
    classes = list(dict.fromkeys(shown for shown, _ in VALUE_CLASSES.values()))
    pflag = {c: ", ".join(code(t) for t, (shown, _) in VALUE_CLASSES.items() if shown == c) for c in classes}
    meaning = [[c, pflag[c], cell(_CLASS_TEXT[c])] for c in classes]
    counts = _value_counts()
    rows = [[f"{c} {minor}", *(str(n[k]) for k in classes), str(n[""])] for c, (minor, n) in counts.items()]
    return ("## Value types\n\nEach Kubernetes component's flags have the type its own `--help` prints (pflag's "
            "type names, recorded from the built binaries); a value is checked as the component parses it. Types "
            "not listed here (strings, paths, named certificates) are not checked, nor are etcd's values.\n\n"
            + table(["class", "pflag types", "accepts"], meaning) + "\n\n"
            "Flags per class, from the newest minor whose binaries are recorded (another minor is judged by the "
            "nearest recorded one):\n\n"
            + table(["component", *classes, "not checked"], rows) + "\n")


def _component(component: str) -> str:
    return "\n".join([f"## {component}\n", "### Refused flags\n", _denylist(component),
                      "### Version gates\n", _gates(component),
                      "### Flags that change across versions\n", _changes(component)])


def render_flags_page() -> str:
    return "\n".join([_INTRO, *(_component(c) for c in COMPONENTS), _known_counts(), _value_types()])
