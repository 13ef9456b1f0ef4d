"""The `bke` command. Each subcommand lives in its own module; this file only wires them.

Exit codes for every command: 0 success, 2 invalid input or refused request, 1 operational
failure. Every error line on stderr starts with `ERROR `.
"""
from __future__ import annotations

import logging
import sys

import typer

from . import lab_cmd, plan_cmd, status_cmd

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _root() -> None:
    """BKE: install and upgrade large Kubernetes clusters."""


app.command("plan")(plan_cmd.plan)
for _module in (status_cmd, lab_cmd):
    _module.register(app)


def _register_others() -> None:
    # Command groups written alongside (certs, render, versions, agent); each has register(app).
    import importlib

    for name in ("certs_cmd", "render_cmd", "versions_cmd", "agent_cmd"):
        try:
            mod = importlib.import_module(f"bke_cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bke_cli.{name}":
                raise
            continue
        mod.register(app)


_register_others()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app(args=argv, prog_name="bke", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if isinstance(code, int):
            return code
        return 0 if code is None else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
