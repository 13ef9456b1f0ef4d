"""The `bke` command. Each subcommand lives in its own module; this file only wires them.

Exit codes for every command: 0 success, 2 invalid input or refused request, 1 operational
failure. Every error line on stderr starts with `ERROR `.
"""
from __future__ import annotations

import logging
import sys

import typer

from . import plan_cmd

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, help="BKE: install and upgrade large Kubernetes clusters.")


@app.callback()
def _root() -> None:
    """BKE: install and upgrade large Kubernetes clusters."""


app.command("plan")(plan_cmd.plan)


def _register_optional() -> None:
    """Command groups owned by other modules; each registers itself on `app`."""
    import importlib

    for name in ("certs_cmd", "render_cmd", "versions_cmd", "lab_cmd", "status_cmd", "agent_cmd"):
        try:
            mod = importlib.import_module(f"bke_cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"bke_cli.{name}":
                raise
            continue
        mod.register(app)


_register_optional()


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app(args=argv, prog_name="bke", standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        if isinstance(code, int):
            # click reports usage errors with 2 already; keep ours as they are.
            return code
        return 0 if code is None else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
