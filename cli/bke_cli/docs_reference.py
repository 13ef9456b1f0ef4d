"""The generated parts of the docs site, all in one place: the CLI page (from the typer app
itself, through click's command objects, never from `--help` text), the pages the libraries
generate (bke.core.docs_reference.PAGES), and the generated blocks of hand-written pages
(`BLOCKS`: the architecture page's subject table and parts, from the adapters' tables, which
only this side may import).

    python -m bke_cli.docs_reference            write every page and block that changed
    python -m bke_cli.docs_reference --check    exit 1 naming the stale ones, write nothing

Run from the repository root (or give --root). tests/unit/docs/test_docs_reference.py fails when a
committed page or block differs from what this writes.
"""
from __future__ import annotations

import argparse
import inspect
import itertools
import sys
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from bke.adapters.state.keys.inventory import builders as key_builders
from bke.adapters.state.keys.inventory import family_modules
from bke.adapters.auth.creds import subject_matches
from bke.adapters.auth.jetstream_grants import AGENT_STREAM, SERVICE_CONSUMERS
from bke.adapters.auth.permissions import ROLES, SERVICE_ROLES, agent_consumer, identity_name, role_permissions
from bke.adapters.runtime.redis_acl import ADMIN, SERVICE_USER, USERS
from bke.adapters.state.operation_slot import KINDS
from bke.contracts.agent import agent_subject
from bke.contracts.subjects import CHANNELS
from bke.core.docs_reference import PAGES
from bke.core.docs_reference.architecture import (KeyFamily, Part, render_key_families_block, render_records_block,
                                                  render_subjects_block)
from bke.core.docs_reference.blocks import splice
from bke.core.docs_reference.markdown import cell, code, link, prose, table

from .main import app

__all__ = ["ARCHITECTURE_PAGE", "BLOCKS", "CLI_PAGE", "all_pages", "architecture_parts", "global_keys", "key_families",
           "main",
           "render_cli_page", "stale_pages"]

CLI_PAGE = "docs/reference/cli.md"
ARCHITECTURE_PAGE = "docs/concepts/architecture.md"
REGENERATE = "python -m bke_cli.docs_reference"

_INTRO = f"""\
# CLI

Every `bke` command and sub-command, with its arguments and options. Generated from the
command's own definitions (`{REGENERATE}`); `bke COMMAND --help` prints the same help from
the `bke` you run.

Exit codes, for every command: 0 success, 2 invalid input or a refused request, 1 an operational
failure. Every error line on stderr starts with `ERROR `.
"""


def _commands(command: Any, path: str) -> Iterator[tuple[str, Any]]:
    """(full name, command object) depth first, in the order the app registers them."""
    yield path, command
    for name, sub in (getattr(command, "commands", None) or {}).items():
        if not getattr(sub, "hidden", False):
            yield from _commands(sub, f"{path} {name}")


def _bound(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _type(param: Any) -> str:
    t = param.type
    kind = type(t).__name__
    if getattr(param, "is_flag", False) and kind == "BoolParamType":
        words = "flag"
    elif kind in ("IntRange", "FloatRange"):
        base = "integer" if kind == "IntRange" else "number"
        lo, hi = t.min, t.max
        if lo is not None and hi is not None:
            words = f"{base}, {_bound(lo)} to {_bound(hi)}"
        elif lo is not None:
            words = f"{base}, {'more than' if t.min_open else 'at least'} {_bound(lo)}"
        else:
            words = f"{base}, {'less than' if t.max_open else 'at most'} {_bound(hi)}"
    elif hasattr(t, "choices"):
        words = "one of " + ", ".join(code(c.value if isinstance(c, Enum) else c) for c in t.choices)
    elif kind.endswith("Path"):
        words = "file" if not t.dir_okay else "directory" if not t.file_okay else "path"
    else:
        words = {"StringParamType": "text", "IntParamType": "integer", "FloatParamType": "number",
                 "BoolParamType": "boolean"}.get(kind, str(t.name))
    if getattr(param, "multiple", False):
        words += ", repeatable"
    if param.nargs == -1:
        words += ", one or more" if param.required else ", any number"
    return words


def _default(param: Any) -> str:
    if isinstance(getattr(param, "show_default", None), str):
        return cell(param.show_default)
    value = param.default
    if param.required or value is None or callable(value) or value in ((), [], ""):
        return "-"
    if getattr(param, "is_flag", False) and isinstance(value, bool):
        if param.secondary_opts:
            return code(param.opts[-1] if value else param.secondary_opts[-1])
        return "on" if value else "off"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, float):
        value = _bound(value)
    return code(value)


