"""Generate `docs/status.schema.json`, the JSON schema of the status reply, from the model.

`python -m bke.contracts.status_schema > docs/status.schema.json` regenerates the committed
file; a contract test fails when the two differ.
"""
from __future__ import annotations

import json
import sys

from .status import ClusterStatus

__all__ = ["render_status_schema"]


def render_status_schema() -> str:
    """The schema of `ClusterStatus` on the wire (camelCase), for clients in any language."""
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **ClusterStatus.model_json_schema(by_alias=True)}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render_status_schema())
