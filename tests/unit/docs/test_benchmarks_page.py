"""docs/benchmarks.md is generated from bench/results/*.json: fail when it drifts, and show that a
record written by a bench's `--json` is one the page can render (no bench is run here)."""
from __future__ import annotations

import importlib.util
import json
import sys
from datetime import date
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass needs its module registered
    spec.loader.exec_module(module)
    return module


def test_docs_benchmarks_md_matches_the_results() -> None:
    report = _load("report")
    assert (ROOT / "docs" / "benchmarks.md").read_text() == report.render_page(), (
        "docs/benchmarks.md drifted from bench/results/*.json or the benches' docstrings; "
        "regenerate it with `.venv/bin/python bench/report.py`")


def test_every_bench_script_has_a_section() -> None:
    report = _load("report")
    helpers = {"all.py", "record.py", "report.py", "real_cp.py", "upgrade_events.py", "install_trace.py"}
    scripts = {p.name for p in BENCH.glob("*.py")} - helpers
    assert scripts <= {b.script for b in report.BENCHES}, "a bench script bench/report.py does not list"
    for bench in report.BENCHES:
        what, usage = report.describe(bench.script)
        assert what and usage, f"bench/{bench.script}: no summary or usage line in its docstring"


def test_a_json_record_renders_on_the_page(tmp_path: Path) -> None:
    record, report = _load("record"), _load("report")
    rows = [{"N": "1,000", "place": "0.71 s", "render both + compare": "2.10 s", "decide": "0.050 s"},
            {"N": "5,000", "place": "3.80 s", "render both + compare": "11.40 s", "decide": "0.250 s"}]
    path = tmp_path / "results" / "diff.json"
    argv = [str(ROOT / ".venv" / "bin" / "python"), str(BENCH / "diff.py"), "--nodes", "1000", "5000", "--json", str(path)]
    written = record.save(path, "diff", rows, argv=argv, today=date(2030, 1, 2))
    assert json.loads(path.read_text()) == written
    assert written["bench"] == "diff" and written["date"] == "2030-01-02" and written["rows"] == rows
    assert written["command"].startswith(".venv/bin/python bench/diff.py --nodes 1000 5000 --json ")
    assert set(written["machine"]) == {"cores", "memory_gib", "python", "platform"}
    assert record.save(None, "diff", rows) is None  # without --json nothing is written

    section = report.render_section(next(b for b in report.BENCHES if b.name == "diff"), written)
    assert "| N | place | render both + compare | decide |" in section
    assert "| 5,000 | 3.80 s | 11.40 s | 0.250 s |" in section
    assert "| date | 2030-01-02 |" in section
    page = report.render_page(tmp_path / "results")
    assert section in page and page.count("Nothing recorded yet") == len(report.BENCHES) - 1