def _name(param: Any) -> str:
    if param.param_type_name == "argument":
        return code(param.metavar or param.name.upper())
    names = ", ".join(code(o) for o in param.opts)
    return names + ("".join(f" / {code(o)}" for o in param.secondary_opts))


def _help(param: Any) -> str:
    text = getattr(param, "help", None) or ""
    envvar = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or ())
    if envvar:
        text = f"{text} (environment: `{envvar}`)".strip()
    return cell(text)


def _usage(path: str, command: Any) -> str:
    if hasattr(command, "commands"):
        return f"{path} COMMAND [ARGS]..."
    words = [path]
    if any(p.param_type_name == "option" and not p.hidden for p in command.params):
        words.append("[OPTIONS]")
    for p in command.params:
        if p.param_type_name != "argument":
            continue
        name = (p.metavar or p.name.upper()) + ("..." if p.nargs == -1 else "")
        words.append(name if p.required or name.startswith("[") else f"[{name}]")
    return " ".join(words)


def _help_text(command: Any) -> str:
    text = (command.help or "").split("\f", 1)[0].replace("\b\n", "")
    return prose(text)


def _section(path: str, command: Any) -> str:
    lines = [f"## {path}", ""]
    if _help_text(command):
        lines += [_help_text(command), ""]
    lines += [f"Usage: {code(_usage(path, command))}", ""]
    params = [p for p in command.params if not getattr(p, "hidden", False)]
    if params:
        rows = [[_name(p), _type(p), _default(p), "yes" if p.required else "", _help(p)] for p in params]
        lines += [table(["argument or option", "type", "default", "required", "help"], rows), ""]
    subs = [(name, sub) for name, sub in (getattr(command, "commands", None) or {}).items() if not getattr(sub, "hidden", False)]
    if subs:
        rows = [[link(code(f"{path} {name}"), f"{path} {name}"), cell(sub.get_short_help_str(limit=200))] for name, sub in subs]
        lines += [table(["command", "what it does"], rows), ""]
    return "\n".join(lines)


def render_cli_page() -> str:
    root = typer.main.get_command(app)
    return "\n".join([_INTRO, *(_section(path, command) for path, command in _commands(root, "bke"))])


