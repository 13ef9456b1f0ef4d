"""No status word written as a string outside the enums (bke.contracts.statuses).

A status is an enum member (`RunStatus.FAILED`), never the bare string "Failed": a typo in a
string is a new status nobody handles, and a reader cannot find who sets what. This scans the
production code (libs, services, cli, agent) for string constants that are a status word; each
file outside the enum module may hold only as many as `ALLOWED` says, and each allowance says
why. An allowance that no longer matches what the file holds fails too, so the table shrinks as
files are converted.
"""
from __future__ import annotations

import ast
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCANNED = ("libs", "services", "cli", "agent")
ENUMS = "libs/bke/contracts/statuses.py"
WORDS = frozenset({
    "Running", "Succeeded", "Failed", "Pending", "Paused", "Cancelled", "RolledBack", "Waiting", "Skipped",
    "Unknown", "Completed", "Healthy", "Unhealthy",
})

# Kubernetes' own words: a pod's phase (PodStatus.phase: Pending, Running, Succeeded, Failed,
# Unknown) as the API, or the lab's kubelet stand-in, says it. Not a BKE status.
POD_PHASE = "Kubernetes' pod phase (PodStatus.phase), read from the API or played by the lab kubelet"

# file -> (how many status words it may hold as strings, why)
ALLOWED: dict[str, tuple[int, str]] = {
    "libs/bke/adapters/cluster_api/apply_k8s.py": (3, POD_PHASE),
    "libs/bke/core/drain.py": (3, POD_PHASE),
    "agent/bke_agent/backends/lab.py": (1, POD_PHASE),
    "agent/bke_agent/kubelet/standin.py": (6, POD_PHASE),
}


def _exported_names(tree: ast.AST) -> set[int]:
    """The ids of the string constants listed in `__all__`: names of the module, not values."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
                out |= {id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
    return out


def status_literals(source: str) -> list[tuple[int, str]]:
    """(line, word) of every string constant of `source` that is a status word."""
    tree = ast.parse(source)
    names = _exported_names(tree)
    return sorted((node.lineno, node.value) for node in ast.walk(tree)
                  if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in WORDS
                  and id(node) not in names)


def _production_files(root: Path) -> Iterator[Path]:
    for top in SCANNED:
        yield from sorted((root / top).rglob("*.py"))


@cache  # read once for the tests of this module
def found_literals(root: Path = ROOT) -> dict[str, list[tuple[int, str]]]:
    """Per file (relative to `root`), its status words as strings; the enum module left out."""
    found = {}
    for path in _production_files(root):
        rel = path.relative_to(root).as_posix()
        if rel != ENUMS and (hits := status_literals(path.read_text(encoding="utf-8"))):
            found[rel] = hits
    return found


def test_no_status_word_as_a_string_outside_the_enums() -> None:
    found = found_literals()
    over = {f: hits for f, hits in found.items() if len(hits) > ALLOWED.get(f, (0, ""))[0]}
    assert not over, "status words as strings; use the enum of bke.contracts.statuses:\n" + "\n".join(
        f"  {f}: {len(hits)} (allowed {ALLOWED.get(f, (0, ''))[0]}): "
        + ", ".join(f"line {line} {word!r}" for line, word in hits) for f, hits in sorted(over.items()))


def test_every_allowance_is_what_its_file_holds() -> None:
    # a converted file leaves the table (or its count goes down): the table never hides new ones
    found = found_literals()
    stale = {f: (n, len(found.get(f, []))) for f, (n, _) in ALLOWED.items() if len(found.get(f, [])) < n}
    assert not stale, "shrink ALLOWED to what these files hold (allowed, found): " + repr(stale)


def test_every_allowance_says_why() -> None:
    assert all(why.strip() for _, why in ALLOWED.values())
    assert ENUMS not in ALLOWED


def test_the_enum_module_holds_the_words() -> None:
    # the scan reads the enum module like any other: its members are what it finds there
    words = {word for _, word in status_literals((ROOT / ENUMS).read_text(encoding="utf-8"))}
    assert {"Running", "Succeeded", "Failed", "Pending", "Skipped", "RolledBack", "Healthy", "Unhealthy"} <= words


def test_the_scan_sees_comparisons_defaults_and_annotations_but_not_names_or_messages(tmp_path: Path) -> None:
    source = '''
from typing import Literal
__all__ = ["Unhealthy", "Failed"]
status: Literal["Pending", "Running"] = "Pending"
if x.status == "Failed":
    log.warning("the step Failed: %s", why)
done = {"Succeeded", "Skipped"}
'''
    assert status_literals(source) == [(4, "Pending"), (4, "Pending"), (4, "Running"), (5, "Failed"),
                                       (7, "Skipped"), (7, "Succeeded")]
    (tmp_path / "services" / "svc").mkdir(parents=True)
    (tmp_path / "services" / "svc" / "mod.py").write_text(source, encoding="utf-8")
    (tmp_path / "libs" / "bke" / "contracts").mkdir(parents=True)
    (tmp_path / ENUMS).write_text('RUNNING = "Running"\n', encoding="utf-8")
    assert list(found_literals(tmp_path)) == ["services/svc/mod.py"]
