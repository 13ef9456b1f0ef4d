"""Each Kubernetes component's flags and the value type pflag parses them as, per built minor
(`{"<component>@<minor>": {flag: type}}`), read from value_types.json, which
`python -m bke.lab.flag_types` generates from the built binaries' own `--help`."""
from __future__ import annotations

import json
from importlib.resources import files

__all__ = ["VALUE_TYPES"]

VALUE_TYPES: dict[str, dict[str, str]] = json.loads(files(__package__).joinpath("value_types.json").read_text())
