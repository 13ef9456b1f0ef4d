"""Kubernetes' syntax for label keys and values, checked when the spec is read: a label the
apiserver would refuse (422) must fail `bke plan` with its field path, not the install's
node-labels phase after every node is up.

The rules, read from k8s.io/apimachinery pkg/util/validation/validation.go (IsQualifiedName,
IsValidLabelValue, IsDNS1123Subdomain; unchanged from 1.31 to 1.37): a key is an optional
prefix (a DNS-1123 subdomain of at most 253 characters) and `/`, then a name of at most 63
characters, alphanumeric at both ends with `-`, `_`, `.` inside; a value is empty or a name.
"""
from __future__ import annotations

import re

__all__ = ["label_errors"]

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
NAME_MAX, PREFIX_MAX = 63, 253


def _name_errors(name: str, what: str) -> list[str]:
    if len(name) > NAME_MAX:
        return [f"{what} {name!r} is longer than {NAME_MAX} characters"]
    if not _NAME.match(name):
        return [f"{what} {name!r} must be letters, digits, '-', '_' or '.', beginning and ending with a letter or digit"]
    return []


def label_errors(key: str, value: str) -> list[str]:
    """What is wrong with one label, as messages (empty: a label the apiserver accepts)."""
    errs: list[str] = []
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            errs.append(f"label key {key!r}: the prefix before '/' is empty")
        elif len(prefix) > PREFIX_MAX or not _DNS1123_SUBDOMAIN.match(prefix):
            errs.append(f"label key {key!r}: prefix {prefix!r} must be a lowercase DNS subdomain of at most {PREFIX_MAX} characters")
    errs += [f"label key {key!r}: {e}" for e in _name_errors(name, "name")] if name else [f"label key {key!r}: the name is empty"]
    if value:
        errs += [f"label value {value!r}: {e}" for e in _name_errors(value, "value")]
    return errs
