"""The dispatcher's command-signing key (Ed25519): only BKE commands an agent.

Why one key for all dispatcher replicas, stored in Redis: any replica may publish any node's
command, and an agent is given one public key when it is provisioned. The key is made once at
deployment (`ensure_command_key`, idempotent: `SET NX`, so concurrent makers agree on one key)
and stored encrypted with the `signing` at-rest key (`bke.core.secrets.key_kinds`) under
`bke.adapters.state.keys.trust.command_signing_key()`, so that a state backup carries it and a reader of Redis
alone cannot sign. The public half is given to each agent at provisioning (the lab supervisor
writes it into the node's state dir; `bke agent bootstrap` ships it over SSH), never learned from
the bus.

What is signed is the command's canonical bytes (`AgentCommand.signing_bytes`: deterministic JSON
of the model without its signature), so any changed field breaks the signature. Among them, the
command's binding to its receiver (the agent's provisioned key id, the cluster's incarnation:
bke.core.secrets.binding), so that it cannot be replayed onto another key or a re-created cluster.

The wire form `signed_command_bytes` writes is those very bytes with the signature put first
(`{"signatureB64":"<sig>",` then the canonical bytes after their `{`): any JSON reader reads
the same command, and an agent finds the signed bytes by cutting the prefix off
(`signed_part`) instead of serialising the parsed command again (at 5,000 nodes, 15,000
commands, the canonical JSON was written twice per command on the sender and once more on
every agent). A body in another form (`AgentCommand.to_bytes`, older senders) is checked as
before, over `signing_bytes()` of the parsed command.

Why this module knows no Redis: the node agent imports it and must not import redis (an
import-linter contract). The store is any object with `get` / `set(..., nx=True)`
(bke.core.secrets.stored_key, which makes this key and the snapshot key the same way).

Errors (permanent: retrying cannot fix a key)::

    PermanentError
     └─ SigningKeyError   a stored key that does not decrypt or is no Ed25519 key; a bad public key
"""
from __future__ import annotations

import base64
import binascii
import hashlib
from datetime import datetime, timedelta
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from bke.contracts.agent import COMMAND_VALIDITY_S, AgentCommand
from bke.core.errors import PermanentError
from .at_rest import SecretBox
from .binding import Binding
from .stored_key import AsyncStore, SyncStore, ensure_stored, ensure_stored_sync

__all__ = [
    "COMMAND_KEY_PREFIX",
    "STORED_KEY_AAD",
    "CommandSigner",
    "CommandVerifyKey",
    "SigningKeyError",
    "ensure_command_key",
    "ensure_command_key_sync",
    "parse_public_line",
    "sign_command",
    "signed_command_bytes",
    "signed_part",
]

COMMAND_KEY_PREFIX = "bke-command-ed25519"  # the public key's one-line form: "<prefix> <base64 raw>"
STORED_KEY_AAD = b"bke/command-signing-key"  # binds the blob to this record (bke.core.secrets.at_rest)
_AAD = STORED_KEY_AAD


class SigningKeyError(PermanentError):
    """The signing key cannot be used (wrong operator key, corrupt record, malformed public key)."""


def _key_id(raw_public: bytes) -> str:
    return hashlib.sha256(raw_public).hexdigest()[:16]


class CommandVerifyKey:
    """The public half, as an agent holds it."""

    def __init__(self, public: Ed25519PublicKey) -> None:
        self._public = public
        self.raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        self.key_id = _key_id(self.raw)

    @classmethod
    def from_b64(cls, text: str) -> CommandVerifyKey:
        try:
            raw = base64.b64decode(text.strip(), validate=True)
            return cls(Ed25519PublicKey.from_public_bytes(raw))
        except (binascii.Error, ValueError) as exc:
            raise SigningKeyError(f"not a base64 Ed25519 public key: {exc}") from None

    @property
    def public_line(self) -> str:
        return f"{COMMAND_KEY_PREFIX} {base64.b64encode(self.raw).decode()}"

    @property
    def fingerprint(self) -> str:
        """`SHA256:<base64>` of the raw public key, as OpenSSH writes a key's fingerprint: what an
        operator pins (bke.core.secrets.command_key_pin)."""
        return "SHA256:" + base64.b64encode(hashlib.sha256(self.raw).digest()).decode().rstrip("=")

    def verify(self, data: bytes, signature_b64: str) -> bool:
        try:
            self._public.verify(base64.b64decode(signature_b64, validate=True), data)
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return True


