"""A command's kind agrees with the operation its id names.

Why: the kind (the command's phase) is what the host-action table reads, and the signer sets it
freely. Every sender also names each command after its operation, `<cluster>/<slug>/<node>/<n>`:
the install phase itself, `join@<id>`, `health@<round>`, `rotate@<id>`, `reset@<id>`,
`remove@<id>`, `upgrade@<id>@<step>[.<group>]`, `restore@<id>@<stage>`. A command whose kind is
not the one its id's operation sends (a `node-env` command under a reset's id, an upgrade's
runtime step under a health round's) was not built by a sender as written, so the agent refuses
it before anything of it runs. The id is also checked to name the command's own cluster and node.

What this does not do: a holder of the signing key who names a command consistently (a
`node-env` command under an install's id) gets what that kind may do. The signer is trusted for
what its kinds allow; this check makes a mislabelled command (a sender's bug, a phase taken from
an input) fail loudly instead of doing another kind's work.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .table import INSTALL_KINDS

__all__ = ["ORIGINS", "Origin", "origin_refusal"]

_INSTALL = "|".join(map(re.escape, INSTALL_KINDS))
_ID = r"[^\s/]+"  # a request id or a round: no whitespace, no '/' (the id's separator)
_STEP = r"[a-z][a-z-]*"  # an upgrade step's or a restore stage's name


@dataclass(frozen=True)
class Origin:
    """Commands whose id's slug is `slug` carry the kinds `kinds` (both as the docs show them);
    `pattern` matches "<slug> <phase>" (one space), its back references tying the two together."""

    operation: str
    slug: str
    kinds: str
    pattern: str
    why: str


ORIGINS: tuple[Origin, ...] = (
    Origin("install", "<phase>", "the same phase", rf"(?P<k>{_INSTALL}) (?P=k)", "an install phase's command"),
    Origin("join", "join@<id>", "an install phase", rf"join@{_ID} (?:{_INSTALL})",
           "a join sends the install's phases to its nodes"),
    Origin("health round", "health@<round>", "`health`", rf"health@{_ID} health", "the periodic health rounds"),
    Origin("rotation, reset, removal", "<op>@<id>", "`rotate`, `reset`, `remove`",
           rf"(?P<s>(?:rotate|reset|remove)@{_ID}) (?P=s)", "the phase is the slug itself (the kind drops the `@<id>`)"),
    Origin("upgrade, apply", "upgrade@<id>@<step>[.<group>]", "`upgrade:<step>`",
           rf"upgrade@{_ID}@(?P<u>{_STEP})(?:\.[^\s/@]+)? upgrade:(?P=u)", "one step of an upgrade or a changed spec"),
    Origin("etcd restore", "restore@<id>@<stage>", "`etcd-restore:<stage>`",
           rf"restore@{_ID}@(?P<r>{_STEP}) etcd-restore:(?P=r)", "one stage of a restore"),
    Origin("command-key rollover", "command-key", "`command-key`", r"command-key command-key",
           "the next command key announced, or the old one retired, under a key the agent trusts"),
)
_PATTERNS = tuple(re.compile(o.pattern + r"\Z") for o in ORIGINS)


def origin_refusal(command_id: str, phase: str, cluster: str, node: str) -> str | None:
    """Why a command of `phase` may not carry `command_id` (None if the id names the command's
    cluster, its node and an operation that sends this phase)."""
    parts = command_id.split("/")
    if len(parts) != 4 or not all(parts):
        return f"command id {command_id!r}: not <cluster>/<operation>/<node>/<n>"
    if parts[0] != cluster or parts[2] != node:
        return f"command id {command_id!r}: names another cluster or node than the command ({cluster}, {node})"
    slug = parts[1]
    if not any(p.match(f"{slug} {phase}") for p in _PATTERNS):
        return (f"a {phase or '(no kind)'} command is not sent under the id {command_id!r} "
                "(its kind disagrees with the operation its id names; bke.core.host_actions.origins)")
    return None
