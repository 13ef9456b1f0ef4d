"""`bke spec schema`: the JSON Schema of a spec document, for editors and CI linters.

Generated from the spec models (bke.core.spec.json_schema), so it closes every object the loader
closes; docs/reference/bke-spec.schema.json is the committed copy and docs/reference/spec.md says
how to point an editor at it.
"""
from __future__ import annotations

import sys

import typer

from bke.core.spec.json_schema import render_spec_schema

__all__ = ["register", "schema", "spec_app"]

spec_app = typer.Typer(no_args_is_help=True, add_completion=False, help="The cluster spec's format.")


def register(app: typer.Typer) -> None:
    app.add_typer(spec_app, name="spec")


@spec_app.command("schema")
def schema() -> None:
    """Print the JSON Schema (draft 2020-12) of one spec document.

    A document is the BKECluster or a BKENode, told apart by `kind`; a misspelled field at any
    level is an error, as it is to the loader."""
    sys.stdout.write(render_spec_schema())
