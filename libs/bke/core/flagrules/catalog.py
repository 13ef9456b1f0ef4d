"""Which flags each component accepts in each supported version: the lookup over the flag table.

A flag of a component is one of:
- known in the version: accepted (a deprecation is a warning for flags users set);
- known but outside its range: removed before the version, or added after it: an error that
  names the version and when it changed;
- unknown to the table: an error too. The table lists every flag BKE renders and the flags users
  commonly set, not every flag upstream has: a flag it does not know can be let through with
  `allowUnsafeFlags` (the same escape hatch as the denylist), which is a warning.

Versions: Kubernetes components by minor ("1.33"), etcd by full release ("3.5.11"), as in gates.py.
The rows and their sources are in flag_table.py.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from bke.core.versions import Version, parse_version

__all__ = ["Flag", "FlagVerdict", "flag_verdict", "known_flags"]


@dataclass(frozen=True)
class Flag:
    component: str  # family: kube-apiserver | kube-controller-manager | kube-scheduler | kubelet | etcd
    name: str
    source: str
    since: str | None = None  # first version that has it; None: every supported version
    removed: str | None = None  # first version without it
    deprecated: str | None = None  # first version that marks it deprecated ("<1.31": before the range)
    instead: str = ""

    def _key(self, text: str) -> tuple[int, int, int]:
        v = parse_version(text if text.count(".") == 2 else f"{text}.0")
        return v.major, v.minor, v.patch

    def present(self, v: Version) -> bool:
        key = (v.major, v.minor, v.patch)
        if self.since is not None and key < self._key(self.since):
            return False
        return self.removed is None or key < self._key(self.removed)

    def deprecated_in(self, v: Version) -> bool:
        if self.deprecated is None:
            return False
        return self.deprecated.startswith("<") or (v.major, v.minor, v.patch) >= self._key(self.deprecated)


@dataclass(frozen=True)
class FlagVerdict:
    ok: bool
    deprecated: bool
    message: str  # why not ok, or the deprecation note; "" when ok and current


def _a(component: str) -> str:
    return f"an {component}" if component[0] in "aeiou" else f"a {component}"


def _shown(component: str, v: Version) -> str:
    return str(v) if component == "etcd" else v.minor_key


@functools.lru_cache(maxsize=8192)  # asked once per flag and node by the renderer: 10,000-node plans
def flag_verdict(component: str, name: str, version: Version) -> FlagVerdict:
    """The table's word on `--name` of `component` (a family name) at `version`."""
    from .flag_table import FLAG_INDEX  # the data module is large: loaded on first use

    rows = FLAG_INDEX.get((component, name), ())
    shown = _shown(component, version)
    if not rows:
        return FlagVerdict(False, False, f"not {_a(component)} flag in {shown}")
    current = [r for r in rows if r.present(version)]
    if current:
        row = current[0]
        if row.deprecated_in(version):
            since = "" if row.deprecated is None or row.deprecated.startswith("<") else f" since {row.deprecated}"
            return FlagVerdict(True, True, f"--{name} is deprecated in {component} {shown}{since}" + (f"; use {row.instead}" if row.instead else ""))
        return FlagVerdict(True, False, "")
    row = rows[0]
    key = (version.major, version.minor, version.patch)
    if row.removed is not None and key >= row._key(row.removed):
        why = f"removed in {row.removed}"
    else:
        why = f"added in {row.since}"
    return FlagVerdict(False, False, f"not {_a(component)} flag in {shown} ({why})" + (f"; use {row.instead}" if row.instead else ""))


def known_flags(component: str, version: Version) -> frozenset[str]:
    """Every flag of `component` the table accepts at `version` (for the per-minor tests and docs)."""
    from .flag_table import FLAGS

    return frozenset(f.name for f in FLAGS if f.component == component and f.present(version))
