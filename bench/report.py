#!/usr/bin/env python3
"""docs/benchmarks.md, generated from each bench's latest result record (bench/results/*.json,
written by a bench's `--json PATH`, see bench/record.py) and from the benches' own docstrings.

    .venv/bin/python bench/report.py            # rewrite docs/benchmarks.md
    .venv/bin/python bench/report.py --check    # exit 1 if docs/benchmarks.md differs

Per bench: what it measures (its docstring's summary and first description), the command to run
it (its docstring's usage lines), where, when and on what the figures were recorded, and the
figures. `tests/unit/docs/test_benchmarks_page.py` fails when the committed page drifts. Only the
standard library is used, and no bench is imported (their docstrings are read with `ast`).
"""
from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BENCHES", "PAGE", "RESULTS", "Bench", "load_records", "render_page", "render_section"]

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
PAGE = HERE.parent / "docs" / "benchmarks.md"
REGENERATE = ".venv/bin/python bench/report.py"
WIDTH = 100


@dataclass(frozen=True)
class Bench:
    """One bench on the page: its record's name, its title, the script whose docstring says what it
    measures, and how the heading names the command."""

    name: str
    title: str
    script: str
    command: str


BENCHES: tuple[Bench, ...] = (
    Bench("install", "Install", "install.py", "bench/install.py"),
    Bench("install-real", "Install against a real control plane", "real_cp.py", "bench/install.py --control-plane real"),
    Bench("upgrade", "Upgrade", "upgrade.py", "bench/upgrade.py"),
    Bench("upgrade-real", "Upgrade against a real control plane", "real_upgrade.py", "bench/upgrade.py --control-plane real"),
    Bench("faults", "Install under faults", "faults.py", "bench/faults.py"),
    Bench("soak", "Soak", "soak.py", "bench/soak.py"),
    Bench("certs", "Certificates", "certs.py", "bench/certs.py"),
    Bench("render", "Rendering", "render.py", "bench/render.py"),
    Bench("diff", "A changed spec's dry run", "diff.py", "bench/diff.py"),
    Bench("membership", "Joining workers", "membership.py", "bench/membership.py"),
    Bench("metrics", "A scrape of /metrics", "metrics.py", "bench/metrics.py"),
    Bench("identities", "Bus identities", "identities.py", "bench/identities.py"),
    Bench("command_cpu", "CPU per upgrade command", "command_cpu.py", "bench/command_cpu.py"),
    Bench("command_binding", "Commands bound to their agent", "command_binding.py", "bench/command_binding.py"),
    Bench("host_actions", "Host action checks", "host_actions.py", "bench/host_actions.py"),
    Bench("redis_server", "The embedded Redis server", "redis_server.py", "bench/redis_server.py"),
    Bench("record_signatures", "Signed plans and rendered files", "record_signatures.py", "bench/record_signatures.py"),
)

_SCRIPT_NOTE = re.compile(r"\s*A script(, not\s+a\s+test)?\.\s*$")


def _docstring(script: str) -> str:
    doc = ast.get_docstring(ast.parse((HERE / script).read_text()))
    if not doc:
        raise ValueError(f"bench/{script} has no docstring")
    return doc


def _paragraph(text: str) -> str:
    return textwrap.fill(" ".join(text.split()), WIDTH, break_on_hyphens=False, break_long_words=False)


def describe(script: str) -> tuple[str, list[str]]:
    """(what the bench measures, as Markdown; its usage lines) from its docstring: the summary,
    then the first paragraph after the usage lines, and the list it introduces if it ends in ':'."""
    paragraphs = _docstring(script).split("\n\n")
    usage = [line.strip() for p in paragraphs for line in p.splitlines() if line.startswith("    .venv/bin/python")]
    summary = _SCRIPT_NOTE.sub("", " ".join(paragraphs[0].split()))
    body = [p for p in paragraphs[1:] if not p.startswith("    ")]
    text = summary
    if body and not body[0].lstrip().startswith("*"):
        text += " " + body[0]
        if body[0].rstrip().endswith(":") and len(body) > 1 and body[1].lstrip().startswith("*"):
            items = re.split(r"\n(?=\* )", body[1].strip())
            listed = [textwrap.fill(" ".join(i[2:].split()), WIDTH, initial_indent="- ", subsequent_indent="  ",
                                    break_on_hyphens=False, break_long_words=False) for i in items]
            return _paragraph(text) + "\n\n" + "\n".join(listed), usage
    return _paragraph(text), usage


