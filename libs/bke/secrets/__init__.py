"""Secrets at rest and in transit.

* :mod:`.at_rest` - AES-256-GCM for every private key a service stores (Redis, ``DIR/.bke``), with
  the operator's key from the file named by ``BKE_SECRET_KEY_FILE``.
* :mod:`.sealing` - seal a node's files to that node's agent (X25519 + HKDF-SHA256 + AES-GCM), so
  that only that agent can open them, whatever bus or store they cross.

Neither module logs, and no error message ever contains key material.
"""
from .at_rest import (
    SECRET_KEY_ENV,
    DecryptError,
    SecretBox,
    SecretKeyError,
    SecretKeyInvalid,
    SecretKeyMissing,
    box_from_env,
    create_key_file,
    load_secret_box,
)
from .sealing import (
    NotForThisKey,
    SealedDataError,
    agent_key_id,
    generate_agent_key,
    open_sealed,
    private_key_from_pem,
    private_key_to_pem,
    public_key_from_pem,
    public_key_from_raw,
    public_key_to_pem,
    public_key_to_raw,
    seal,
)

__all__ = [
    "SECRET_KEY_ENV",
    "DecryptError",
    "NotForThisKey",
    "SealedDataError",
    "SecretBox",
    "SecretKeyError",
    "SecretKeyInvalid",
    "SecretKeyMissing",
    "agent_key_id",
    "box_from_env",
    "create_key_file",
    "generate_agent_key",
    "load_secret_box",
    "open_sealed",
    "private_key_from_pem",
    "private_key_to_pem",
    "public_key_from_pem",
    "public_key_from_raw",
    "public_key_to_pem",
    "public_key_to_raw",
    "seal",
]
