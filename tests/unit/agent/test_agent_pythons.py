"""The Pythons bke-agent claims (bke.core.pythons.AGENT_PYTHONS) are honest: its code and everything
it imports from bke need no newer Python (vermin), its pinned dependencies admit each of them
(their Requires-Python), and both the agent and the bootstrap's check refuse any other Python
with a message naming the version and the supported set."""
from __future__ import annotations

import importlib.metadata as md
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet

from bke.core.pythons import AGENT_PYTHONS, OS_PYTHONS, check_python_source, python_problem, supported_text
from bke_agent import main as agent_main

ROOT = Path(__file__).resolve().parents[3]
_LIST_AGENT_FILES = """
import importlib, pkgutil, sys
import bke_agent, bke_agent.main
for m in pkgutil.walk_packages(bke_agent.__path__, "bke_agent."):
    importlib.import_module(m.name)
for n, m in sorted(sys.modules.items()):
    if n.split(".")[0] in ("bke", "bke_agent") and getattr(m, "__file__", None):
        print(m.__file__)
"""


def test_the_agents_code_needs_no_newer_python_than_the_oldest_claimed():
    files = subprocess.run([sys.executable, "-c", _LIST_AGENT_FILES], capture_output=True, text=True,
                           check=True).stdout.split()
    assert len(files) > 30 and any(f.endswith("bke/core/pythons.py") for f in files)
    oldest = "%d.%d" % AGENT_PYTHONS[0]
    run = subprocess.run([str(Path(sys.executable).parent / "vermin"), "--no-tips", "--eval-annotations", "--violations",
                          f"-t={oldest}-", *files], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]


def test_pinned_dependencies_admit_every_claimed_python():
    pins = [ln.split("#")[0].strip() for ln in (ROOT / "requirements-agent.txt").read_text().splitlines()]
    for pin in filter(None, pins):
        name = re.split(r"[\[=]", pin)[0]
        requires = md.distribution(name).metadata.get("Requires-Python") or ""
        for major, minor in AGENT_PYTHONS:
            assert f"{major}.{minor}.5" in SpecifierSet(requires), f"{name} ({requires}) refuses {major}.{minor}"
    # and the wheel itself says so
    project = (ROOT / "pyproject.toml").read_text()
    requires = SpecifierSet(re.search(r'^requires-python = "([^"]+)"', project, re.M)[1])
    assert all(f"{a}.{b}.0" in requires for a, b in AGENT_PYTHONS)
    assert "3.10.12" not in requires


@pytest.mark.parametrize("version", [(3, 7, 3), (3, 9, 18), (3, 10, 12), (3, 15, 0)])
def test_the_bootstraps_check_refuses_other_pythons_by_name(version):
    # the one-liner runs on the node's (maybe old) interpreter; here sys.version_info is replaced
    code = f"import sys; sys.version_info = {version!r}; exec({check_python_source()!r})"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert f"this node has Python {version[0]}.{version[1]}" in run.stderr and supported_text() in run.stderr


def test_the_bootstraps_check_passes_here():
    assert subprocess.run([sys.executable, "-c", check_python_source()]).returncode == 0


def test_the_agent_refuses_an_unsupported_python(monkeypatch, capsys):
    monkeypatch.setattr(agent_main.sys, "version_info", (3, 10, 12, "final", 0))
    assert agent_main.main(["init"]) == 2
    err = capsys.readouterr().err
    assert "Python 3.10" in err and "3.11, 3.12, 3.13 or 3.14" in err
    assert python_problem((3, 12, 1)) is None


def test_every_listed_os_says_what_to_do():
    for row in OS_PYTHONS:
        supported = tuple(int(x) for x in row.default.split(".")) in AGENT_PYTHONS
        assert supported == row.remedy.startswith("the default"), row
