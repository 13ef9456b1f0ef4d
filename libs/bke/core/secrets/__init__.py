"""Secrets at rest and in transit.

* :mod:`.at_rest` - AES-256-GCM for every private key a service stores (Redis, ``DIR/.bke``), with
  keyrings read from key files.
* :mod:`.key_kinds` - one key per job (pki, api, signing, snapshot, authority, backup), which
  file each process reads (``BKE_KEY_FILE_<KIND>``, else ``BKE_SECRET_KEY_FILE``).
* :mod:`.sealing` - seal a node's files to that node's agent (X25519 + HKDF-SHA256 + AES-GCM), so
  that only that agent can open them, whatever bus or store they cross.

No module here logs, and no error message ever contains key material.
"""
from . import sealing
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
from .sealing import *  # noqa: F403 - re-exported whole: its own __all__ names its surface

__all__ = [
    "KIND_NAMES",
    "SECRET_KEY_ENV",
    "DecryptError",
    "Keyring",
    "KeyringFile",
    "SecretBox",
    "SecretKeyError",
    "SecretKeyInvalid",
    "SecretKeyMissing",
    "box_for",
    "create_key_file",
    "key_file_env",
    "key_file_for",
    "keyring_for",
    "load_keyring",
    "load_secret_box",
]
__all__ += sealing.__all__
