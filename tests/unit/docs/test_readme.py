"""The README stays a front page: short, the two commands first, every link alive, and the test
command it gives is the one CI runs."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_front_page_not_a_manual() -> None:
    assert len(README.splitlines()) <= 300


def test_the_two_commands_come_first() -> None:
    first_heading = re.search(r"^## (.+)$", README, re.M)
    assert first_heading and first_heading.group(1) == "Two commands"
    block = README.split("## Two commands", 1)[1].split("```sh", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert commands == ["python3 dev.py lab", "python3 dev.py test"]


def test_ci_runs_the_readmes_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert any(line.strip().endswith("python3 dev.py test") and not line.lstrip().startswith("#") for line in ci)


def test_every_relative_link_names_a_file_that_exists() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    assert links, "the README links to the docs"
    missing = [link for link in links if "://" not in link and not (ROOT / link).exists()]
    assert missing == []


def test_no_history_in_the_readme() -> None:
    assert not re.search(r"\bissue [0-9]+|\bstop [0-9]+", README, re.I)