def architecture_parts() -> tuple[Part, ...]:
    """The five services, the agent, the CLI, the agents' renewer and the dashboards, from the permission and ACL
    tables: bus identity, Redis user and its write patterns, durable consumers; the dashboards'
    subjects are what their identity is allowed (they are no component of CHANNELS)."""
    acl = {u.name: u for u in USERS}
    services = [Part(name, identity_name(name), component=name, redis_user=SERVICE_USER[name],
                     writes=acl[SERVICE_USER[name]].writes,
                     consumers=tuple((c.stream, c.durable, c.filter) for c in SERVICE_CONSUMERS[name]))
                for name in SERVICE_ROLES]
    agent = Part("agent", identity_name("agent", "{cluster}", "{node}"), ROLES["agent"].summary, component="agent",
                 consumers=((AGENT_STREAM, agent_consumer("{cluster}", "{node}"),
                             agent_subject("{cluster}", "{node}", "command")),))
    cli = Part("CLI", identity_name("operator"), ROLES["operator"].summary, component=ROLES["operator"].component,
               redis_user=ADMIN, redis_why=acl[ADMIN].why, writes=acl[ADMIN].writes)
    renewer = Part("renewer", identity_name("renewer"), ROLES["renewer"].summary, component=ROLES["renewer"].component,
                   redis_user=ADMIN, redis_why=acl[ADMIN].why, writes=acl[ADMIN].writes)
    dashboard = role_permissions("dashboard")

    def allowed(patterns: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(ch.subject for ch in CHANNELS
                     if any(subject_matches(p, ch.subject.replace("{", "").replace("}", "")) for p in patterns))

    dashboards = Part("dashboards", identity_name("dashboard"), ROLES["dashboard"].summary,
                      may_send=allowed(dashboard.pub_allow), may_hear=allowed(dashboard.sub_allow))
    return (*services, agent, cli, renewer, dashboards)


def global_keys() -> tuple[str, ...]:
    """Every Redis key the families of bke.adapters.state.keys name outside any cluster: their
    builders of no argument."""
    makers = key_builders().values()
    return tuple(sorted(k for f in makers if not inspect.signature(f).parameters and "*" not in (k := f())))


# a key builder's argument -> what the page shows for it: a placeholder, or every value it takes
_KEY_ARGS: dict[str, tuple[str, ...]] = {
    "cluster": ("<c>",), "slug": ("<slug>",), "part": ("<part>",), "request_id": ("<id>",),
    "owner": ("dispatcher", "upgrade"), "source": ("certs", "render"), "writer": ("plan", "render"),
}


def key_families() -> tuple[KeyFamily, ...]:
    """Every module of bke.adapters.state.keys, with its docstring's first paragraph and its keys."""
    return tuple(KeyFamily(name, module.__name__, (module.__doc__ or "").strip().split("\n\n")[0], _family_keys(module))
                 for name, module in family_modules().items())


def _family_keys(module: Any) -> tuple[str, ...]:
    """The keys a family's builders name (not the building block, nor the all-keys pattern)."""
    keys = set()
    for name in module.__all__:
        fn = getattr(module, name)
        params = list(inspect.signature(fn).parameters.values()) if inspect.isfunction(fn) else None
        if params is None or any(p.kind is p.VAR_POSITIONAL for p in params):
            continue
        keys |= {fn(*args) for args in itertools.product(*(_KEY_ARGS[p.name] for p in params))}
    return tuple(sorted(k for k in keys if "*" not in k))


# (page, block name) -> the block's body, between `<!-- NAME:start -->` and `<!-- NAME:end -->`
BLOCKS: dict[tuple[str, str], Callable[[], str]] = {
    (ARCHITECTURE_PAGE, "subjects"): lambda: render_subjects_block(architecture_parts()),
    (ARCHITECTURE_PAGE, "records"): lambda: render_records_block(architecture_parts(), KINDS, global_keys()),
    (ARCHITECTURE_PAGE, "key-families"): lambda: render_key_families_block(key_families()),
}


def all_pages() -> dict[str, Callable[[], str]]:
    """Every generated file, by its path from the repository root."""
    return {CLI_PAGE: render_cli_page, **PAGES}


def _block_name(rel: str, name: str) -> str:
    return f"{rel} (block {name})"


def _spliced(root: Path, rel: str, name: str, make: Callable[[], str]) -> tuple[str, str]:
    """The page's text and what it becomes with the block regenerated; ValueError for a page
    that is missing or lacks the block's markers (the generator never adds a block)."""
    path = root / rel
    if not path.is_file():
        raise ValueError(f"{rel}: no such page; its block {name} is generated into it")
    text = path.read_text(encoding="utf-8")
    return text, splice(text, name, make())


def stale_pages(root: Path) -> list[str]:
    """The generated files and blocks under `root` that differ from what the code generates now."""
    stale = []
    for rel, make in all_pages().items():
        path = root / rel
        if not path.is_file() or path.read_text(encoding="utf-8") != make():
            stale.append(rel)
    for (rel, name), make_block in BLOCKS.items():
        try:
            text, fresh = _spliced(root, rel, name, make_block)
        except ValueError:  # no page or no markers: stale until a writer puts them back
            text, fresh = "", None
        if fresh != text:
            stale.append(_block_name(rel, name))
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bke_cli.docs_reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale files")
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the repository root (default: here)")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(args.root)
        for rel in stale:
            sys.stderr.write(f"ERROR {rel} is stale; regenerate: {REGENERATE}\n")
        return 1 if stale else 0
    for rel, make in all_pages().items():
        path = args.root / rel
        text = make()
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            sys.stdout.write(f"wrote {rel}\n")
    status = 0
    for (rel, name), make_block in BLOCKS.items():
        try:
            text, fresh = _spliced(args.root, rel, name, make_block)
        except ValueError as exc:
            sys.stderr.write(f"ERROR {exc}\n")
            status = 1
            continue
        if fresh != text:
            (args.root / rel).write_text(fresh, encoding="utf-8")
            sys.stdout.write(f"wrote {_block_name(rel, name)}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
