"""Secrets at rest and in transit.

* :mod:`.at_rest` - AES-256-GCM for every private key a service stores (Redis, ``DIR/.bke``), with
  keyrings read from key files.
* :mod:`.key_kinds` - one key per job (pki, api, signing, snapshot, authority, backup), which
  file each process reads (``BKE_KEY_FILE_<KIND>``, else ``BKE_SECRET_KEY_FILE``).
* :mod:`.sealing` - seal a node's files to that node's agent (X25519 + HKDF-SHA256 + AES-GCM), so
  that only that agent can open them, whatever bus or store they cross.

No module here logs, and no error message ever contains key material.
"""
from .at_rest import (
    SECRET_KEY_ENV,
    DecryptError,
    Keyring,
    SecretBox,
    SecretKeyError,
    SecretKeyInvalid,
    SecretKeyMissing,
    create_key_file,
    load_keyring,
    load_secret_box,
)
from .key_kinds import KIND_NAMES, KeyringFile, box_for, key_file_env, key_file_for, keyring_for
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
    "KIND_NAMES",
    "SECRET_KEY_ENV",
    "DecryptError",
    "Keyring",
    "KeyringFile",
    "NotForThisKey",
    "SealedDataError",
    "SecretBox",
    "SecretKeyError",
    "SecretKeyInvalid",
    "SecretKeyMissing",
    "agent_key_id",
    "box_for",
    "create_key_file",
    "generate_agent_key",
    "key_file_env",
    "key_file_for",
    "keyring_for",
    "load_keyring",
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