def parse_public_line(text: str) -> CommandVerifyKey:
    """`bke-command-ed25519 <base64>` (or the bare base64) -> the key."""
    parts = text.split()
    if len(parts) == 2 and parts[0] == COMMAND_KEY_PREFIX:
        return CommandVerifyKey.from_b64(parts[1])
    if len(parts) == 1:
        return CommandVerifyKey.from_b64(parts[0])
    raise SigningKeyError(f"expected '{COMMAND_KEY_PREFIX} <base64>'")


class CommandSigner:
    """The private half, as the dispatcher holds it. `repr` shows only the key id."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.verify_key = CommandVerifyKey(key.public_key())
        self.key_id = self.verify_key.key_id

    def __repr__(self) -> str:
        return f"CommandSigner(key_id={self.key_id})"

    @classmethod
    def generate(cls) -> CommandSigner:
        return cls(Ed25519PrivateKey.generate())

    def sign(self, data: bytes) -> str:
        return base64.b64encode(self._key.sign(data)).decode()

    def seal_for_store(self, box: SecretBox) -> bytes:
        raw = self._key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                                      serialization.NoEncryption())
        return box.encrypt(raw, _AAD)

    @classmethod
    def from_store(cls, blob: bytes, box: SecretBox) -> CommandSigner:
        raw = box.decrypt(blob, _AAD)  # DecryptError (permanent) names the wrong key, never content
        try:
            return cls(Ed25519PrivateKey.from_private_bytes(raw))
        except ValueError:
            raise SigningKeyError("the stored command-signing key is not an Ed25519 key") from None


async def ensure_command_key(store: AsyncStore, name: str, box: SecretBox) -> CommandSigner:
    """The deployment's signing key, made if missing (concurrent callers get the same key)."""
    return await ensure_stored(store, name, box, CommandSigner)


def ensure_command_key_sync(store: SyncStore, name: str, box: SecretBox) -> CommandSigner:
    """`ensure_command_key` for synchronous callers (the lab supervisor)."""
    return ensure_stored_sync(store, name, box, CommandSigner)


def _unsigned(cmd: AgentCommand, signer: CommandSigner, validity_s: float, binding: Binding | None) -> AgentCommand:
    """`cmd` valid from its `issued_at` for `validity_s`, with the key id and, given one, bound
    to its receiver (bke.core.secrets.binding), not yet signed."""
    expires = datetime.fromisoformat(cmd.issued_at) + timedelta(seconds=validity_s)
    update: dict[str, Any] = {"expires_at": expires.isoformat(), "key_id": signer.key_id, "signature_b64": ""}
    if binding is not None:
        update.update(agent_id=binding.agent_id, incarnation=binding.incarnation)
    if binding is None or not binding.operation_refs:
        update["operation"] = None  # an agent of an earlier release refuses a field it does not know
    return cmd.model_copy(update=update)


def sign_command(cmd: AgentCommand, signer: CommandSigner, validity_s: float = COMMAND_VALIDITY_S,
                 binding: Binding | None = None) -> AgentCommand:
    """`cmd` valid from its `issued_at` for `validity_s`, with the key id, the binding and signature."""
    unsigned = _unsigned(cmd, signer, validity_s, binding)
    return unsigned.model_copy(update={"signature_b64": signer.sign(unsigned.signing_bytes())})


_SIGNATURE_KEY = b'{"signatureB64":"'


def signed_command_bytes(cmd: AgentCommand, signer: CommandSigner, validity_s: float = COMMAND_VALIDITY_S,
                         binding: Binding | None = None) -> bytes:
    """The wire body of `sign_command(cmd, signer, binding=binding)` in the form the module
    docstring describes: the canonical bytes are written once, signed, and sent as they are
    behind the signature."""
    canonical = _unsigned(cmd, signer, validity_s, binding).signing_bytes()
    # canonical is a JSON object with members (command id, steps...): "{" + members + "}"
    return _SIGNATURE_KEY + signer.sign(canonical).encode() + b'",' + canonical[1:]


def signed_part(body: bytes, signature_b64: str) -> bytes | None:
    """The canonical bytes inside a body `signed_command_bytes` wrote whose signature field
    says `signature_b64` (that of the command parsed from `body`), else None. Why this is safe:
    the cut-off part is exactly what is then verified, and the command run is `body` read
    whole, which is that part plus the signature member: the signer never puts a signature
    member in its canonical bytes, so a verified part holds none to override it."""
    head = _SIGNATURE_KEY + signature_b64.encode() + b'",'
    if not body.startswith(head):
        return None
    return b"{" + body[len(head):]