def load_records(results: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """Each bench's record, by name; a record of no listed bench is an error."""
    records = {}
    known = {b.name for b in BENCHES}
    for path in sorted(results.glob("*.json")):
        record = json.loads(path.read_text())
        if record.get("bench") not in known or path.stem != record["bench"]:
            raise ValueError(f"{path}: bench {record.get('bench')!r} is not one of bench/report.py's BENCHES "
                             "or not the file's name")
        records[record["bench"]] = record
    return records


def _cell(value: Any) -> str:
    text = "-" if value is None or value == "" else " ".join(str(value).split())
    return text.replace("|", "\\|")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _machine(m: dict[str, Any] | None) -> str:
    m = m or {}
    parts = []
    if m.get("cores"):
        parts.append(f"{m['cores']} cores")
    if m.get("memory_gib"):
        parts.append(f"{m['memory_gib']:g} GiB")
    if m.get("python"):
        parts.append(f"Python {m['python']}")
    if m.get("platform"):
        parts.append(str(m["platform"]))
    return ", ".join(parts) if parts else "not recorded"


def render_section(bench: Bench, record: dict[str, Any] | None) -> str:
    """One bench's section of the page."""
    what, usage = describe(bench.script)
    out = [f"## {bench.title} (`{bench.command}`)", "", what, ""]
    if usage:
        out += ["```sh", *usage, "```", ""]
    if record is None:
        out += [f"Nothing recorded yet: run it with `--json bench/results/{bench.name}.json`, then `{REGENERATE}`.", ""]
        return "\n".join(out)
    facts = [["command", f"`{record.get('command')}`"], ["date", record.get("date") or "not recorded"],
             ["commit", f"`{record['commit']}`" if record.get("commit") else "not recorded"],
             ["machine", _machine(record.get("machine"))]]
    if record.get("recorded_from"):
        facts.append(["recorded from", record["recorded_from"]])
    if record.get("conditions"):
        facts.append(["conditions", record["conditions"]])
    rows = record.get("rows") or []
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    out += ["Recorded:", "", _table(["", ""], facts), ""]
    if rows:
        out += ["Figures:", "", _table(columns, [[row.get(c) for c in columns] for row in rows]), ""]
    else:
        out += ["The record holds no figures.", ""]
    return "\n".join(out)


def _all_runs() -> tuple[list[list[str]], list[list[str]]]:
    """bench/all.py's runs, full and `--quick` (the file is loaded, not run)."""
    spec = importlib.util.spec_from_file_location("bench_all", HERE / "all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.runs(False), module.runs(True)


def _every_bench() -> str:
    full, quick = _all_runs()
    in_all = {Path(r[0]).stem for r in full}
    others = [b for b in BENCHES if Path(b.script).stem not in in_all and "--control-plane" not in b.command]
    real = [b.command for b in BENCHES if "--control-plane" in b.command]
    lines = ["## The main benchmarks in one command", "",
             _paragraph(f"`python3 dev.py bench` runs `bench/all.py`, which runs {len(full)} of the benches one "
                        "after another and exits with the worst exit code:"), "",
             "```sh", *[f".venv/bin/python bench/{' '.join(r)}" for r in full], "```", "",
             _paragraph("`python3 dev.py bench --quick` runs the same at smaller sizes ("
                        + "; ".join(f"`{' '.join(r)}`" for r in quick) + "). `python3 dev.py bench --json "
                        "bench/results` has each write its record to `bench/results/<name>.json`. "
                        "The others run on their own: " + ", ".join(f"`{b.command}`" for b in others)
                        + ", " + " and ".join(f"`{c}`" for c in real) + "."), ""]
    return "\n".join(lines)


def render_page(results: Path = RESULTS) -> str:
    """The whole of docs/benchmarks.md."""
    records = load_records(results)
    head = [
        "# Benchmarks", "",
        f"<!-- Generated by bench/report.py from bench/results/*.json and the benches' docstrings; "
        f"do not edit. Regenerate: {REGENERATE} -->", "",
        _paragraph("The scripts in `bench/` measure BKE at the sizes it is built for: install, upgrade, faults "
                   "and soak runs against real NATS, Redis and service processes with a fleet of in-process "
                   "agents, and the costs of single code paths without the bus. They are scripts, not tests: "
                   "run them on demand, on a machine as quiet as you can find. Most figures below come from a "
                   "shared 2-core machine, where wall times move by tens of percent from run to run; ratios "
                   "against a floor measured in the same run, and CPU seconds, are the steadier figures."), "",
        _paragraph("Each bench takes `--json PATH` and writes there a record of its run: the bench, the exact "
                   "command, the date, the machine (cores, memory, Python, platform), the commit (`+dirty` "
                   "with local changes) and the figures as it printed them. `bench/results/` holds the latest "
                   "record of each bench, and this page is generated from those records. Figures copied from "
                   "an earlier write-up name it under \"recorded from\"; what it did not note is \"not "
                   "recorded\"."), "",
        "```sh",
        ".venv/bin/python bench/upgrade.py --nodes 5000 --json bench/results/upgrade.json",
        f"{REGENERATE}    # rewrites docs/benchmarks.md",
        "```", "",
        _every_bench(),
    ]
    sections = [render_section(b, records.get(b.name)) for b in BENCHES]
    return "\n".join(head) + "\n" + "\n".join(sections).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if docs/benchmarks.md differs from the records")
    args = ap.parse_args(argv)
    page = render_page()
    if args.check:
        if PAGE.read_text() != page:
            print(f"docs/benchmarks.md is out of date: run {REGENERATE}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
