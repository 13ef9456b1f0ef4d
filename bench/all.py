#!/usr/bin/env python3
"""The main benchmarks in one command (`python3 dev.py bench`): certs, render, install, upgrade, metrics.

Each is a script that prints its own figures; this runs them one after another at the sizes
docs/benchmarks.md reports. Pass `--quick` for small sizes, and `--json DIR` to have each write
its result record to DIR/<name>.json (`--json bench/results`, then `bench/report.py`, updates
docs/benchmarks.md).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def runs(quick: bool) -> list[list[str]]:
    """Each bench's script and arguments, in the order they run (bench/report.py lists them)."""
    return [
        ["certs.py", "--nodes", "1000" if quick else "5000", "--algorithms", "ECDSA-P256" if quick else "RSA-2048,ECDSA-P256"],
        ["render.py", "--nodes", "1000" if quick else "5000"],
        ["install.py", "--nodes", *(["100", "1000"] if quick else ["100", "1000", "5000"])],
        ["upgrade.py", "--nodes", *(["100", "1000"] if quick else ["100", "1000", "5000"])],
        ["metrics.py", "--nodes", *(["1000"] if quick else ["5000", "10000"])],
    ]


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    json_dir = Path(argv[argv.index("--json") + 1]) if "--json" in argv[:-1] else None
    worst = 0
    for script, *args in runs(quick):
        if json_dir is not None:
            args = [*args, "--json", str(json_dir / f"{Path(script).stem}.json")]
        print(f"== bench/{script} {' '.join(args)}", flush=True)
        worst = max(worst, subprocess.call([sys.executable, str(HERE / script), *args]))
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
