"""Is a flag's value one its component would take? Judged by the flag's value type, as the
component's own `--help` prints it (pflag's type names; the table is value_types.py, generated
from the built binaries by bke.lab.flag_types).

Why at plan time: an extraArgs value is rendered into a static pod's command or a kubelet unit as
one argument. `max-pods: "110 --anonymous-auth=true"` is then the single argument
`--max-pods=110 --anonymous-auth=true`, which the kubelet refuses at start, on every node at once.
The classes below parse as pflag does (Go's strconv, time.ParseDuration, net.ParseIP,
resource.ParseQuantity); a type not named here (`string`, a path, a named certificate) is not
checked.
"""
from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable

from bke.core.versions import Version

__all__ = ["VALUE_CLASSES", "value_problem", "value_type"]

_INT = re.compile(r"^[+-]?(?:0[xX][0-9a-fA-F_]+|0[oO]?[0-7_]+|0[bB][01_]+|[0-9][0-9_]*)$")
_UINT = re.compile(r"^(?:0[xX][0-9a-fA-F_]+|0[oO]?[0-7_]+|0[bB][01_]+|[0-9][0-9_]*)$")
_FLOAT = re.compile(r"^[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[iI]nf(?:inity)?|NaN)$")
# time.ParseDuration: a sequence of decimal numbers with a unit each, or 0
_DURATION = re.compile(r"^[+-]?(?:0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+)$")
# resource.Quantity: a signed number, then a binary (Ki..Ei), decimal (n,u,m,k,M,G,T,P,E) or exponent suffix
_QUANTITY = re.compile(r"^[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
_GO_BOOL = {"1", "t", "T", "TRUE", "true", "True", "0", "f", "F", "FALSE", "false", "False"}
_PORT_RANGE = re.compile(r"^[0-9]+(?:[-+][0-9]+)?$")


def _pairs(value: str, colon_prefix: bool = False) -> str | None:
    for item in (i.strip() for i in value.split(",")):
        if not item:
            continue
        if colon_prefix and ":" in item.split("=", 1)[0]:
            item = item.split(":", 1)[1]
        # `<` too: the kubelet's eviction thresholds are maps written `memory.available<100Mi`
        # (its help still says mapStringString), and a check must never refuse what the binary takes
        key = re.split(r"[=<]", item, maxsplit=1)[0].strip()
        if not re.search(r"[=<]", item) or not key:
            return f"item {item!r} is not a key=value pair"
    return None


def _ip(value: str) -> str | None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return "not an IP address"
    return None


def _each(check: re.Pattern[str], what: str) -> "functools.partial[str | None]":
    return functools.partial(_each_of, check, what)


def _each_of(check: re.Pattern[str], what: str, value: str) -> str | None:
    bad = [v for v in value.split(",") if not check.match(v.strip())]
    return f"{bad[0]!r} is not {what}" if bad else None


def _match(check: re.Pattern[str], what: str) -> "functools.partial[str | None]":
    return functools.partial(_match_of, check, what)


def _match_of(check: re.Pattern[str], what: str, value: str) -> str | None:
    return None if check.match(value) else f"not {what}"


# pflag type name -> (class shown to the user, check returning why not or None)
VALUE_CLASSES: dict[str, tuple[str, Callable[[str], str | None]]] = {
    "bool": ("bool", lambda v: None if v in _GO_BOOL else "not a boolean (true or false)"),
    "int": ("int", _match(_INT, "an integer")),
    "int32": ("int", _match(_INT, "an integer")),
    "int64": ("int", _match(_INT, "an integer")),
    "uint": ("int", _match(_UINT, "a non-negative integer")),
    "uint32": ("int", _match(_UINT, "a non-negative integer")),
    "uint64": ("int", _match(_UINT, "a non-negative integer")),
    "float": ("float", _match(_FLOAT, "a number")),
    "float32": ("float", _match(_FLOAT, "a number")),
    "float64": ("float", _match(_FLOAT, "a number")),
    "duration": ("duration", _match(_DURATION, "a duration (e.g. 30s, 5m, 1h30m)")),
    "quantity": ("quantity", _match(_QUANTITY, "a quantity (e.g. 100Mi, 2, 500m)")),
    "ip": ("ip", _ip),
    "int32Slice": ("list", _each(_INT, "an integer")),
    "mapStringString": ("map", _pairs),
    "stringToString": ("map", _pairs),
    "mapStringBool": ("map", _pairs),
    "colonSeparatedMultimapStringString": ("map", functools.partial(_pairs, colon_prefix=True)),
    "portRange": ("range", _match(_PORT_RANGE, "a port range (e.g. 30000-32767)")),
}


@functools.lru_cache(maxsize=8192)  # asked per flag and spec layer: a 10,000-node spec's node layers
def value_type(component: str, flag: str, version: Version) -> str | None:
    """The pflag type of `--flag` of `component` (a family name) at `version`: the table of the
    same minor, else of the nearest built minor (types rarely change between minors); None when
    the table does not know the flag (etcd has no typed help: not checked)."""
    from .value_types import VALUE_TYPES

    minors = sorted(int(k.split("@")[1].split(".")[1]) for k in VALUE_TYPES if k.startswith(component + "@"))
    if not minors:
        return None
    nearest = min(minors, key=lambda m: (abs(m - version.minor), -m))
    return VALUE_TYPES[f"{component}@1.{nearest}"].get(flag)


def value_problem(component: str, flag: str, value: str, version: Version) -> str | None:
    """Why `--flag=value` would be refused by `component` at `version`, or None."""
    if any(ord(c) < 0x20 for c in value):
        return None  # refused by the spec's own field validation, with its own message
    kind = value_type(component, flag, version)
    if kind is None or kind not in VALUE_CLASSES:
        return None
    shown, check = VALUE_CLASSES[kind]
    why = check(value.strip() if shown in ("map", "list") else value)
    return None if why is None else f"{value!r}: {why} (--{flag} of {component} {version.minor_key} takes {_an(shown)})"


def _an(kind: str) -> str:
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"
