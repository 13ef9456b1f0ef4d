"""Generate bke/core/flagrules/value_types.json from the built Kubernetes binaries' own `--help`.

Why from the binaries: the value type pflag prints beside each flag (`--max-pods int32`,
`--request-timeout duration`, a bool flag prints none) is what the component parses the value
as, so the plan-time check (bke.core.flagrules.value_check) refuses exactly what the binary would.

    python -m bke.lab.flag_types          # rewrite the table (needs `python3 dev.py kube`)
    python -m bke.lab.flag_types --check  # exit 1 if the table differs from the binaries

A drift test does the check whenever the binaries are built.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from .kube_binaries import BUILDS, locate

__all__ = ["COMPONENTS", "generate", "help_types", "render_table"]

COMPONENTS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet")
TABLE = Path(__file__).resolve().parents[1] / "core" / "flagrules" / "value_types.json"
# `      --name TYPE   description` or, for a bool, `      --name   description` (pflag's usage)
_LINE = re.compile(r"^\s+(?:-[A-Za-z], )?--([a-z0-9][a-z0-9-]*)(?: ([^\s]+))?(?:\s{2,}|$)")


def help_types(help_text: str) -> dict[str, str]:
    """flag -> pflag type ("bool" where the help names none)."""
    out: dict[str, str] = {}
    for line in help_text.splitlines():
        m = _LINE.match(line)
        if m:
            out.setdefault(m[1], m[2] or "bool")
    return out


def generate() -> dict[str, dict[str, str]]:
    """{"<component>@<minor>": {flag: type}} for every built Kubernetes release."""
    table: dict[str, dict[str, str]] = {}
    for build in (b for b in BUILDS if b.name == "kubernetes"):
        minor = ".".join(build.version.split(".")[:2])
        for comp in COMPONENTS:
            binary = locate(comp, build.version)
            if binary is None:
                raise FileNotFoundError(f"{comp} {build.version} is not built: run `python3 dev.py kube`")
            proc = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
            table[f"{comp}@{minor}"] = dict(sorted(help_types(proc.stdout + proc.stderr).items()))
    return table


def render_table(table: dict[str, dict[str, str]]) -> str:
    """The table as the committed JSON (data, not code: two minors of ~250 flags each would be
    the largest module in the tree and its longest repetition)."""
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render_table(generate())
    if "--check" in argv:
        if TABLE.read_text() != text:
            print(f"{TABLE} differs from the binaries' --help: run `python -m bke.lab.flag_types`", file=sys.stderr)
            return 1
        return 0
    TABLE.write_text(text)
    print(f"wrote {TABLE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
