"""A benchmark's result record: what a bench's `--json PATH` writes and bench/report.py renders.

    {"bench": "diff", "command": ".venv/bin/python bench/diff.py --nodes 5000", "date": "YYYY-MM-DD",
     "machine": {"cores": 2, "memory_gib": 23.4, "python": "3.11.9", "platform": "Linux-..."},
     "commit": "1a2b3c4", "rows": [{"N": "5,000", "place": "3.80 s", ...}, ...]}

`rows` hold the figures as the bench printed them (strings, one dict per printed row, its keys
the column names), so a record says what the run said and nothing more. The file at PATH is
replaced: `bench/results/<bench>.json` holds the latest record of each bench, and
`docs/benchmarks.md` is generated from those (`.venv/bin/python bench/report.py`).
Only the standard library is used: the report and the tests load this file on its own.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
from datetime import date
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "add_json_option", "command_line", "commit", "machine", "make_record", "save"]

ROOT = Path(__file__).resolve().parents[1]


def add_json_option(ap: argparse.ArgumentParser) -> None:
    """The `--json PATH` option every bench takes."""
    ap.add_argument("--json", type=Path, default=None, metavar="PATH",
                    help="also write the figures as a result record to PATH (e.g. bench/results/NAME.json)")


def machine() -> dict[str, Any]:
    """Cores, memory (GiB), Python and platform of this machine."""
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {"cores": os.cpu_count(), "memory_gib": memory, "python": platform.python_version(),
            "platform": platform.platform()}


def commit(root: Path = ROOT) -> str | None:
    """The checkout's short commit, `+dirty` when it has changes; None outside a git checkout."""
    try:
        sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, check=False, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=False, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (sha + ("+dirty" if dirty else "")) or None


def command_line(argv: list[str] | None = None) -> str:
    """The command as run (the interpreter included); paths inside the repository are given
    relative to it, as when run from its root."""
    words = list(argv if argv is not None else getattr(sys, "orig_argv", [sys.executable, *sys.argv]))
    out = []
    for w in words:
        p = Path(w)
        if p.is_absolute() and p.is_relative_to(ROOT):
            w = str(p.relative_to(ROOT))
        out.append(w)
    return shlex.join(out)


def make_record(bench: str, rows: list[dict[str, str]], *, argv: list[str] | None = None,
                today: date | None = None) -> dict[str, Any]:
    """The record of one run of `bench` that printed `rows`."""
    return {"bench": bench, "command": command_line(argv), "date": (today or date.today()).isoformat(),
            "machine": machine(), "commit": commit(), "rows": [{k: str(v) for k, v in r.items()} for r in rows]}


def save(path: Path | None, bench: str, rows: list[dict[str, str]], *, argv: list[str] | None = None,
         today: date | None = None) -> dict[str, Any] | None:
    """With `--json PATH`: write the record to PATH (replacing it) and return it; else nothing."""
    if path is None:
        return None
    record = make_record(bench, rows, argv=argv, today=today)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return record
