#!/usr/bin/env python3
"""Every benchmark in one command (`python3 dev.py bench`): certs, render, install, upgrade, metrics.

Each is a script that prints its own figures; this runs them one after another with the
sizes recorded in the README. Pass `--quick` for small sizes.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str]) -> int:
    quick = "--quick" in argv
    runs = [
        ["certs.py", "--nodes", "1000" if quick else "5000", "--algorithms", "ECDSA-P256" if quick else "RSA-2048,ECDSA-P256"],
        ["render.py", "--nodes", "1000" if quick else "5000"],
        ["install.py", "--nodes", *(["100", "1000"] if quick else ["100", "1000", "5000"])],
        ["upgrade.py", "--nodes", *(["100", "1000"] if quick else ["100", "1000", "5000"])],
        ["metrics.py", "--nodes", *(["1000"] if quick else ["5000", "10000"])],
    ]
    worst = 0
    for script, *args in runs:
        print(f"== bench/{script} {' '.join(args)}", flush=True)
        worst = max(worst, subprocess.call([sys.executable, str(HERE / script), *args]))
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
