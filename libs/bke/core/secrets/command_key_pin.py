"""The command-signing key an operator's tool gives to agents is pinned, not believed from the bus.

`bke agent bootstrap` asks the dispatcher for its public key on `bke.v1.agents.command-key` and
writes it into each node's environment (BKE_AGENT_COMMAND_KEY): from then on the agent runs
whatever that key signs. On a bus without TLS, or with another identity allowed to answer that
subject, the answer could be anyone's, and every node would obey them. So the operator states
the key beforehand, from a channel BKE controls, and an answer that is not that key is refused
(as `kubeadm join` refuses a discovery whose CA does not hash to `--discovery-token-ca-cert-hash`):

    a fingerprint        `SHA256:<base64>` of the raw key (`CommandVerifyKey.fingerprint`), as
                         `bke state init` prints it
    the public line      `bke-command-ed25519 <base64>`, on the command line or in a file: the
                         file `bke state init --command-key-out FILE` writes, or the lab's
                         `<lab>/command-key.pub` (written where the key is made, never from the bus)

Without a pin the tool refuses, unless told to trust the answer unverified (kubeadm's
`--discovery-token-unsafe-skip-ca-verification`); it then prints the fingerprint it trusted.

Errors (permanent: the same answer gives the same result)::

    PermanentError
     ├─ SigningKeyError      (bke.core.secrets.signing) a pin or an answer that is no Ed25519 key
     └─ CommandKeyMismatch   the bus answered another key than the pinned one: names both
"""
from __future__ import annotations

import base64
import binascii
import os
from dataclasses import dataclass
from pathlib import Path

from bke.core.errors import PermanentError
from .signing import COMMAND_KEY_PREFIX, CommandVerifyKey, SigningKeyError, parse_public_line

__all__ = ["COMMAND_KEY_FILE", "CommandKeyMismatch", "CommandKeyPin", "check_pinned", "parse_pin", "read_pin_file",
           "write_command_key_file"]

COMMAND_KEY_FILE = "command-key.pub"  # the lab's, in its work directory
_FINGERPRINT = "SHA256:"


class CommandKeyMismatch(PermanentError):
    """The key a bus answer names is not the pinned one."""


@dataclass(frozen=True)
class CommandKeyPin:
    fingerprint: str  # SHA256:<base64>
    source: str  # where the pin came from, for messages ("--command-key-fingerprint", a file's path)


def parse_pin(text: str, source: str) -> CommandKeyPin:
    """A `SHA256:...` fingerprint or a public line -> the pin (SigningKeyError if it is neither)."""
    text = text.strip()
    if text.startswith(_FINGERPRINT):
        digest = text[len(_FINGERPRINT):]
        try:
            raw = base64.b64decode(digest + "=" * (-len(digest) % 4), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise SigningKeyError(f"{source}: {text!r} is not a SHA-256 fingerprint (SHA256: and 43 base64 characters)")
        return CommandKeyPin(text.rstrip("="), source)
    if not text.startswith(COMMAND_KEY_PREFIX):
        raise SigningKeyError(f"{source}: expected SHA256:<base64> or '{COMMAND_KEY_PREFIX} <base64>'")
    try:
        return CommandKeyPin(parse_public_line(text).fingerprint, source)
    except SigningKeyError as exc:
        raise SigningKeyError(f"{source}: {exc}") from None


def read_pin_file(path: Path) -> CommandKeyPin:
    """The pin in a file holding the public line (blank lines and `#` comments are skipped);
    OSError if it cannot be read."""
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    if len(lines) != 1:
        raise SigningKeyError(f"{path}: expected one line '{COMMAND_KEY_PREFIX} <base64>', found {len(lines)}")
    return parse_pin(lines[0], str(path))


def check_pinned(answer_line: str, pin: CommandKeyPin) -> CommandVerifyKey:
    """The key a bus answer names, if it is the pinned one; else CommandKeyMismatch."""
    key = parse_public_line(answer_line)
    if key.fingerprint != pin.fingerprint:
        raise CommandKeyMismatch(
            f"the command-signing key the bus answered is {key.fingerprint}, not {pin.fingerprint} ({pin.source}): "
            "the dispatcher signs with another key than the one pinned, or someone else answered on the bus; "
            "no node was given either")
    return key


def write_command_key_file(path: Path, key: CommandVerifyKey) -> Path:
    """Write the public line (public: mode 0644), replacing the file atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(key.public_line + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    return path
