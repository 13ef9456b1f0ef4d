"""A Dockerfile read into stages of (instruction, arguments): enough for static checks, since no
Docker engine runs on the development machines."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, instruction: str) -> list[str]:
        return [args for ins, args in self.instructions if ins == instruction]

    def last(self, instruction: str) -> str | None:
        found = self.all(instruction)
        return found[-1] if found else None


def read_stages(path: Path) -> list[Stage]:
    """Stages in order; the last is what `docker build` makes without --target."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, f"{path}: a line continues past the end of the file"
    stages: list[Stage] = []
    for line in logical:
        ins, _, args = line.partition(" ")
        ins, args = ins.upper(), args.strip()
        if ins == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        else:
            assert stages, f"{path}: {ins} before FROM"
            stages[-1].instructions.append((ins, args))
    return stages


def exec_form(args: str) -> list[str]:
    """The JSON (exec) form of ENTRYPOINT/CMD; a shell form is refused (signals would go to sh)."""
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(x, str) for x in value), args
    return value


def effective(stages: list[Stage], target: str | None = None) -> Stage:
    """The instructions that make `target` (default: the last stage), through its FROM chain,
    as one stage whose base is the image it starts from."""
    by_name = {s.name: s for s in stages if s.name}
    stage = by_name[target] if target else stages[-1]
    chain = [stage]
    while chain[-1].base in by_name:
        chain.append(by_name[chain[-1].base])
    merged = Stage(chain[-1].base, stage.name)
    for s in reversed(chain):
        merged.instructions.extend(s.instructions)
    return merged


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for pair in args.split():
            key, _, value = pair.partition("=")
            env[key] = value
    return env


# Instructions Docker runs later, in the container: a build argument is not expanded in them.
_RUN_TIME = frozenset({"ENTRYPOINT", "CMD", "HEALTHCHECK"})


def with_build_args(stage: Stage, args: dict[str, str]) -> Stage:
    """The stage as `docker build --build-arg NAME=value ...` makes it: each declared ARG's
    `$NAME`/`${NAME}` replaced by its value (or its default) wherever Docker expands it. Every
    argument given must be declared, and every one declared must end with a value."""
    declared = dict(arg.partition("=")[::2] for arg in stage.all("ARG"))
    assert set(args) <= set(declared), f"not declared by ARG: {set(args) - set(declared)}"
    values = {**declared, **args}
    assert all(values.values()), f"build arguments without a value: {[n for n, v in values.items() if not v]}"

    def expand(match: re.Match[str]) -> str:
        return values.get(match.group(1) or match.group(2), match.group(0))

    built = Stage(stage.base, stage.name)
    for ins, text in stage.instructions:
        if ins not in _RUN_TIME:
            text = re.sub(r"\$\{(\w+)\}|\$(\w+)", expand, text)
        built.instructions.append((ins, text))
    return built
