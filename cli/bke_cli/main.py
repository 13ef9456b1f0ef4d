"""The `bke` command. Each subcommand lives in its own module; this file only wires them.

Exit codes for every command: 0 success, 2 invalid input or refused request, 1 operational
failure. Every error line on stderr starts with `ERROR `.
"""
from __future__ import annotations

import logging
import sys

import typer

from bke.adapters.bus.streams import StreamsNotDeclared

from . import (agent_cmd, bundle_cmd, certs_cmd, deadletters_cmd, etcd_cmd, identities_cmd, keys_cmd, lab_cmd,
               membership_cmd, pause_cmd, plan_cmd, render_cmd, reset_cmd, spec_cmd, state_cmd, status_cmd, streams_cmd,
               upgrade_cmd, versions_cmd)

__all__ = ["app", "main"]

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)


@app.callback()
def _root() -> None:
    """BKE: install and upgrade large Kubernetes clusters."""


app.command("plan")(plan_cmd.plan)
for _module in (versions_cmd, certs_cmd, render_cmd, status_cmd, lab_cmd, agent_cmd, identities_cmd, state_cmd,
                keys_cmd, bundle_cmd, upgrade_cmd, etcd_cmd, pause_cmd, reset_cmd, membership_cmd, streams_cmd, spec_cmd,
                deadletters_cmd):
    _module.register(app)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app(args=argv, prog_name="bke", standalone_mode=True)
    except StreamsNotDeclared as exc:  # any command that publishes, before the deploy step ran
        print(f"ERROR {exc}", file=sys.stderr)  # noqa: T201 - the CLI's own error line
        return 1
    except SystemExit as exc:
        code = exc.code
        if isinstance(code, int):
            return code
        return 0 if code is None else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
